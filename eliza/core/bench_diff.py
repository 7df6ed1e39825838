"""The diff engine: byte identity of two bench runs, and their timings as ratios.

Identity is decided by tokens and text bytes only; timings are reported beside it and
never decide it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from eliza.core.bench_records import BenchRun, PromptRecord

WINDOW = 40  # bytes of text shown on each side of a divergence


@dataclass(frozen=True, kw_only=True)
class Divergence:
    prompt_index: int
    prompt: str
    step: int  # index of the first generated token that differs
    left_token: int | None  # None: that side had already stopped
    right_token: int | None
    byte_offset: int  # first differing byte of the generated text
    left_window: str
    right_window: str

    def describe(self, left: str, right: str) -> str:
        def tok(t: int | None) -> str:
            return "end of output" if t is None else f"token {t}"

        return (
            f"prompt {self.prompt_index} {self.prompt[:60]!r}: first divergence at step {self.step} "
            f"({left}: {tok(self.left_token)}, {right}: {tok(self.right_token)}), byte {self.byte_offset}\n"
            f"  {left}: {self.left_window}\n  {right}: {self.right_window}"
        )


@dataclass(frozen=True, kw_only=True)
class IdentityResult:
    left: str
    right: str
    prompts_compared: int
    tokens_compared: int
    divergences: tuple[Divergence, ...]
    problems: tuple[str, ...]  # structural mismatches: prompt sets, prompt tokens, unstable repeats

    @property
    def identical(self) -> bool:
        return self.prompts_compared > 0 and not self.divergences and not self.problems

    def summary(self) -> str:
        if self.identical:
            return (
                f"{self.left} vs {self.right}: IDENTICAL "
                f"({self.prompts_compared} prompts, {self.tokens_compared} tokens)"
            )
        what = list(self.problems)  # settings first: they explain what follows
        what += [f"{len(self.divergences)} divergent prompt(s)"] if self.divergences else []
        return f"{self.left} vs {self.right}: DIFFERENT ({'; '.join(what) or 'nothing compared'})"

    def report(self) -> str:
        lines = [self.summary()]
        lines += [d.describe(self.left, self.right) for d in self.divergences]
        return "\n".join(lines)


def _window(text: bytes, offset: int) -> str:
    start = max(0, offset - WINDOW)
    before = text[start:offset].decode("utf-8", errors="replace")
    after = text[offset : offset + WINDOW].decode("utf-8", errors="replace")
    return f"{'…' if start else ''}{before!r}⟦{after!r}⟧"


def _first_difference(a: Sequence[int] | bytes, b: Sequence[int] | bytes) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _divergence(left: PromptRecord, right: PromptRecord) -> Divergence | None:
    step = _first_difference(left.tokens, right.tokens)
    offset = _first_difference(left.text, right.text)
    if step is None and offset is None:
        return None
    step = step if step is not None else min(len(left.tokens), len(right.tokens))
    offset = offset if offset is not None else min(len(left.text), len(right.text))
    return Divergence(
        prompt_index=left.index,
        prompt=left.prompt,
        step=step,
        left_token=left.tokens[step] if step < len(left.tokens) else None,
        right_token=right.tokens[step] if step < len(right.tokens) else None,
        byte_offset=offset,
        left_window=_window(left.text, offset),
        right_window=_window(right.text, offset),
    )


def compare_identity(
    left: BenchRun, right: BenchRun, *, left_label: str = "", right_label: str = ""
) -> IdentityResult:
    problems: list[str] = []
    divergences: list[Divergence] = []
    compared = 0
    tokens = 0
    # Different settings explain any divergence that follows: say so first.
    differing = [k for k in left.settings if left.settings[k] != right.settings[k]]
    for key in differing:
        problems.append(f"settings differ: {key} {left.settings[key]} vs {right.settings[key]}")
    if len(left.prompts) != len(right.prompts):
        problems.append(f"prompt counts differ ({len(left.prompts)} vs {len(right.prompts)})")
    for a, b in zip(left.prompts, right.prompts, strict=False):
        if a.prompt != b.prompt or a.prompt_tokens != b.prompt_tokens:
            problems.append(f"prompt {a.index} is not the same input on both sides")
            continue
        for side, rec in (("left", a), ("right", b)):
            if not rec.repeats_identical:
                problems.append(f"prompt {rec.index}: {side} repeats were not identical to each other")
        compared += 1
        tokens += len(a.tokens)
        found = _divergence(a, b)
        if found:
            divergences.append(found)
    return IdentityResult(
        left=left_label or left.label,
        right=right_label or right.label,
        prompts_compared=compared,
        tokens_compared=tokens,
        divergences=tuple(divergences),
        problems=tuple(problems),
    )


@dataclass(frozen=True, kw_only=True)
class AgreementResult:
    """How far two platforms' greedy outputs agree: per prompt, the tokens before the
    first divergence count as agreeing (after it the two decode different contexts, so
    later positions say nothing), out of the longer side's length."""

    left: str
    right: str
    positions: int
    agreeing: int
    prompts_compared: int
    divergences: tuple[Divergence, ...]
    problems: tuple[str, ...]  # different inputs: then no rate is meaningful

    @property
    def rate(self) -> float:
        return self.agreeing / self.positions if self.positions else 0.0

    def meets(self, minimum: float) -> bool:
        return self.prompts_compared > 0 and not self.problems and self.rate >= minimum

    def summary(self) -> str:
        first = self.divergences[0] if self.divergences else None
        where = (
            f"; first divergence: prompt {first.prompt_index}, step {first.step} "
            f"(token {first.left_token} vs {first.right_token})"
            if first
            else "; no divergence"
        )
        problems = f"; {'; '.join(self.problems)}" if self.problems else ""
        return (
            f"{self.left} vs {self.right}: {self.agreeing}/{self.positions} token positions agree "
            f"({self.rate:.4f}) over {self.prompts_compared} prompts{where}{problems}"
        )


