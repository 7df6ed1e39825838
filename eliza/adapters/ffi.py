"""ctypes binding of the libelizainference C ABI (native/include/eliza-inference-ffi.h).

A thin adapter: every call checks the status, frees the library's strings, and raises
ElizaError(code, message) on failure. Tests drive the real library through this module.
"""

from __future__ import annotations

import ctypes
import functools
import platform
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from eliza.adapters.errors import ToolError
from eliza.core.c_abi import abi_version
from eliza.core.layout import REPO_ROOT, public_header


@functools.cache
def expected_abi_version() -> str:
    """ELIZA_INFERENCE_ABI_VERSION of the public header, the one place it is defined."""
    header = public_header(REPO_ROOT)
    return abi_version(header.read_text(encoding="utf-8"), str(header))


OK = 0
ERR_NOT_IMPLEMENTED = -1
ERR_INVALID_ARG = -2
ERR_BUNDLE_INVALID = -3
ERR_FFI_FAULT = -4
ERR_OOM = -5
ERR_ABI_MISMATCH = -6
ERR_CANCELLED = -7

STATUS_NAMES = {
    OK: "ELIZA_OK",
    ERR_NOT_IMPLEMENTED: "ELIZA_ERR_NOT_IMPLEMENTED",
    ERR_INVALID_ARG: "ELIZA_ERR_INVALID_ARG",
    ERR_BUNDLE_INVALID: "ELIZA_ERR_BUNDLE_INVALID",
    ERR_FFI_FAULT: "ELIZA_ERR_FFI_FAULT",
    ERR_OOM: "ELIZA_ERR_OOM",
    ERR_ABI_MISMATCH: "ELIZA_ERR_ABI_MISMATCH",
    ERR_CANCELLED: "ELIZA_ERR_CANCELLED",
}


class ElizaError(ToolError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{STATUS_NAMES.get(code, str(code))}: {message}")
        self.code = code
        self.message = message


class StreamConfig(ctypes.Structure):
    """eliza_llm_stream_config_t; layout asserted against the C offsets in the tests."""

    _fields_ = [
        ("max_tokens", ctypes.c_int32),
        ("temperature", ctypes.c_float),
        ("top_p", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("repeat_penalty", ctypes.c_float),
        ("slot_id", ctypes.c_int32),
        ("prompt_cache_key", ctypes.c_char_p),
        ("draft_min", ctypes.c_int32),
        ("draft_max", ctypes.c_int32),
        ("mtp_drafter_path", ctypes.c_char_p),
        ("gbnf_grammar", ctypes.c_char_p),
        ("disable_thinking", ctypes.c_int32),
    ]


def greedy_config(max_tokens: int = 32, **overrides: Any) -> StreamConfig:
    cfg = StreamConfig(max_tokens=max_tokens, temperature=0.0, top_p=1.0, top_k=0, repeat_penalty=1.0)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


_p = ctypes.c_void_p
_perr = ctypes.POINTER(ctypes.c_void_p)
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "eliza_inference_abi_version": (ctypes.c_char_p, []),
    "eliza_inference_free_string": (None, [_p]),
    "eliza_inference_create": (_p, [ctypes.c_char_p, _perr]),
    "eliza_inference_destroy": (None, [_p]),
    "eliza_inference_tokenize_supported": (ctypes.c_int, []),
    "eliza_inference_tokenize": (
        ctypes.c_int,
        [
            _p,
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(ctypes.POINTER(ctypes.c_int)),
            ctypes.POINTER(ctypes.c_size_t),
            _perr,
        ],
    ),
    "eliza_inference_detokenize": (
        ctypes.c_int,
        [
            _p,
            ctypes.POINTER(ctypes.c_int32),
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_size_t),
            _perr,
        ],
    ),
    "eliza_inference_free_tokens": (None, [ctypes.POINTER(ctypes.c_int)]),
    "eliza_inference_llm_stream_supported": (ctypes.c_int, []),
    "eliza_inference_llm_stream_open": (_p, [_p, ctypes.POINTER(StreamConfig), _perr]),
    "eliza_inference_llm_stream_prefill": (
        ctypes.c_int,
        [_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, _perr],
    ),
    "eliza_inference_llm_stream_next": (
        ctypes.c_int,
        [
            _p,
            ctypes.POINTER(ctypes.c_int32),
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_int32),
            ctypes.POINTER(ctypes.c_int32),
            _perr,
        ],
    ),
    "eliza_inference_llm_stream_cancel": (ctypes.c_int, [_p]),
    "eliza_inference_llm_stream_reset": (ctypes.c_int, [_p]),
    "eliza_inference_llm_stream_reset_keep": (ctypes.c_int, [_p, ctypes.c_int32]),
    "eliza_inference_llm_stream_save_slot": (ctypes.c_int, [_p, ctypes.c_char_p, _perr]),
    "eliza_inference_llm_stream_restore_slot": (ctypes.c_int, [_p, ctypes.c_char_p, _perr]),
    "eliza_inference_llm_stream_close": (None, [_p]),
}


