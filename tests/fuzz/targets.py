"""Fuzz targets of the C ABI, driven through ctypes: each takes the fuzzer's bytes and
turns them into one call's arguments. A target raises `Violation` when the library breaks
its contract (an error code it must not return, a result that contradicts the input, a
stream left unusable, a refusal of an input the target knows is valid); any crash is the
sanitizer's to report. Each returns whether the library accepted the input, so that the
replay of the seed corpus can check every seed's outcome against `SEED_OUTCOMES`.

Run by `nox -s fuzz` (atheris, under the sanitizer variant) and replayed by
tests/native/test_fuzz_corpus.py over the seed corpus and the regressions in the default
suite. The inputs that once broke something are kept under `regressions/<target>/`.
"""

from __future__ import annotations

import ctypes
import re
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
        self.n_ctx = self._context_size()
        self.prompt = self.ctx.tokenize(PROMPT)
        self.text_cap = self._text_cap_needed()
        self.slot = work / "seed-slot.bin"
        with self.ctx.open_stream(greedy_config(8)) as s:
            s.prefill(self.prompt)
            self.first_step = s.next()  # what a stream prefilled with the prompt does next
            s.save_slot(self.slot)
            self.step_after_slot = s.next()  # what a stream restored from the slot does next
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

    def _context_size(self) -> int:
        """The stream's context size, from the refusal of a prefill longer than any input
        of the prefill target (which takes up to 600 ids); 601 when even that fits."""
        stream = self.fresh_stream()
        try:
            stream.prefill([0] * 601)
        except ElizaError as exc:
            found = re.search(r"exceeds the context size (\d+)", exc.message)
            if found is None:
                raise
            return int(found.group(1))
        finally:
            stream.reset()
        return 601

    def _text_cap_needed(self) -> int:
        """The smallest text_cap _next accepts, from the message of a refusal."""
        stream = self.fresh_stream()
        stream.prefill(self.prompt)
        try:
            stream.next(text_cap=1)
        except ElizaError as exc:
            found = re.search(r"one step needs up to (\d+) bytes", exc.message)
            if found is None:
                raise
            return int(found.group(1))
        finally:
            stream.reset()
        raise Violation("next accepted a text_cap of 1 byte")

    def fresh_stream(self) -> Stream:
        self.stream.reset()
        return self.stream

    def close(self) -> None:
        self.stream.close()
        self.ctx.close()


def _ints(data: bytes) -> list[int]:
    n = len(data) // 4
    return list(struct.unpack(f"<{n}i", data[: n * 4]))


def tokenize(h: Harness, data: bytes) -> bool:
    """Any bytes are text to tokenize: a refusal (an ElizaError) is a finding."""
    flags, text = (data[0], data[1:]) if data else (0, b"")
    tokens = h.ctx.tokenize(text, add_special=bool(flags & 1), parse_special=bool(flags & 2))
    _expect(all(0 <= t < h.n_vocab for t in tokens), "tokenize returned an id outside the vocabulary")
    if not flags & 3 and _is_utf8(text):
        # valid UTF-8 without special tokens comes back from detokenize byte for byte
        # (SentencePiece adds a leading space to the first word and removes it again)
        back = h.ctx.detokenize(tokens)
        _expect(back.removeprefix(b" ") == text.removeprefix(b" "), f"{text!r} came back as {back!r}")
    return True


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def detokenize(h: Harness, data: bytes) -> bool:
    flags, ids = (data[0], _ints(data[1:])) if data else (0, [])
    valid = all(0 <= t < h.n_vocab for t in ids)
    try:
        h.ctx.detokenize(ids, remove_special=bool(flags & 1), unparse_special=bool(flags & 2))
    except ElizaError as exc:
        _expect(not valid, f"detokenize of valid ids was refused: {exc}")
        _expect(exc.code == ERR_INVALID_ARG, f"detokenize of invalid ids failed with {exc.code}: {exc}")
        return False
    _expect(valid, "detokenize accepted an id outside the vocabulary")
    return True


def prefill(h: Harness, data: bytes) -> bool:
    """Valid: at least one id, every id inside the vocabulary, no more than the (fresh)
    stream's context holds. A valid prefill must be accepted, any other refused."""
    ids = _ints(data)[:600]
    stream = h.fresh_stream()
    valid = 0 < len(ids) <= h.n_ctx and all(0 <= t < h.n_vocab for t in ids)
    try:
        stream.prefill(ids)
    except ElizaError as exc:
        _expect(not valid, f"a prefill of {len(ids)} valid ids (context {h.n_ctx}) was refused: {exc}")
        # too many for the context is also INVALID_ARG
        _expect(exc.code == ERR_INVALID_ARG, f"prefill failed with {exc.code}: {exc}")
        return False
    _expect(valid, f"prefill accepted {len(ids)} ids, outside the vocabulary, none or more than {h.n_ctx}")
    step = stream.next()
    _expect(step.status in (0, 1), "next after a prefill returned a status other than 0 or 1")
    return True