def token_agreement(
    left: BenchRun, right: BenchRun, *, left_label: str = "", right_label: str = ""
) -> AgreementResult:
    """Token agreement of two runs of the same prompts (e.g. arm64 NEON vs x86 AVX2)."""
    identity = compare_identity(left, right, left_label=left_label, right_label=right_label)
    positions = agreeing = 0
    for a, b in zip(left.prompts, right.prompts, strict=False):
        if a.prompt != b.prompt or a.prompt_tokens != b.prompt_tokens:
            continue
        step = _first_difference(a.tokens, b.tokens)
        positions += max(len(a.tokens), len(b.tokens))
        agreeing += len(a.tokens) if step is None else step
    return AgreementResult(
        left=identity.left,
        right=identity.right,
        positions=positions,
        agreeing=agreeing,
        prompts_compared=identity.prompts_compared,
        divergences=identity.divergences,
        problems=identity.problems,
    )


def same_prompts(left: BenchRun, right: BenchRun) -> bool:
    """Whether both runs decoded the same prompts (so their speeds can be compared)."""
    return [(p.prompt, p.prompt_tokens) for p in left.prompts] == [
        (p.prompt, p.prompt_tokens) for p in right.prompts
    ]


@dataclass(frozen=True, kw_only=True)
class Spread:
    n: int
    median: float
    q1: float
    q3: float
    low: float
    high: float

    def describe(self, fmt: str = ".3f") -> str:
        return (
            f"{self.median:{fmt}} (IQR {self.q1:{fmt}}..{self.q3:{fmt}}, "
            f"range {self.low:{fmt}}..{self.high:{fmt}}, n={self.n})"
        )


def spread(values: Sequence[float]) -> Spread:
    if not values:
        raise ValueError("no values to summarise")
    ordered = sorted(values)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return Spread(
        n=len(ordered), median=statistics.median(ordered), q1=q1, q3=q3, low=ordered[0], high=ordered[-1]
    )