class LibraryLoadError(ToolError):
    """The library could not be loaded into this process: a missing file, another
    architecture, a missing dependency, not a shared library, or not ours."""


# ELF e_machine values of the architectures the matrix builds for, by platform.machine()'s
# names of the host.
_ELF_MACHINES = {3: "x86", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv64"}


def _elf_machine(path: Path) -> str | None:
    """The architecture an ELF file was built for, or None (not ELF, unreadable, unknown)."""
    try:
        with path.open("rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    number = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
    return _ELF_MACHINES.get(number, f"ELF machine {number}")


def _load(path: Path) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        # dlerror() names the file first ("<path>: invalid ELF header"); for a library of
        # another architecture glibc says only "cannot open shared object file", so the
        # file's own ELF header tells what it is.
        reason = str(exc).removeprefix(f"{path}: ")
        machine, here = _elf_machine(path), platform.machine()
        if path.is_file() and machine is not None and machine != here:
            reason = f"it is {machine} code and this process is {here}"
        raise LibraryLoadError(f"{path}: cannot be loaded into this process: {reason}") from None


class Library:
    """The loaded shared library with typed signatures."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lib = _load(path)
        missing = [name for name in _SIGNATURES if not hasattr(self.lib, name)]
        if missing:
            raise LibraryLoadError(
                f"{path}: not a libelizainference of this binding: it lacks {', '.join(missing[:3])}"
                + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            )
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        version = self.lib.eliza_inference_abi_version()
        expected = expected_abi_version()
        if version is None or version.decode() != expected:
            raise ElizaError(
                ERR_ABI_MISMATCH, f"{path}: ABI version {version!r}, this binding expects {expected!r}"
            )

    def take_error(self, err: ctypes.c_void_p) -> str:
        if not err.value:
            return ""
        text = ctypes.string_at(err.value).decode("utf-8", errors="replace")
        self.lib.eliza_inference_free_string(err)
        err.value = None
        return text

    def check(self, rc: int, err: ctypes.c_void_p) -> int:
        message = self.take_error(err)
        if rc < 0:
            raise ElizaError(rc, message)
        return rc

    def open_context(self, bundle_dir: Path | str | None) -> Context:
        err = ctypes.c_void_p()
        arg = None if bundle_dir is None else str(bundle_dir).encode()
        handle = self.lib.eliza_inference_create(arg, ctypes.byref(err))
        message = self.take_error(err)
        if not handle:
            raise ElizaError(_code_from_message(message, ERR_BUNDLE_INVALID), message)
        return Context(self, handle)


def _code_from_message(message: str, default: int) -> int:
    # _create returns a handle, not a status; the message's nature tells the class.
    return ERR_INVALID_ARG if "NULL or empty" in message or "ELIZA_N_" in message else default


class _HeldHandles:
    """Under LeakSanitizer (a sanitizer build loaded with its runtime preloaded): the
    handles this binding holds, written into a block the leak checker treats as a root
    (`__lsan_ignore_object`). Python keeps a handle as an integer, which the checker cannot
    see as a pointer, so without this a host that ends with contexts or streams still open
    would read as leaks of the library; a handle leaves the block when it is closed, so
    what destroy/close fail to free is still reported. Elsewhere it does nothing."""

    SLOTS = 1 << 14

    def __init__(self) -> None:
        self.slots: Any = None
        self.free: list[int] = []
        try:
            process = ctypes.CDLL(None)
            # getattr: written as an attribute inside a class, the name would be mangled
            ignore = getattr(process, "__lsan_ignore_object")
        except (OSError, AttributeError):
            return
        process.calloc.restype = ctypes.c_void_p
        process.calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
        block = process.calloc(self.SLOTS, ctypes.sizeof(ctypes.c_void_p))
        if not block:
            return
        ignore.argtypes = [ctypes.c_void_p]
        ignore(block)
        self.slots = (ctypes.c_void_p * self.SLOTS).from_address(block)
        self.free = list(range(self.SLOTS - 1, -1, -1))

    def hold(self, handle: int) -> int | None:
        if self.slots is None or not self.free:
            return None
        slot = self.free.pop()
        self.slots[slot] = handle
        return slot

    def release(self, slot: int | None) -> None:
        if self.slots is not None and slot is not None:
            self.slots[slot] = None
            self.free.append(slot)


@functools.cache
def _held() -> _HeldHandles:
    return _HeldHandles()


class Context:
    def __init__(self, lib: Library, handle: int) -> None:
        self.lib = lib
        self.handle: int | None = handle
        self._slot = _held().hold(handle)

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.handle:
            self.lib.lib.eliza_inference_destroy(self.handle)
            self.handle = None
            _held().release(self._slot)
            self._slot = None

    def tokenize(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> list[int]:
        data = text.encode() if isinstance(text, str) else text
        out = ctypes.POINTER(ctypes.c_int)()
        n = ctypes.c_size_t()
        err = ctypes.c_void_p()
        rc = self.lib.lib.eliza_inference_tokenize(
            self.handle,
            data,
            len(data),
            int(add_special),
            int(parse_special),
            ctypes.byref(out),
            ctypes.byref(n),
            ctypes.byref(err),
        )
        self.lib.check(rc, err)
        try:
            return [out[i] for i in range(n.value)]
        finally:
            self.lib.lib.eliza_inference_free_tokens(out)

    def detokenize(
        self, tokens: Sequence[int], remove_special: bool = False, unparse_special: bool = False
    ) -> bytes:
        arr = (ctypes.c_int32 * len(tokens))(*tokens)
        out = ctypes.c_void_p()
        n = ctypes.c_size_t()
        err = ctypes.c_void_p()
        rc = self.lib.lib.eliza_inference_detokenize(
            self.handle,
            arr,
            len(tokens),
            int(remove_special),
            int(unparse_special),
            ctypes.byref(out),
            ctypes.byref(n),
            ctypes.byref(err),
        )
        self.lib.check(rc, err)
        try:
            return ctypes.string_at(out.value, n.value) if out.value else b""
        finally:
            self.lib.lib.eliza_inference_free_string(out)

    def open_stream(self, cfg: StreamConfig | None = None) -> Stream:
        cfg = cfg or greedy_config()
        err = ctypes.c_void_p()
        handle = self.lib.lib.eliza_inference_llm_stream_open(
            self.handle, ctypes.byref(cfg), ctypes.byref(err)
        )
        message = self.lib.take_error(err)
        if not handle:
            code = ERR_NOT_IMPLEMENTED if "not implemented" in message else ERR_INVALID_ARG
            raise ElizaError(code, message)
        return Stream(self.lib, handle)


@dataclass(frozen=True)
class Step:
    status: int  # 0 more, 1 final
    tokens: list[int]
    text: bytes
    drafted: int
    accepted: int


class Stream:
    TEXT_CAP = 4096

    def __init__(self, lib: Library, handle: int) -> None:
        self.lib = lib
        self.handle: int | None = handle
        self._slot = _held().hold(handle)

    def __enter__(self) -> Stream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self.handle:
            self.lib.lib.eliza_inference_llm_stream_close(self.handle)
            self.handle = None
            _held().release(self._slot)
            self._slot = None

    def prefill(self, tokens: Sequence[int]) -> None:
        arr = (ctypes.c_int32 * max(1, len(tokens)))(*tokens)
        err = ctypes.c_void_p()
        self.lib.check(
            self.lib.lib.eliza_inference_llm_stream_prefill(self.handle, arr, len(tokens), ctypes.byref(err)),
            err,
        )

    def next(self, tokens_cap: int = 16, text_cap: int = TEXT_CAP) -> Step:
        toks = (ctypes.c_int32 * max(1, tokens_cap))()
        n = ctypes.c_size_t()
        text = ctypes.create_string_buffer(max(1, text_cap))
        drafted = ctypes.c_int32(-1)
        accepted = ctypes.c_int32(-1)
        err = ctypes.c_void_p()
        rc = self.lib.lib.eliza_inference_llm_stream_next(
            self.handle,
            toks,
            tokens_cap,
            ctypes.byref(n),
            text,
            text_cap,
            ctypes.byref(drafted),
            ctypes.byref(accepted),
            ctypes.byref(err),
        )
        self.lib.check(rc, err)
        return Step(rc, [toks[i] for i in range(n.value)], text.value, drafted.value, accepted.value)

    def steps(self) -> Iterator[Step]:
        while True:
            step = self.next()
            yield step
            if step.status == 1:
                return

    def generate(self) -> tuple[list[int], bytes]:
        tokens: list[int] = []
        text = b""
        for step in self.steps():
            tokens += step.tokens
            text += step.text
        return tokens, text

    def cancel(self) -> int:
        return int(self.lib.lib.eliza_inference_llm_stream_cancel(self.handle))

    def reset(self) -> int:
        return int(self.lib.lib.eliza_inference_llm_stream_reset(self.handle))

    def reset_keep(self, n_keep: int) -> int:
        return int(self.lib.lib.eliza_inference_llm_stream_reset_keep(self.handle, n_keep))

    def save_slot(self, path: Path) -> None:
        err = ctypes.c_void_p()
        self.lib.check(
            self.lib.lib.eliza_inference_llm_stream_save_slot(
                self.handle, str(path).encode(), ctypes.byref(err)
            ),
            err,
        )

    def restore_slot(self, path: Path) -> None:
        err = ctypes.c_void_p()
        self.lib.check(
            self.lib.lib.eliza_inference_llm_stream_restore_slot(
                self.handle, str(path).encode(), ctypes.byref(err)
            ),
            err,
        )