def next_caps(h: Harness, data: bytes) -> bool:
    """Valid: tokens_cap >= 1 and text_cap at least what one step needs (the size the
    library names when refusing a smaller one). Valid caps must be accepted, any other
    refused, naming the cap that is too small."""
    raw = (data + bytes(8))[:8]
    tokens_cap, text_cap = struct.unpack("<HH", raw[:4])
    valid = tokens_cap >= 1 and text_cap >= h.text_cap
    stream = h.fresh_stream()
    stream.prefill(h.prompt)
    try:
        step = stream.next(tokens_cap=tokens_cap, text_cap=text_cap)
    except ElizaError as exc:
        _expect(not valid, f"next with tokens_cap {tokens_cap}, text_cap {text_cap} was refused: {exc}")
        _expect(exc.code == ERR_INVALID_ARG, f"next with small caps failed with {exc.code}: {exc}")
        too_small = "tokens_cap" if tokens_cap == 0 else "text_cap"
        _expect(too_small in exc.message, f"the refusal does not name {too_small}: {exc}")
        return False
    _expect(valid, f"next accepted tokens_cap {tokens_cap}, text_cap {text_cap} (needs {h.text_cap})")
    _expect(len(step.tokens) <= tokens_cap, "next wrote more tokens than tokens_cap")
    _expect(len(step.text) < max(1, text_cap), "next wrote more text than text_cap")
    return True


def slot_file(h: Harness, data: bytes) -> bool:
    """A file _save_slot wrote for this model and context (the harness's own) must be
    accepted, and the stream then continues as the saving stream did. Any other file may
    be refused (INVALID_ARG), and then the stream is as it was: it goes on as a stream
    prefilled with the prompt does."""
    path = h.work / "fuzz-slot.bin"
    path.write_bytes(data)
    saved = data == h.slot_bytes
    stream = h.fresh_stream()
    stream.prefill(h.prompt)
    try:
        stream.restore_slot(path)
    except ElizaError as exc:
        _expect(not saved, f"a slot file this library saved for this model was refused: {exc}")
        _expect(exc.code == ERR_INVALID_ARG, f"a bad slot file failed with {exc.code}: {exc}")
        if "so it was reset" in exc.message:  # documented: its own cache could not be put back
            stream.prefill(h.prompt)
        step = stream.next()
        _expect(step == h.first_step, f"after a refused slot file the stream went on with {step}")
        return False
    step = stream.next()
    _expect(step.status in (0, 1), "next after an accepted slot file failed")
    if saved:
        _expect(step == h.step_after_slot, f"restored from its slot file the stream went on with {step}")
    return True


def slot_file_sealed(h: Harness, data: bytes) -> bool:
    """A mutated slot file with a valid checksum appended: past the checksum, into the
    validation of counts, ids, positions and the cache state."""
    return slot_file(h, data + struct.pack("<Q", xxh64(data)))


def bundle(h: Harness, data: bytes) -> bool:
    with tempfile.TemporaryDirectory(dir=h.work) as tmp:
        text = Path(tmp) / "text"
        text.mkdir()
        (text / "fuzz.gguf").write_bytes(data)
        try:
            ctx = h.lib.open_context(tmp)
        except ElizaError as exc:
            _expect(exc.code in (ERR_BUNDLE_INVALID, ERR_INVALID_ARG), f"a bad GGUF failed with {exc.code}")
            _expect(bool(exc.message), "a bad GGUF was refused without a message")
            return False
        with ctx:  # a GGUF llama.cpp accepts: it must also tokenize
            ctx.tokenize("a")
        return True


TARGETS: dict[str, Callable[[Harness, bytes], bool]] = {
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

# What the library must answer to each input of the corpus and the regressions (by its path
# under tests/fuzz): True accepted, False refused. The replay fails on a seed answered
# otherwise, a valid seed refused included, where a target cannot tell on its own that
# the input is valid; an input without an entry here fails the replay too.
SEED_OUTCOMES: dict[str, bool] = {
    "corpus/bundle/empty": False,
    "corpus/bundle/head-256": False,
    "corpus/bundle/head-4096": False,
    "corpus/bundle/minimal": False,
    "regressions/bundle/empty-gguf-cxa-throw": False,
    "corpus/detokenize/negative": False,
    "corpus/detokenize/past-vocab": False,
    "corpus/detokenize/special": True,
    "corpus/detokenize/valid": True,
    "corpus/next-caps/edge": True,
    "corpus/next-caps/roomy": True,
    "corpus/next-caps/tiny": False,
    "corpus/next-caps/zero": False,
    "corpus/prefill/bad-id": False,
    "corpus/prefill/long": True,
    "corpus/prefill/none": False,
    "corpus/prefill/prompt": True,
    "corpus/slot-file/header": False,
    "corpus/slot-file/saved": True,
    "corpus/slot-file/truncated": False,
    "corpus/slot-file-sealed/header": False,
    "corpus/slot-file-sealed/saved": True,
    "corpus/tokenize/ascii": True,
    "corpus/tokenize/empty": True,
    "corpus/tokenize/invalid-utf8": True,
    "corpus/tokenize/special": True,
    "corpus/tokenize/utf8": True,
}


def seed_key(path: Path) -> str:
    """An input's entry in SEED_OUTCOMES: its path under tests/fuzz."""
    return path.resolve().relative_to(HERE).as_posix()


def inputs_of(target: str) -> list[Path]:
    """The seed corpus and the regressions of a target, in name order."""
    found: list[Path] = []
    for root in (CORPUS / target, REGRESSIONS / target):
        if root.is_dir():
            found += sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith("."))
    return found
