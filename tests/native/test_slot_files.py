"""Slot files that cannot lie: every rejected file is ELIZA_ERR_INVALID_ARG with a message
naming what is wrong, and leaves the stream exactly as it was (it then generates what it
would have generated without the attempt)."""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from eliza.adapters.ffi import (
    ERR_CANCELLED,
    ERR_INVALID_ARG,
    Context,
    ElizaError,
    Library,
    Stream,
    greedy_config,
)
from tests.native.helpers import Slot, scaled_blocks_bundle, xxh64

PROMPT = "Once upon a time there was"


def test_xxh64_matches_published_vectors() -> None:
    assert xxh64(b"") == 0xEF46DB3751D8E999
    assert xxh64(b"a") == 0xD24EC4F1A98C6E5B
    assert xxh64(b"abc") == 0x44BC2CF5AD770999
    assert xxh64(b"Nobody inspects the spammish repetition") == 0xFBCEA83C8A378BF1


@pytest.fixture()
def saved(ctx: Context, tmp_path: Path) -> tuple[Path, list[int]]:
    """A slot saved after 5 generated tokens, and the tokens that followed."""
    slot = tmp_path / "good.bin"
    with ctx.open_stream(greedy_config(16)) as stream:
        stream.prefill(ctx.tokenize(PROMPT))
        for _ in range(5):
            stream.next()
        stream.save_slot(slot)
        tail = stream.generate()[0]
    return slot, tail


def expect_rejected(ctx: Context, path: Path, *why: str) -> None:
    """Restoring path into a stream mid-generation fails with INVALID_ARG naming why, and
    the stream then continues exactly like an untouched one."""
    with ctx.open_stream(greedy_config(12)) as control:
        control.prefill(ctx.tokenize("The quick brown fox"))
        control.next()
        want = control.generate()
    with ctx.open_stream(greedy_config(12)) as stream:
        stream.prefill(ctx.tokenize("The quick brown fox"))
        stream.next()
        with pytest.raises(ElizaError) as err:
            stream.restore_slot(path)
        assert err.value.code == ERR_INVALID_ARG
        assert err.value.message.startswith("eliza_inference_llm_stream_restore_slot: slot file ")
        for part in why:
            assert part in err.value.message, err.value.message
        assert stream.generate() == want


def test_good_slot_round_trips(ctx: Context, saved: tuple[Path, list[int]]) -> None:
    slot, tail = saved
    with ctx.open_stream(greedy_config(16)) as stream:
        stream.restore_slot(slot)
        assert stream.generate()[0] == tail


def test_slot_of_a_model_with_other_block_weights_is_refused(
    lib: Library, ctx: Context, tiny_bundle: Path, tmp_path: Path, saved: tuple[Path, list[int]]
) -> None:
    # Before: the identity hashed only size, parameter count, description and the first
    # and last 64 KiB, so this copy (every blk.* tensor times -2) restored with status 0.
    slot, _ = saved
    other = scaled_blocks_bundle(tiny_bundle, tmp_path / "scaled")
    with lib.open_context(other) as other_ctx:
        expect_rejected(other_ctx, slot, "was written by another model")
        other_slot = tmp_path / "other.bin"
        with other_ctx.open_stream(greedy_config(8)) as stream:
            stream.prefill(other_ctx.tokenize(PROMPT))
            stream.save_slot(other_slot)
    expect_rejected(ctx, other_slot, "was written by another model")


