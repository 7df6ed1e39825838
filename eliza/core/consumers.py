"""Judging a consumer's run of the C ABI: every lifecycle step it reports passed, and its
greedy tokens equal the reference runner's (plain llama.h) for the same prompts. Pure: the
result and the reference run are read by the check runner.

A consumer (native/consumers/<name>) writes one JSON result, format `eliza-consumer/1`
(docs/consumers.md): its steps by name, the greedy tokens per prompt, the cancel and the
error-path messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eliza.core.bench_records import BenchRun
from eliza.core.outcome import SubCheck

RESULT_FORMAT = "eliza-consumer/1"
# The lifecycle the issue and the seam doc ask every consumer to drive, by step name: a
# result that leaves one out fails, so a consumer cannot pass by skipping a step.
REQUIRED_STEPS: tuple[str, ...] = (
    "abi_version",
    "create",
    "tokenize",
    "detokenize",
    "stream_open",
    "prefill",
    "next_until_final",
    "cancel_from_thread",
    "reset",
    "reset_keep",
    "save_slot",
    "restore_slot",
    "error_bad_config",
    "error_missing_bundle",
    "close",
    "destroy",
)
# Exit statuses the consumers share (docs/consumers.md).
EXIT_ABI_MISMATCH = 3
EXIT_RUNTIME_MISSING = 5


@dataclass(frozen=True, kw_only=True)
class ConsumerVerdict:
    name: str
    subchecks: tuple[SubCheck, ...]
    steps_passed: int
    steps: int

    @property
    def ok(self) -> bool:
        return bool(self.subchecks) and all(s.ok for s in self.subchecks)


def judge(name: str, result: Mapping[str, Any], reference: BenchRun) -> ConsumerVerdict:
    """The subchecks of one consumer's result against the reference run."""
    subs: list[SubCheck] = []
    if result.get("format") != RESULT_FORMAT:
        why = f"format {result.get('format')!r}, want {RESULT_FORMAT!r}"
        return ConsumerVerdict(
            name=name,
            subchecks=(SubCheck(name=f"{name}: result", ok=False, detail=why),),
            steps_passed=0,
            steps=0,
        )
    steps = [s for s in result.get("steps", []) if isinstance(s, Mapping)]
    by_name = {str(s.get("step")): s for s in steps}
    for step in steps:
        subs.append(
            SubCheck(
                name=f"{name}: {step.get('step')}",
                ok=step.get("ok") is True,
                detail=str(step.get("detail", ""))[:300],
            )
        )
    missing = [s for s in REQUIRED_STEPS if s not in by_name]
    subs.append(
        SubCheck(
            name=f"{name}: drives the whole lifecycle",
            ok=not missing,
            detail=f"missing steps: {', '.join(missing)}" if missing else f"{len(steps)} steps",
        )
    )
    subs.append(_tokens_equal(name, result.get("prompts", []), reference))
    passed = sum(1 for s in steps if s.get("ok") is True)
    return ConsumerVerdict(name=name, subchecks=tuple(subs), steps_passed=passed, steps=len(steps))


def _tokens_equal(name: str, prompts: Sequence[Any], reference: BenchRun) -> SubCheck:
    label = f"{name}: greedy tokens equal the reference runner's"
    theirs = {p.index: p for p in reference.prompts}
    if not prompts or len(prompts) != len(theirs):
        return SubCheck(
            name=label, ok=False, detail=f"{len(prompts)} prompts, the reference ran {len(theirs)}"
        )
    for got in prompts:
        ref = theirs.get(int(got.get("index", -1)))
        if ref is None:
            return SubCheck(name=label, ok=False, detail=f"prompt {got.get('index')} has no reference")
        tokens = tuple(int(t) for t in got.get("tokens", []))
        if tokens != ref.tokens:
            at = next(
                (i for i, (a, b) in enumerate(zip(tokens, ref.tokens, strict=False)) if a != b),
                min(len(tokens), len(ref.tokens)),
            )
            return SubCheck(
                name=label,
                ok=False,
                detail=f"prompt {ref.index} ({ref.prompt[:40]!r}) differs at token {at}: "
                f"{tokens[at : at + 3]} vs {ref.tokens[at : at + 3]}",
            )
    total = sum(len(p.tokens) for p in reference.prompts)
    return SubCheck(name=label, ok=True, detail=f"{len(prompts)} prompts, {total} tokens identical")
