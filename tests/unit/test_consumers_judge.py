"""Judging a consumer's result (eliza.core.consumers) and planning the consumer check: a
result passes only with every lifecycle step run and passed and the reference's tokens;
a host without a consumer's runtime plans the check NOT RUNNABLE HERE, with what to
install, and the report says the same."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from eliza.core.bench_records import BenchRun, PromptRecord
from eliza.core.consumers import REQUIRED_STEPS, RESULT_FORMAT, judge
from eliza.core.host import check_blockers, decide
from eliza.core.matrix import Matrix
from eliza.core.report.judge import unavailable_state
from eliza.core.report.model import PlatformCapability
from eliza.core.report.states import GridState
from eliza.core.verify_plan import PlanFacts, Run, Selection, Skip, plan
from tests.unit.test_verify_plan import HASHES, HOST, only_step, tool


def reference(*tokens: tuple[int, ...]) -> BenchRun:
    prompts = tuple(
        PromptRecord(
            index=i,
            prompt=f"p{i}",
            prompt_tokens=(1,),
            tokens=t,
            text=b"",
            final_status=1,
            repeats_identical=True,
            drafter=(),
            prefill_ms=(),
            first_token_ms=(),
            decode_tok_s=(),
            peak_rss_kb=0,
        )
        for i, t in enumerate(tokens)
    )
    return BenchRun(source="ref.jsonl", header={"tool": "reference_runner"}, prompts=prompts)


def result(steps: tuple[str, ...] = REQUIRED_STEPS, failed: str = "", **prompts: Any) -> dict[str, Any]:
    return {
        "format": RESULT_FORMAT,
        "steps": [{"step": s, "ok": s != failed, "detail": "x"} for s in steps],
        "prompts": prompts.get("prompts", [{"index": 0, "tokens": [5, 6, 7]}, {"index": 1, "tokens": [8]}]),
    }


REF = reference((5, 6, 7), (8,))


def test_a_result_with_every_step_and_the_reference_tokens_passes() -> None:
    verdict = judge("node", result(), REF)
    assert verdict.ok and verdict.steps_passed == verdict.steps == len(REQUIRED_STEPS)


def test_a_failed_or_missing_step_fails_naming_it() -> None:
    failed = judge("jni", result(failed="reset_keep"), REF)
    assert not failed.ok and [s.name for s in failed.subchecks if not s.ok] == ["jni: reset_keep"]
    skipped = judge("jni", result(steps=tuple(s for s in REQUIRED_STEPS if s != "cancel_from_thread")), REF)
    bad = [s for s in skipped.subchecks if not s.ok]
    assert not skipped.ok and "cancel_from_thread" in bad[0].detail


def test_other_tokens_or_prompts_fail_with_the_first_difference() -> None:
    other = judge(
        "node", result(prompts=[{"index": 0, "tokens": [5, 9, 7]}, {"index": 1, "tokens": [8]}]), REF
    )
    bad = [s for s in other.subchecks if not s.ok]
    assert len(bad) == 1 and "differs at token 1" in bad[0].detail
    fewer = judge("node", result(prompts=[{"index": 0, "tokens": [5, 6, 7]}]), REF)
    assert not fewer.ok


def test_a_result_of_another_format_is_not_judged() -> None:
    verdict = judge("node", {**result(), "format": "something/else"}, REF)
    assert not verdict.ok and verdict.steps == 0


def test_without_a_jdk_the_consumer_check_is_not_runnable_here(matrix: Matrix) -> None:
    no_jdk = replace(HOST, programs={**HOST.programs, "node": tool("node")})
    blockers = check_blockers(no_jdk, matrix.checks, matrix.platforms[0])
    assert set(blockers) == {"consumer", "consumer.gemma3-270m"}  # the check on each bundle
    assert "default-jdk-headless" in blockers["consumer"]
    caps = {p.id: decide(no_jdk, p) for p in matrix.platforms}
    facts = PlanFacts(capabilities=caps, hashes=HASHES, check_blockers=blockers)
    p = plan(matrix, facts, Selection())
    skip = only_step(p, "linux-cpu.mlx", "consumer")
    assert isinstance(skip, Skip) and skip.state is GridState.NOT_RUNNABLE_HERE and "javac" in skip.reason
    # the report judges the missing evidence the same way
    cell, check = matrix.cell("linux-cpu.mlx"), matrix.check("consumer")
    cap = PlatformCapability(
        can_build=True, build_reason="", can_run=True, run_reason="", check_blockers=blockers
    )
    assert unavailable_state(cell, check, cap, matrix.device_gated)[0] is GridState.NOT_RUNNABLE_HERE


def test_with_both_runtimes_the_consumer_runs_on_cpu_cells_but_not_emulated_ones(matrix: Matrix) -> None:
    full = replace(HOST, programs={**HOST.programs, **{n: tool(n) for n in ("node", "javac", "java")}})
    assert check_blockers(full, matrix.checks, matrix.platforms[0]) == {}
    caps = {p.id: decide(full, p) for p in matrix.platforms}
    cached = frozenset({("linux-cpu", "none"), ("linux-cuda", "none")})
    p = plan(matrix, PlanFacts(capabilities=caps, hashes=HASHES, cached_llama=cached), Selection())
    assert isinstance(only_step(p, "linux-cpu.none", "consumer"), Run)
    fallback = only_step(p, "linux-cuda.litert", "consumer")
    assert isinstance(fallback, Run) and fallback.how.startswith("CPU fallback")