def test_slot_of_another_context_size_is_refused(
    lib: Library, tiny_bundle: Path, saved: tuple[Path, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: saved at n_ctx 512, it restored into an n_ctx 256 context.
    slot, _ = saved
    monkeypatch.setenv("ELIZA_N_CTX", "256")
    with lib.open_context(tiny_bundle) as small:
        expect_rejected(small, slot, "was saved from a context of 512 tokens", "holds 256")


def test_non_regular_files_are_refused_without_reading(ctx: Context, tmp_path: Path) -> None:
    # Before: /dev/zero was read until an OOM status, seconds later; a FIFO hung forever.
    fifo = tmp_path / "slot.fifo"
    os.mkfifo(fifo)
    for path in (Path("/dev/zero"), fifo, tmp_path):
        started = time.monotonic()
        outcome = _run_with_deadline(lambda p=path: expect_rejected(ctx, p, "is not a regular file"), 30)
        if outcome == "timeout":
            # Unblock a reader stuck opening the FIFO (never block here), then fail.
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            pytest.fail(f"restoring {path} did not return within 30 s")
        if isinstance(outcome, BaseException):
            raise outcome
        assert time.monotonic() - started < 30


def _run_with_deadline(fn: Callable[[], None], seconds: float) -> BaseException | str | None:
    """fn's exception, None, or "timeout" — fn runs on a daemon thread so a hang cannot
    hold the suite."""
    outcome: list[BaseException | None] = []
    done = threading.Event()

    def attempt() -> None:
        try:
            fn()
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)
        done.set()

    threading.Thread(target=attempt, daemon=True).start()
    return outcome[0] if done.wait(seconds) else "timeout"


def test_crafted_counts_are_range_checked(
    ctx: Context, tmp_path: Path, saved: tuple[Path, list[int]]
) -> None:
    slot = Slot.parse(saved[0].read_bytes())
    cases = {
        # Before: n_accepted near 2^62 overflowed a size computation: ELIZA_ERR_FFI_FAULT.
        "accepted": (Slot(**{**slot.__dict__, "n_accepted": 0xFFFFFFFF}), "sampler tokens"),
        "accepted-small": (Slot(**{**slot.__dict__, "n_accepted": 65}), "sampler tokens"),
        "history": (Slot(**{**slot.__dict__, "n_history": 0xFFFFFFFF}), "more than its context size"),
        "state": (Slot(**{**slot.__dict__, "n_state": (1 << 63) + 5}), "cache state of"),
        "pending": (Slot(**{**slot.__dict__, "n_pending": 4}), "held-back text bytes"),
        "generated": (Slot(**{**slot.__dict__, "generated": -1}), "generated tokens"),
        "flags": (Slot(**{**slot.__dict__, "flags": 0x10}), "unknown flags"),
        "vocab-id": (slot.with_history([5] * (slot.n_history - 1) + [99999]), "outside the vocabulary"),
    }
    for name, (crafted, why) in cases.items():
        path = tmp_path / f"{name}.bin"
        path.write_bytes(crafted.bytes())
        expect_rejected(ctx, path, why)


def test_size_and_checksum_are_checked(ctx: Context, tmp_path: Path, saved: tuple[Path, list[int]]) -> None:
    data = saved[0].read_bytes()
    cases = {
        "truncated": (data[: len(data) - 100], "(truncated or extended)"),
        "extended": (data + b"\0" * 16, "(truncated or extended)"),
        "short-header": (data[:20], "truncated inside its header"),
        "flipped": (data[:300] + bytes([data[300] ^ 1]) + data[301:], "checksum mismatch"),
        "old-format": (b"ELZSLOT1" + data[8:], "older library"),
        "not-a-slot": (b"GGUF" + data[4:], "bad magic"),
    }
    for name, (content, why) in cases.items():
        path = tmp_path / f"{name}.bin"
        path.write_bytes(content)
        expect_rejected(ctx, path, why)


def test_token_count_must_agree_with_the_saved_cache(
    ctx: Context, tmp_path: Path, saved: tuple[Path, list[int]]
) -> None:
    # Before: a file listing fewer tokens than its cache state held was accepted, and the
    # next failed prefill's rollback then wiped the restored cache.
    slot = Slot.parse(saved[0].read_bytes())
    fewer = tmp_path / "fewer.bin"
    n = slot.n_history - 3
    fewer.write_bytes(slot.with_history(slot.history[:n]).bytes())
    expect_rejected(
        ctx, fewer, f"lists {n} tokens but its cache state holds positions 0..{slot.n_history - 1}"
    )
    more = tmp_path / "more.bin"
    more.write_bytes(slot.with_history([*slot.history, 5, 6]).bytes())
    expect_rejected(ctx, more, f"lists {slot.n_history + 2} tokens")


def test_cache_state_llama_cpp_refuses_puts_the_stream_back(
    ctx: Context, tmp_path: Path, saved: tuple[Path, list[int]]
) -> None:
    slot = Slot.parse(saved[0].read_bytes())
    state = bytearray(slot.state)
    state[:4] = struct.pack("<I", 7)  # a stream count this context does not have
    body = slot.body[: len(slot.body) - slot.n_state] + bytes(state)
    path = tmp_path / "state.bin"
    path.write_bytes(Slot(**{**slot.__dict__, "body": body}).bytes())
    expect_rejected(ctx, path, "holds a cache state this context rejects")


def test_restore_clears_cancel_only_on_success(ctx: Context, saved: tuple[Path, list[int]]) -> None:
    slot, tail = saved
    with ctx.open_stream(greedy_config(16)) as stream:
        stream.cancel()
        stream.restore_slot(slot)
        assert stream.generate()[0] == tail


def test_failed_step_leaves_a_saveable_consistent_stream(ctx: Context, tmp_path: Path) -> None:
    # A cancelled prefill rolls the cache back to the tokens held before it; after
    # _reset_keep of those, the stream continues exactly like one that never saw it.
    prefix = ctx.tokenize(PROMPT)
    suffix = ctx.tokenize(" in a village by the sea", add_special=False)
    with ctx.open_stream(greedy_config(10)) as fresh:
        fresh.prefill(prefix + suffix)
        want = fresh.generate()
    with ctx.open_stream(greedy_config(10)) as stream:
        stream.prefill(prefix)
        stream.generate()
        canceller = threading.Timer(0.005, stream.cancel)
        canceller.start()
        try:
            stream.prefill([100] * 400)  # usually cancelled mid-evaluation
        except ElizaError as err:
            assert err.code == ERR_CANCELLED
        canceller.join()
        assert stream.reset_keep(len(prefix)) == len(prefix)
        slot = tmp_path / "after-cancel.bin"
        stream.save_slot(slot)
        assert Slot.parse(slot.read_bytes()).n_history == len(prefix)
        stream.prefill(suffix)
        assert stream.generate() == want


def _open_restored(ctx: Context, slot: Path) -> Stream:
    stream = ctx.open_stream(greedy_config(16))
    stream.restore_slot(slot)
    return stream


def test_rejected_restore_into_a_fresh_stream_keeps_it_fresh(
    ctx: Context, tmp_path: Path, saved: tuple[Path, list[int]]
) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(saved[0].read_bytes()[:-1])
    with ctx.open_stream(greedy_config(16)) as stream:
        with pytest.raises(ElizaError):
            stream.restore_slot(bad)
        with pytest.raises(ElizaError) as err:
            stream.next()
        assert "_prefill first" in err.value.message
    with _open_restored(ctx, saved[0]) as stream:
        assert stream.generate()[0] == saved[1]


def test_an_empty_stream_round_trips(ctx: Context, tmp_path: Path) -> None:
    empty = tmp_path / "empty.bin"
    with ctx.open_stream(greedy_config(4)) as stream:
        stream.save_slot(empty)
    with ctx.open_stream(greedy_config(4)) as fresh:
        fresh.prefill(ctx.tokenize("hello"))
        want = fresh.generate()
    with ctx.open_stream(greedy_config(4)) as stream:
        stream.prefill(ctx.tokenize("The quick brown fox"))
        stream.restore_slot(empty)  # the stream is empty again
        with pytest.raises(ElizaError) as err:
            stream.next()
        assert "_prefill first" in err.value.message
        stream.prefill(ctx.tokenize("hello"))
        assert stream.generate() == want
