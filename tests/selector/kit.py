"""ctypes binding of libelizainference_testkit (native/testkit/testkit.cpp)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters.ffi import Library


@dataclass(frozen=True)
class Builtin:
    """A gate compiled into the kit's build: its index, gate id, factory name() and rank."""

    index: int
    gate: str
    name: str
    rank: int


class TestKit(Library):
    __test__ = False  # not a pytest class

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        kit = self.lib
        kit.eliza_testkit_clear_registry.restype = None
        kit.eliza_testkit_clear_registry.argtypes = []
        kit.eliza_testkit_register_builtins.restype = None
        kit.eliza_testkit_register_builtins.argtypes = []
        kit.eliza_testkit_register_fake.restype = ctypes.c_int
        kit.eliza_testkit_register_fake.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        kit.eliza_testkit_select.restype = ctypes.c_int
        kit.eliza_testkit_select.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_void_p),
        ]
        kit.eliza_testkit_fake_opens.restype = ctypes.c_int
        kit.eliza_testkit_fake_opens.argtypes = [ctypes.c_char_p]
        kit.eliza_testkit_registered.restype = ctypes.c_void_p
        kit.eliza_testkit_registered.argtypes = []
        kit.eliza_testkit_builtin_count.restype = ctypes.c_int
        kit.eliza_testkit_builtin_count.argtypes = []
        for fn in (kit.eliza_testkit_builtin_gate, kit.eliza_testkit_builtin_name):
            fn.restype = ctypes.c_char_p  # static strings: nothing to free
            fn.argtypes = [ctypes.c_int]
        kit.eliza_testkit_builtin_can_serve.restype = ctypes.c_int
        kit.eliza_testkit_builtin_can_serve.argtypes = [ctypes.c_int, ctypes.c_char_p]
        kit.eliza_testkit_builtin_rank.restype = ctypes.c_int
        kit.eliza_testkit_builtin_rank.argtypes = [ctypes.c_int]

    def clear(self) -> None:
        self.lib.eliza_testkit_clear_registry()

    def register_builtins(self) -> None:
        self.lib.eliza_testkit_register_builtins()

    def register_fake(
        self, name: str, *, available: bool = True, can_serve: bool = True, rank: int = 10
    ) -> bool:
        return bool(self.lib.eliza_testkit_register_fake(name.encode(), int(available), int(can_serve), rank))

    def select(
        self,
        bundle_dir: str = "/bundle",
        env: str | None = None,
        *,
        use_env: bool = False,
    ) -> tuple[int, str | None, str | None]:
        """(status, chosen factory name or None, error text or None)."""
        name = ctypes.c_void_p()
        err = ctypes.c_void_p()
        rc = self.lib.eliza_testkit_select(
            bundle_dir.encode(),
            None if env is None else env.encode(),
            int(use_env),
            ctypes.byref(name),
            ctypes.byref(err),
        )
        chosen = self.take_error(name) or None
        error = self.take_error(err) or None
        return rc, chosen, error

    def fake_opens(self, name: str) -> int:
        return int(self.lib.eliza_testkit_fake_opens(name.encode()))

    def registered(self) -> list[str]:
        raw = ctypes.c_void_p(self.lib.eliza_testkit_registered())
        text = self.take_error(raw)
        return [n for n in text.split(", ") if n]

    def builtins(self) -> list[Builtin]:
        """The gates ON in this build, in matrix order, as their compiled factories report them."""
        count = self.lib.eliza_testkit_builtin_count()
        assert count >= 0, "the kit could not build its table of built-in gates"
        out = []
        for i in range(count):
            gate = self.lib.eliza_testkit_builtin_gate(i)
            name = self.lib.eliza_testkit_builtin_name(i)
            assert gate is not None and name is not None, i
            out.append(Builtin(i, gate.decode(), name.decode(), self.lib.eliza_testkit_builtin_rank(i)))
        return out

    def builtin_can_serve(self, builtin: Builtin, bundle_dir: Path) -> bool:
        rc = self.lib.eliza_testkit_builtin_can_serve(builtin.index, str(bundle_dir).encode())
        assert rc in (0, 1), rc
        return rc == 1
