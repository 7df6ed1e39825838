"""ctypes binding of libelizainference_testkit (native/testkit/testkit.cpp), and the host's
runner of the seam table's steps (case_runner runs the same steps on a target)."""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters.ffi import Library, greedy_config
from eliza.formats.case_tables import SeamCase, SeamStep, StepResult

# What every seam case's stream is opened with and steps with (native/cases/seam.cases).
SEAM_MAX_TOKENS = 4
SEAM_TOKENS_CAP = 16
SEAM_TEXT_CAP = 256
# How long the canceller waits for the fake to block in next (qemu runs the same wait).
IN_NEXT_TIMEOUT_MS = 10_000


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
        kit.eliza_testkit_register_fake_session.restype = ctypes.c_int
        kit.eliza_testkit_register_fake_session.argtypes = [
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_void_p),
        ]
        kit.eliza_testkit_context_without_model.restype = ctypes.c_void_p
        kit.eliza_testkit_context_without_model.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        kit.eliza_testkit_context_holders.restype = ctypes.c_int
        kit.eliza_testkit_context_holders.argtypes = [ctypes.c_void_p]
        kit.eliza_testkit_sessions_live.restype = ctypes.c_int
        kit.eliza_testkit_sessions_live.argtypes = []
        kit.eliza_testkit_session_held.restype = ctypes.c_void_p
        kit.eliza_testkit_session_held.argtypes = []
        kit.eliza_testkit_session_wait_in_next.restype = ctypes.c_int
        kit.eliza_testkit_session_wait_in_next.argtypes = [ctypes.c_int]

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

    def register_fake_session(
        self, name: str, session: str, *, available: bool = True, can_serve: bool = True, rank: int = 10
    ) -> int:
        """1 registered, 0 the name was taken; a spec the kit refuses raises with its reason."""
        err = ctypes.c_void_p()
        rc = self.lib.eliza_testkit_register_fake_session(
            name.encode(), int(available), int(can_serve), rank, session.encode(), ctypes.byref(err)
        )
        return self.check(rc, err)

    def sessions_live(self) -> int:
        return int(self.lib.eliza_testkit_sessions_live())

    def session_held(self) -> tuple[int, ...] | None:
        """The tokens the most recently opened fake session holds; None once it is closed."""
        raw = ctypes.c_void_p(self.lib.eliza_testkit_session_held())
        if not raw.value:
            return None
        return tuple(int(w) for w in self.take_error(raw).split())

    @contextmanager
    def seam_case(self, case: SeamCase, slot: Path) -> Iterator[SeamRun]:
        """A stream the case's fakes serve, on a context without a model; closed and
        destroyed afterwards whatever the steps did."""
        for fake in case.fakes:
            self.register_fake_session(
                fake.name, case.session, available=fake.available, can_serve=fake.can_serve, rank=fake.rank
            )
        err = ctypes.c_void_p()
        ctx = self.lib.eliza_testkit_context_without_model(b"/bundle", ctypes.byref(err))
        message = self.take_error(err)
        assert ctx, f"eliza_testkit_context_without_model: {message}"
        try:
            cfg = greedy_config(SEAM_MAX_TOKENS)
            saved = os.environ.get("ELIZA_LLM_BACKEND")
            _set_env("ELIZA_LLM_BACKEND", case.env)
            try:
                stream = self.lib.eliza_inference_llm_stream_open(ctx, ctypes.byref(cfg), ctypes.byref(err))
            finally:
                _set_env("ELIZA_LLM_BACKEND", saved)
            message = self.take_error(err)
            assert stream, f"_open did not reach a fake: {message}"
            run = SeamRun(self, ctx, stream, slot)
            try:
                yield run
            finally:
                run.close()
        finally:
            self.lib.eliza_inference_destroy(ctx)

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


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


class SeamRun:
    """One seam case's stream: each step calls the C ABI as a consumer would and reports
    what it observed, for SeamStep.judge."""

    def __init__(self, kit: TestKit, ctx: int, stream: int, slot: Path) -> None:
        self.kit = kit
        self.ctx = ctx
        self.stream: int | None = stream
        self.slot = slot

    def close(self) -> None:
        if self.stream:
            self.kit.lib.eliza_inference_llm_stream_close(self.stream)
            self.stream = None

    def _with_message(self, rc: int, err: ctypes.c_void_p) -> StepResult:
        return StepResult(rc=rc, message=self.kit.take_error(err))

    def _next(self) -> StepResult:
        lib = self.kit.lib
        toks = (ctypes.c_int32 * SEAM_TOKENS_CAP)()
        n = ctypes.c_size_t()
        text = ctypes.create_string_buffer(SEAM_TEXT_CAP)
        drafted = ctypes.c_int32(-1)
        accepted = ctypes.c_int32(-1)
        err = ctypes.c_void_p()
        rc = lib.eliza_inference_llm_stream_next(
            self.stream,
            toks,
            SEAM_TOKENS_CAP,
            ctypes.byref(n),
            text,
            SEAM_TEXT_CAP,
            ctypes.byref(drafted),
            ctypes.byref(accepted),
            ctypes.byref(err),
        )
        return StepResult(
            rc=rc,
            message=self.kit.take_error(err),
            tokens=tuple(toks[i] for i in range(n.value)),
            text=text.value.decode("utf-8", errors="replace"),
            drafted=drafted.value,
            accepted=accepted.value,
        )

    def _cancel_during_next(self) -> StepResult:
        """next on a worker thread; this thread cancels once the fake reports it blocked."""
        out: list[StepResult] = []
        worker = threading.Thread(target=lambda: out.append(self._next()), daemon=True)
        worker.start()
        in_next = self.kit.lib.eliza_testkit_session_wait_in_next(IN_NEXT_TIMEOUT_MS) == 1
        cancelled = int(self.kit.lib.eliza_inference_llm_stream_cancel(self.stream))
        worker.join(60)
        assert not worker.is_alive(), "next did not return after the cancel"
        assert in_next, "next never blocked in the fake: the cancel did not land mid-call"
        assert cancelled == 0, f"_cancel returned {cancelled}"
        return out[0]

    def step(self, step: SeamStep) -> StepResult:
        lib = self.kit.lib
        assert self.stream, f"{step.call} after close"
        err = ctypes.c_void_p()
        if step.call == "prefill":
            ids = (ctypes.c_int32 * max(1, len(step.args)))(*step.args)
            rc = lib.eliza_inference_llm_stream_prefill(self.stream, ids, len(step.args), ctypes.byref(err))
            return self._with_message(rc, err)
        if step.call == "next":
            return self._next()
        if step.call == "cancel-during-next":
            return self._cancel_during_next()
        if step.call == "cancel":
            return StepResult(rc=lib.eliza_inference_llm_stream_cancel(self.stream))
        if step.call == "reset":
            return StepResult(rc=lib.eliza_inference_llm_stream_reset(self.stream))
        if step.call == "reset_keep":
            return StepResult(rc=lib.eliza_inference_llm_stream_reset_keep(self.stream, step.args[0]))
        if step.call in ("save_slot", "restore_slot"):
            fn = getattr(lib, f"eliza_inference_llm_stream_{step.call}")
            return self._with_message(fn(self.stream, str(self.slot).encode(), ctypes.byref(err)), err)
        if step.call == "held":
            return StepResult(held=self.kit.session_held())
        assert step.call == "close", step.call
        live = self.kit.sessions_live()
        self.close()
        freed = self.kit.sessions_live() == live - 1 and self.kit.session_held() is None
        return StepResult(closed=freed and lib.eliza_testkit_context_holders(self.ctx) == 1)