def run_decode_tok_s(run: BenchRun) -> float:
    """Median over prompts of each prompt's median decode rate (prompts with >1 token)."""
    rates = [statistics.median(p.decode_tok_s) for p in run.prompts if len(p.tokens) > 1 and p.decode_tok_s]
    return statistics.median(rates) if rates else 0.0


def paired_decode_tok_s(run: BenchRun, other: BenchRun) -> tuple[float, float]:
    """(run's, other's) median decode rate over the prompts that have a decode phase in both.

    A drafter can emit a prompt's whole output in its first step: that prompt has no decode
    phase to time (rate 0), while the plain run does. Counting it as 0 would make every
    such draft look like a slowdown, so a speedup compares like with like.
    """

    def rates(r: BenchRun) -> dict[int, float]:
        return {
            p.index: statistics.median(p.decode_tok_s)
            for p in r.prompts
            if len(p.tokens) > 1 and p.decode_tok_s and statistics.median(p.decode_tok_s) > 0
        }

    mine, theirs = rates(run), rates(other)
    both = sorted(set(mine) & set(theirs))
    if not both:
        return 0.0, 0.0
    return statistics.median(mine[i] for i in both), statistics.median(theirs[i] for i in both)


def run_first_token_ms(run: BenchRun) -> float:
    values = [statistics.median(p.first_token_ms) for p in run.prompts if p.first_token_ms]
    return statistics.median(values) if values else 0.0


@dataclass(frozen=True, kw_only=True)
class RatioReport:
    metric: str
    numerator: str
    denominator: str
    ratios: Spread  # per interleaved pair: numerator / denominator
    numerator_values: Spread
    denominator_values: Spread

    def describe(self) -> str:
        return (
            f"{self.metric} {self.numerator} / {self.denominator} = {self.ratios.describe()}; "
            f"{self.numerator} {self.numerator_values.describe('.1f')}, "
            f"{self.denominator} {self.denominator_values.describe('.1f')}"
        )


def ratio_report(
    metric: str, numerator: str, denominator: str, pairs: Sequence[tuple[float, float]]
) -> RatioReport:
    """Ratios of interleaved pairs (a_i / b_i), so drift of the machine cancels pair by pair."""
    usable = [(a, b) for a, b in pairs if b > 0]
    if not usable:
        raise ValueError(f"{metric}: no pair with a non-zero {denominator} value")
    return RatioReport(
        metric=metric,
        numerator=numerator,
        denominator=denominator,
        ratios=spread([a / b for a, b in usable]),
        numerator_values=spread([a for a, _ in usable]),
        denominator_values=spread([b for _, b in usable]),
    )


def drafter_totals(run: BenchRun) -> tuple[int, int]:
    """(drafted, accepted) over every step of every prompt."""
    steps = [step for p in run.prompts for step in p.drafter]
    return sum(d for d, _ in steps), sum(a for _, a in steps)


def drafter_problems(label: str, run: BenchRun, *, must_accept_all: bool = False) -> list[str]:
    """What a run's drafter stats break: 0 <= accepted <= drafted on every step, some
    drafting at all, and (must_accept_all: the text model drafting for itself) every
    drafted token accepted."""
    problems: list[str] = []
    bad = next(
        ((p.index, i, d, a) for p in run.prompts for i, (d, a) in enumerate(p.drafter) if not 0 <= a <= d),
        None,
    )
    if bad is not None:
        index, step, d, a = bad
        problems.append(f"{label}: prompt {index} step {step}: accepted {a} of {d} drafted")
    drafted, accepted = drafter_totals(run)
    if drafted == 0:
        problems.append(f"{label}: no step drafted anything")
    elif must_accept_all and accepted != drafted:
        problems.append(f"{label}: accepted {accepted} of {drafted} drafted tokens (must be all)")
    return problems
