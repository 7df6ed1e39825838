"""Fuzz targets of the C ABI, driven through ctypes: each takes the fuzzer's bytes and
turns them into one call's arguments. A target raises `Violation` when the library breaks
its contract (an error code it must not return, a result that contradicts the input, a
stream left unusable); any crash is the sanitizer's to report.

Run by `nox -s fuzz` (atheris, under the sanitizer variant) and replayed by
tests/native/test_fuzz_corpus.py over the seed corpus and the regressions in the default
suite. The inputs that once broke something are kept under `regressions/<target>/`.
"""

from __future__ import annotations

import ctypes
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

from eliza.adapters.ffi import (
    ERR_BUNDLE_INVALID,
    ERR_CANCELLED,
    ERR_INVALID_ARG,
    Context,
    ElizaError,
    Library,
    Stream,
    greedy_config,
)
from tests.native.helpers import xxh64

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
REGRESSIONS = HERE / "regressions"
PROMPT = "Once upon a time there was"


class Violation(AssertionError):
    """The library answered against its contract."""


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise Violation(what)


class Harness:
    """One library, one context and one stream, reused by every input (as a host app
    would), plus a slot file saved from a real stream for the slot target to mutate."""

    def __init__(self, lib: Library, bundle: Path, work: Path) -> None:
        self.lib = lib
        self.bundle = bundle
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.ctx: Context = lib.open_context(bundle)
        self.stream: Stream = self.ctx.open_stream(greedy_config(8))
        self.n_vocab = self._vocab_size()
        self.prompt = self.ctx.tokenize(PROMPT)
        self.slot = work / "seed-slot.bin"
        with self.ctx.open_stream(greedy_config(8)) as s:
            s.prefill(self.prompt)
            s.next()
            s.save_slot(self.slot)
        self.slot_bytes = self.slot.read_bytes()
        # The handles as pointers in C memory: a fuzzer ends the process without closing
        # them, and the leak checker must see them held, not lost.
        self._held = (ctypes.c_void_p * 2)(self.ctx.handle, self.stream.handle)

    def _vocab_size(self) -> int:
        low, high = 0, 1 << 20  # the largest id detokenize accepts, + 1
        while low + 1 < high:
            mid = (low + high) // 2
            try:
                self.ctx.detokenize([mid])
                low = mid
            except ElizaError:
                high = mid
        return high

    def fresh_stream(self) -> Stream:
        self.stream.reset()
        return self.stream

    def close(self) -> None:
        self.stream.close()
        self.ctx.close()


def _ints(data: bytes) -> list[int]:
    n = len(data) // 4
    return list(struct.unpack(f"<{n}i", data[: n * 4]))


def tokenize(h: Harness, data: bytes) -> None:
    flags, text = (data[0], data[1:]) if data else (0, b"")
    tokens = h.ctx.tokenize(text, add_special=bool(flags & 1), parse_special=bool(flags & 2))
    _expect(all(0 <= t < h.n_vocab for t in tokens), "tokenize returned an id outside the vocabulary")
    if not flags & 3 and _is_utf8(text):
        # valid UTF-8 without special tokens comes back from detokenize byte for byte
        # (SentencePiece adds a leading space to the first word and removes it again)
        back = h.ctx.detokenize(tokens)
        _expect(back.removeprefix(b" ") == text.removeprefix(b" "), f"{text!r} came back as {back!r}")


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def detokenize(h: Harness, data: bytes) -> None:
    flags, ids = (data[0], _ints(data[1:])) if data else (0, [])
    valid = all(0 <= t < h.n_vocab for t in ids)
    try:
        h.ctx.detokenize(ids, remove_special=bool(flags & 1), unparse_special=bool(flags & 2))
    except ElizaError as exc:
        _expect(not valid and exc.code == ERR_INVALID_ARG, f"detokenize of valid ids failed: {exc}")
        return
    _expect(valid, "detokenize accepted an id outside the vocabulary")


