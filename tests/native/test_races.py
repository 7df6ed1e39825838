"""Threads against the C ABI: `_cancel` racing `_next` and `_prefill` a thousand times
each, contexts destroyed while their streams are open (and decoding), streams of several
contexts decoding in parallel. Every race must end in a step or ELIZA_ERR_CANCELLED, never
a hang, a crash or a corrupted stream; the sanitizer cell runs this module under ASan and
UBSan. ELIZA_RACE_FIGURES names a JSON file that receives the counts."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from eliza.adapters.ffi import ERR_CANCELLED, Context, ElizaError, Library, Stream, greedy_config

ITERATIONS = int(os.environ.get("ELIZA_RACE_ITERATIONS", "1000"))
HANG_S = 120  # a join that takes this long is a hang (never reached by a working library)
PROMPT = "Once upon a time there was"
LONG_PROMPT = "The quick brown fox jumps over the lazy dog. " * 4
MAX_TOKENS = 6

FIGURES: dict[str, dict[str, int]] = {}


def _record_figures(name: str, counts: dict[str, int]) -> None:
    FIGURES[name] = counts
    target = os.environ.get("ELIZA_RACE_FIGURES")
    if target:
        path = Path(target)
        old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        path.write_text(json.dumps({**old, name: counts}, indent=2, sort_keys=True), encoding="utf-8")


def _reference(ctx: Context, prompt: str, max_tokens: int = MAX_TOKENS) -> list[int]:
    with ctx.open_stream(greedy_config(max_tokens)) as stream:
        stream.prefill(ctx.tokenize(prompt))
        return stream.generate()[0]


def _spin(n: int) -> None:
    """Lets the other thread get a varying way into its call before the cancel."""
    for _ in range(n):
        pass


def _join(thread: threading.Thread) -> None:
    thread.join(HANG_S)
    assert not thread.is_alive(), "a call did not return after _cancel: a hang"


def _assert_cancelled(stream: Stream) -> None:
    with pytest.raises(ElizaError) as err:
        stream.next()
    assert err.value.code == ERR_CANCELLED  # the flag stays until reset


def test_cancel_races_next_a_thousand_times(ctx: Context) -> None:
    prompt = ctx.tokenize(PROMPT)
    reference = _reference(ctx, PROMPT)
    counts = {"iterations": 0, "cancelled_mid_generation": 0, "finished_before_cancel": 0}
    with ctx.open_stream(greedy_config(MAX_TOKENS)) as stream:
        for i in range(ITERATIONS):
            assert stream.reset() == 0
            stream.prefill(prompt)
            tokens: list[int] = []
            outcome: list[object] = []

            def generate(tokens: list[int], outcome: list[object]) -> None:
                try:
                    while True:
                        step = stream.next()
                        assert step.status in (0, 1)
                        tokens.extend(step.tokens)
                        if step.status == 1:
                            outcome.append("final")
                            return
                except ElizaError as exc:
                    outcome.append(exc.code)

            worker = threading.Thread(target=generate, args=(tokens, outcome))
            worker.start()
            _spin((i * 37) % 4000)
            assert stream.cancel() == 0
            _join(worker)
            assert outcome in (["final"], [ERR_CANCELLED]), outcome
            # the steps that ran before the cancel are the greedy run's, uncorrupted
            assert tokens == reference[: len(tokens)]
            if outcome == ["final"]:
                assert tokens == reference
                counts["finished_before_cancel"] += 1
            else:
                counts["cancelled_mid_generation"] += 1
            _assert_cancelled(stream)
            counts["iterations"] += 1
        # and the stream still generates exactly the greedy continuation
        assert stream.reset() == 0
        stream.prefill(prompt)
        assert stream.generate()[0] == reference
    assert counts["iterations"] == ITERATIONS
    assert counts["cancelled_mid_generation"] > 0
    _record_figures("cancel_vs_next", counts)


def test_cancel_races_prefill_a_thousand_times(ctx: Context) -> None:
    long_prompt = ctx.tokenize(LONG_PROMPT)
    prompt = ctx.tokenize(PROMPT)
    reference = _reference(ctx, PROMPT)
    counts = {"iterations": 0, "prefill_cancelled": 0, "prefill_completed": 0}
    with ctx.open_stream(greedy_config(MAX_TOKENS)) as stream:
        for i in range(ITERATIONS):
            assert stream.reset() == 0
            outcome: list[object] = []

            def prefill(outcome: list[object]) -> None:
                try:
                    stream.prefill(long_prompt)
                    outcome.append("done")
                except ElizaError as exc:
                    outcome.append(exc.code)

            worker = threading.Thread(target=prefill, args=(outcome,))
            worker.start()
            _spin((i * 53) % 6000)
            assert stream.cancel() == 0
            _join(worker)
            assert outcome in (["done"], [ERR_CANCELLED]), outcome
            counts["prefill_completed" if outcome == ["done"] else "prefill_cancelled"] += 1
            _assert_cancelled(stream)
            if i % 100 == 99:  # a cancelled prefill rolled back: the stream is as good as new
                assert stream.reset() == 0
                stream.prefill(prompt)
                assert stream.generate()[0] == reference
            counts["iterations"] += 1
    assert counts["iterations"] == ITERATIONS
    assert counts["prefill_cancelled"] > 0
    _record_figures("cancel_vs_prefill", counts)


def test_destroy_with_open_streams_keeps_them_working(
    lib: Library, tiny_bundle: Path, tmp_path: Path
) -> None:
    with lib.open_context(tiny_bundle) as ctx:
        reference = _reference(ctx, PROMPT, 16)
        prompt = ctx.tokenize(PROMPT)
    ctx = lib.open_context(tiny_bundle)
    streams = [ctx.open_stream(greedy_config(16)) for _ in range(3)]
    for stream in streams:
        stream.prefill(prompt)
    ctx.close()  # eliza_inference_destroy with three streams open
    streams[0].close()
    assert streams[1].generate()[0] == reference
    streams[2].save_slot(tmp_path / "slot.bin")
    streams[1].close()
    streams[2].restore_slot(tmp_path / "slot.bin")
    assert streams[2].generate()[0] == reference
    streams[2].close()  # the last one frees the context


def test_destroy_while_a_stream_decodes_on_another_thread(lib: Library, tiny_bundle: Path) -> None:
    with lib.open_context(tiny_bundle) as ctx:
        reference = _reference(ctx, PROMPT, 48)
        prompt = ctx.tokenize(PROMPT)
    for round_ in range(20):
        ctx = lib.open_context(tiny_bundle)
        stream = ctx.open_stream(greedy_config(48))
        stream.prefill(prompt)
        first_step = threading.Event()
        tokens: list[int] = []

        def generate(stream: Stream, tokens: list[int], first_step: threading.Event) -> None:
            for step in stream.steps():
                tokens.extend(step.tokens)
                first_step.set()

        worker = threading.Thread(target=generate, args=(stream, tokens, first_step))
        worker.start()
        first_step.wait(HANG_S)
        _spin(round_ * 500)
        ctx.close()  # the context goes while the stream decodes
        _join(worker)
        assert tokens == reference
        stream.close()


def test_parallel_contexts_and_streams_match_serial_runs(
    lib: Library, tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three contexts with two streams each, all six decoding at once, each cancelling
    nothing: every output equals its serial run (the budget shares threads, never state)."""
    monkeypatch.setenv("ELIZA_N_THREADS", "2")
    prompts = [PROMPT, "The quick brown fox", "naïve café — 東京 and", "Hello world, this is", "The price"]
    prompts.append("A")
    contexts = [lib.open_context(tiny_bundle) for _ in range(3)]
    try:
        serial = [_reference(contexts[0], p, 20) for p in prompts]
        results: list[list[int] | None] = [None] * len(prompts)
        start = threading.Barrier(len(prompts))

        def worker(i: int) -> None:
            ctx = contexts[i % len(contexts)]
            with ctx.open_stream(greedy_config(20)) as stream:
                stream.prefill(ctx.tokenize(prompts[i]))
                start.wait(HANG_S)
                results[i] = stream.generate()[0]

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            _join(t)
        assert results == serial
    finally:
        for ctx in contexts:
            ctx.close()
