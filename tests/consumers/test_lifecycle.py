"""Each consumer drives the whole C ABI on the no-gate cell's library: every lifecycle step
passes, its greedy tokens are the Python binding's and reference_runner's, a cancel from
another thread stops a long generation, and every error message decodes strictly."""

from __future__ import annotations

from pathlib import Path

from eliza.adapters.ffi import ERR_CANCELLED, ERR_INVALID_ARG, Library, greedy_config
from eliza.core.bench_records import BenchRun
from tests.consumers.helpers import ERROR_CASES, EXIT_PASSED, LIFECYCLE_STEPS, MAX_TOKENS, ConsumerRun


def test_every_lifecycle_step_passes(lifecycle: ConsumerRun) -> None:
    assert lifecycle.returncode == EXIT_PASSED, lifecycle.describe()
    result = lifecycle.result
    assert result is not None and result["passed"] is True and result["exit_status"] == EXIT_PASSED
    assert result["format"] == "eliza-consumer/1"
    assert result["abi"] == {"expected": "9", "library": "9"}
    steps = lifecycle.steps()
    missing = [name for name in LIFECYCLE_STEPS if name not in steps]
    assert not missing, f"steps the consumer did not report: {missing}"
    failed = {name: s["detail"] for name, s in steps.items() if not s["ok"]}
    assert not failed, failed
    assert len(result["steps"]) == len(steps), "a step was reported twice"


def test_greedy_tokens_equal_the_python_binding_and_reference_runner(
    lifecycle: ConsumerRun, python_greedy: list[tuple[str, list[int], list[int]]], reference_run: BenchRun
) -> None:
    assert lifecycle.result is not None, lifecycle.describe()
    records = lifecycle.result["prompts"]
    assert len(records) == len(python_greedy) == len(reference_run.prompts) > 0
    rows = zip(records, python_greedy, reference_run.prompts, strict=True)
    for record, (prompt, prompt_tokens, tokens), ref in rows:
        assert record["prompt"] == prompt == ref.prompt
        assert record["prompt_tokens"] == prompt_tokens == list(ref.prompt_tokens), prompt
        assert record["tokens"] == tokens == list(ref.tokens), prompt
        assert bytes.fromhex(record["text_hex"]) == ref.text, prompt
        assert record["final_status"] == 1
    # Not a vacuous comparison: most prompts ran to max_tokens.
    assert sum(len(r["tokens"]) == MAX_TOKENS for r in records) >= len(records) // 2


def test_cancel_from_another_thread_stops_a_long_generation(
    lifecycle: ConsumerRun, library_path: Path, tiny_bundle: Path
) -> None:
    assert lifecycle.result is not None, lifecycle.describe()
    cancel = lifecycle.result["cancel"]
    assert cancel is not None, lifecycle.describe()
    assert cancel["thread"] in ("worker_threads Worker", "java.lang.Thread")
    assert cancel["cancel_status"] == 0
    assert cancel["step_status"] == ERR_CANCELLED
    assert cancel["stopped_early"] is True and cancel["final_before_cancel"] is False
    assert cancel["steps_started_after_cancel"] == 0
    assert cancel["steps_before_cancel"] >= cancel["cancel_after_steps"]
    assert cancel["utf8_strict"] is True and "cancelled" in cancel["message"]
    # The same stream uncancelled (max_tokens as the consumer set it) runs much longer, and
    # what ran before the cancel is its beginning.
    prompt = lifecycle.result["prompts"][cancel["prompt_index"]]
    with (
        Library(library_path).open_context(tiny_bundle) as ctx,
        ctx.open_stream(greedy_config(cancel["max_tokens"])) as stream,
    ):
        stream.prefill(prompt["prompt_tokens"])
        full, _ = stream.generate()
    before = cancel["tokens_before_cancel"]
    assert len(full) >= 100, "the cancel step needs a long generation to stop"
    assert len(before) < len(full) and before == full[: len(before)], (len(before), len(full))


def test_error_paths_return_the_status_and_a_strict_utf8_message(lifecycle: ConsumerRun) -> None:
    assert lifecycle.result is not None, lifecycle.describe()
    errors = {e["case"]: e for e in lifecycle.result["errors"]}
    assert sorted(errors) == sorted(ERROR_CASES)
    for name, e in errors.items():
        assert e["utf8_strict"] is True, (name, e.get("message_hex"))
        assert e["message"] and len(e["message"].encode("utf-8")) == e["message_bytes"], name
        assert e["message"].startswith(e["function"] + ": "), e
        assert e["status"] == e["expected_status"], e
    # The handle-returning functions have no status; the others return INVALID_ARG.
    assert errors["missing_bundle"]["status"] is None and errors["bad_config"]["status"] is None
    assert errors["bad_token"]["status"] == errors["missing_slot"]["status"] == ERR_INVALID_ARG
    assert "no-such-bundle-ünïcødé-東京-🙂" in errors["missing_bundle"]["message"]
    assert "kein-slot-ünïcødé-東京.bin" in errors["missing_slot"]["message"]
    assert "temperature" in errors["bad_config"]["message"]
    # The refused model's message carries llama.cpp's error line, cut inside the long path.
    corrupt = errors["corrupt_model"]["message"]
    assert "failed to load model from" in corrupt and "€€€" in corrupt