def prefill(h: Harness, data: bytes) -> None:
    ids = _ints(data)[:600]
    stream = h.fresh_stream()
    valid = len(ids) > 0 and all(0 <= t < h.n_vocab for t in ids)
    try:
        stream.prefill(ids)
    except ElizaError as exc:
        # too many for the context is also INVALID_ARG
        _expect(exc.code == ERR_INVALID_ARG, f"prefill failed with {exc.code}: {exc}")
        return
    _expect(valid, "prefill accepted ids outside the vocabulary (or none)")
    step = stream.next()
    _expect(step.status in (0, 1), "next after a prefill returned a status other than 0 or 1")


def next_caps(h: Harness, data: bytes) -> None:
    raw = (data + bytes(8))[:8]
    tokens_cap, text_cap = struct.unpack("<HH", raw[:4])
    stream = h.fresh_stream()
    stream.prefill(h.prompt)
    try:
        step = stream.next(tokens_cap=tokens_cap, text_cap=text_cap)
    except ElizaError as exc:
        _expect(exc.code == ERR_INVALID_ARG, f"next with small caps failed with {exc.code}: {exc}")
        _expect(tokens_cap == 0 or text_cap < 256 or "text_cap" in exc.message, f"refused: {exc}")
        return
    _expect(tokens_cap >= 1 and len(step.tokens) <= tokens_cap, "next wrote more tokens than tokens_cap")
    _expect(len(step.text) < max(1, text_cap), "next wrote more text than text_cap")


def slot_file(h: Harness, data: bytes) -> None:
    path = h.work / "fuzz-slot.bin"
    path.write_bytes(data)
    stream = h.fresh_stream()
    stream.prefill(h.prompt)
    try:
        stream.restore_slot(path)
    except ElizaError as exc:
        _expect(exc.code == ERR_INVALID_ARG, f"a bad slot file failed with {exc.code}: {exc}")
        step = stream.next()  # the stream is as it was: it goes on generating
        _expect(step.status in (0, 1), "the stream broke after a refused slot file")
        return
    step = stream.next()
    _expect(step.status in (0, 1), "next after an accepted slot file failed")


def slot_file_sealed(h: Harness, data: bytes) -> None:
    """A mutated slot file with a valid checksum appended: past the checksum, into the
    validation of counts, ids, positions and the cache state."""
    slot_file(h, data + struct.pack("<Q", xxh64(data)))


def bundle(h: Harness, data: bytes) -> None:
    with tempfile.TemporaryDirectory(dir=h.work) as tmp:
        text = Path(tmp) / "text"
        text.mkdir()
        (text / "fuzz.gguf").write_bytes(data)
        try:
            ctx = h.lib.open_context(tmp)
        except ElizaError as exc:
            _expect(exc.code in (ERR_BUNDLE_INVALID, ERR_INVALID_ARG), f"a bad GGUF failed with {exc.code}")
            _expect(bool(exc.message), "a bad GGUF was refused without a message")
            return
        with ctx:  # a GGUF llama.cpp accepts: it must also tokenize
            ctx.tokenize("a")


TARGETS: dict[str, Callable[[Harness, bytes], None]] = {
    "tokenize": tokenize,
    "detokenize": detokenize,
    "prefill": prefill,
    "next-caps": next_caps,
    "slot-file": slot_file,
    "slot-file-sealed": slot_file_sealed,
    "bundle": bundle,
}

# Codes a target may see without that being a finding on its own (the target judges).
EXPECTED_CODES = (ERR_INVALID_ARG, ERR_BUNDLE_INVALID, ERR_CANCELLED)


def inputs_of(target: str) -> list[Path]:
    """The seed corpus and the regressions of a target, in name order."""
    found: list[Path] = []
    for root in (CORPUS / target, REGRESSIONS / target):
        if root.is_dir():
            found += sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith("."))
    return found
