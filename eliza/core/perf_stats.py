"""The statistics of the perf check: candidate against reference, one metric at a time.

For each metric: the ratio of the candidate's median to the reference's, a bootstrap 95 %
confidence interval of that ratio (the two samples resampled independently, with a fixed
seed so the same samples always give the same interval), and the two-sided Mann-Whitney U
p-value of the samples. A declared rule (matrix.yaml, a perf check's `metrics`) turns
that into a verdict:

- FAILED: the interval lies wholly beyond the bound (below 1 - bound for a metric where
  higher is better, above 1 + bound where lower is better) and p < alpha;
- INCONCLUSIVE: too few samples, an interval wider than the rule allows, or a median
  ratio beyond the bound whose interval still reaches it (or p >= alpha); what would
  settle it is more rounds, and the verdict says how many;
- VERIFIED: an interval wholly on the good side of the bound, however wide (a regression
  beyond the bound is ruled out), or otherwise one narrow enough to decide. An unchanged
  tree's interval straddles 1, so it never fails.

Rounds whose two sides ran next to each other (a body and its runtime's own runner) are
compared as pairs by `compare_paired`: the median of the rounds' ratios, a bootstrap over
rounds and a paired t-test on the ratios' logarithms, judged by the same rule.

A deterministic count (the simulated CPU's instructions and estimated cycles, one figure per
side: see eliza.core.simulated_cpu) is compared by `exact`: its ratio is exact, so it is
FAILED when beyond the bound and VERIFIED otherwise, never inconclusive.

Pure: the samples come in, nothing is read or timed here.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from eliza.core.matrix import Direction, MetricRule

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "Comparison",
    "Direction",
    "Judgement",
    "MetricRule",
    "Verdict",
    "compare",
    "compare_paired",
    "exact",
    "judge",
    "rounds_needed",
]

BOOTSTRAP_SEED = 20261201  # fixed: the same samples always give the same interval
BOOTSTRAP_RESAMPLES = 4000
CONFIDENCE = 0.95
MAX_ROUNDS_SUGGESTED = 50


class Verdict(StrEnum):
    VERIFIED = "verified"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """Candidate against reference for one metric."""

    metric: str
    candidate: tuple[float, ...]
    reference: tuple[float, ...]
    ratio: float  # median(candidate) / median(reference)
    low: float  # bootstrap interval of the ratio
    high: float
    p_value: float  # two-sided Mann-Whitney U
    confidence: float = CONFIDENCE
    # A deterministic count (the simulated CPU): one figure per side, the ratio is exact and
    # the interval is that ratio; no p-value applies.
    exact: bool = False
    # Rounds compared as pairs (compare_paired): the ratio is the median of each round's
    # candidate / reference, the p-value a paired t-test's on their logarithms.
    paired: bool = False

    @property
    def width(self) -> float:
        return self.high - self.low

    @property
    def rounds(self) -> int:
        return min(len(self.candidate), len(self.reference))

    def describe(self) -> str:
        if self.exact:
            return (
                f"{self.metric} ratio {self.ratio:.4f} "
                f"(exact count: {_figure(self.candidate[0])} against {_figure(self.reference[0])})"
            )
        rounds = (
            f"{self.rounds} paired rounds"
            if self.paired
            else f"n={len(self.candidate)}+{len(self.reference)}"
        )
        return (
            f"{self.metric} ratio {self.ratio:.3f} "
            f"({self.confidence:.0%} CI {self.low:.3f}..{self.high:.3f}, p={self.p_value:.3g}, {rounds})"
        )


@dataclass(frozen=True, kw_only=True)
class Judgement:
    comparison: Comparison
    rule: MetricRule
    verdict: Verdict
    words: str  # why, naming metric, ratio, interval, p and bound
    rounds_suggested: int = 0  # INCONCLUSIVE: the rounds that would likely settle it

    def as_dict(self) -> dict[str, object]:
        c = self.comparison
        return {
            "metric": c.metric,
            "verdict": self.verdict.value,
            "ratio": _round(c.ratio),
            "ci_low": _round(c.low),
            "ci_high": _round(c.high),
            "p_value": _round(c.p_value, 6),
            "confidence": c.confidence,
            "direction": self.rule.direction.value,
            "bound": self.rule.bound,
            "threshold": _round(self.rule.threshold),
            "candidate": [_round(v) for v in c.candidate],
            "reference": [_round(v) for v in c.reference],
            "words": self.words,
            "rounds_suggested": self.rounds_suggested,
            **({"exact": True} if c.exact else {}),
            **({"paired": True} if c.paired else {}),
        }


def _round(value: float, digits: int = 4) -> float:
    return round(float(value), digits)


def _figure(value: float) -> str:
    """A count as a reader compares them: "3,817,442" (whole), else three decimals."""
    return f"{value:,.0f}" if float(value).is_integer() or abs(value) >= 1000 else f"{value:,.3f}"


def _median_ratio(candidate: Sequence[float], reference: Sequence[float]) -> float:
    denominator = statistics.median(reference)
    if denominator == 0:
        raise ValueError("the reference's median is 0: no ratio")
    return float(statistics.median(candidate)) / float(denominator)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), of sorted values."""
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def _require_samples(metric: str, candidate: Sequence[float], reference: Sequence[float]) -> None:
    if not candidate or not reference:
        raise ValueError(f"{metric}: both sides need at least one sample")
    if any(not math.isfinite(v) for v in (*candidate, *reference)):
        raise ValueError(f"{metric}: samples must be finite numbers")


def _interval(resampled: Sequence[float], confidence: float) -> tuple[float, float]:
    """The central `confidence` interval of sorted bootstrap ratios."""
    tail = (1.0 - confidence) / 2.0
    return _quantile(resampled, tail), _quantile(resampled, 1.0 - tail)


def compare(
    metric: str,
    candidate: Sequence[float],
    reference: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> Comparison:
    """The median ratio, its bootstrap interval and the Mann-Whitney U p-value."""
    _require_samples(metric, candidate, reference)
    if any(v <= 0 for v in reference):
        raise ValueError(f"{metric}: reference samples must be positive (a ratio divides by them)")
    cand = [float(v) for v in candidate]
    ref = [float(v) for v in reference]
    ratio = _median_ratio(cand, ref)
    rng = random.Random(seed)
    ratios = sorted(
        statistics.median(rng.choices(cand, k=len(cand))) / statistics.median(rng.choices(ref, k=len(ref)))
        for _ in range(resamples)
    )
    low, high = _interval(ratios, confidence)
    if len(set(candidate) | set(reference)) == 1:
        p_value = 1.0  # every sample equal: nothing to tell apart
    else:
        from scipy import stats as scipy_stats  # here: scipy takes a second to import

        p_value = float(scipy_stats.mannwhitneyu(cand, ref, alternative="two-sided").pvalue)
    return Comparison(
        metric=metric,
        candidate=tuple(float(v) for v in candidate),
        reference=tuple(float(v) for v in reference),
        ratio=ratio,
        low=min(low, ratio),
        high=max(high, ratio),
        p_value=p_value,
        confidence=confidence,
    )


def compare_paired(
    metric: str,
    candidate: Sequence[float],
    reference: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> Comparison:
    """Rounds whose two sides ran next to each other, compared as pairs: the median of the
    rounds' ratios, a bootstrap interval over rounds, and a two-sided paired t-test on the
    ratios' logarithms. What moves a whole round (the machine's state from one minute to
    the next) cancels in its ratio, so a small steady cost of one side decides in a few
    rounds where independent samples' spread would hide it."""
    if len(candidate) != len(reference):
        raise ValueError(f"{metric}: paired rounds need as many candidate samples as reference ones")
    _require_samples(metric, candidate, reference)
    if any(v <= 0 for v in (*candidate, *reference)):
        raise ValueError(f"{metric}: paired samples must be positive (a round's ratio takes their logarithm)")
    ratios = [float(c) / float(r) for c, r in zip(candidate, reference, strict=True)]
    ratio = float(statistics.median(ratios))
    rng = random.Random(seed)
    resampled = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    low, high = _interval(resampled, confidence)
    logs = [math.log(v) for v in ratios]
    if len(logs) < 2:
        p_value = 1.0
    elif max(logs) - min(logs) < 1e-12:
        p_value = 1.0 if abs(logs[0]) < 1e-12 else 0.0  # every round the same ratio
    else:
        from scipy import stats as scipy_stats  # here: scipy takes a second to import

        p_value = float(scipy_stats.ttest_1samp(logs, 0.0).pvalue)
    return Comparison(
        metric=metric,
        candidate=tuple(float(v) for v in candidate),
        reference=tuple(float(v) for v in reference),
        ratio=ratio,
        low=min(low, ratio),
        high=max(high, ratio),
        p_value=p_value,
        confidence=confidence,
        paired=True,
    )


def exact(metric: str, candidate: float, reference: float) -> Comparison:
    """A deterministic metric's comparison: one count per side, the exact ratio (its interval
    is the ratio itself; the same inputs always give the same counts, so there is no noise
    to bound)."""
    if not (math.isfinite(candidate) and math.isfinite(reference)):
        raise ValueError(f"{metric}: counts must be finite numbers")
    if reference <= 0:
        raise ValueError(f"{metric}: the reference's count must be positive (a ratio divides by it)")
    ratio = float(candidate) / float(reference)
    return Comparison(
        metric=metric,
        candidate=(float(candidate),),
        reference=(float(reference),),
        ratio=ratio,
        low=ratio,
        high=ratio,
        p_value=0.0,
        confidence=1.0,
        exact=True,
    )


def rounds_needed(comparison: Comparison, rule: MetricRule) -> int:
    """Rounds that would likely narrow the interval enough to decide: the width shrinks
    with the square root of the rounds; at least one more than now, at most 50."""
    now = max(comparison.rounds, 1)
    wanted = rule.widest / 2.0
    if comparison.rounds < rule.min_samples:
        target = rule.min_samples
    else:
        # Beyond the bound the interval must shrink until it clears it; on the good side it
        # decides once it is narrow enough or wholly within the bound, whichever comes first.
        gap = abs(comparison.ratio - rule.threshold)
        wanted = max(gap, 1e-6) if rule.beyond(comparison.ratio) else max(wanted, gap)
        scale = (comparison.width / 2.0) / wanted if wanted > 0 else 2.0
        target = math.ceil(now * scale * scale)
    return max(now + 1, min(MAX_ROUNDS_SUGGESTED, target))


def judge(comparison: Comparison, rule: MetricRule) -> Judgement:
    """The verdict of one metric under its rule, in words naming ratio, interval, p and bound."""
    c = comparison
    if c.exact:
        # One count per side and no noise: the ratio itself is beyond the bound or not.
        side = "above" if rule.direction is Direction.LOWER else "below"
        said = f"{c.describe()}; bound {rule.bound:g} (a regression is a ratio {side} {rule.threshold:g})"
        if rule.beyond(c.ratio):
            return Judgement(comparison=c, rule=rule, verdict=Verdict.FAILED, words=f"{said}: REGRESSION")
        return Judgement(comparison=c, rule=rule, verdict=Verdict.VERIFIED, words=f"{said}: within the bound")
    said = f"{c.describe()}; bound {rule.bound:g} ({rule.describe()})"

    def inconclusive(why: str) -> Judgement:
        n = rounds_needed(c, rule)
        return Judgement(
            comparison=c,
            rule=rule,
            verdict=Verdict.INCONCLUSIVE,
            words=f"{said}: inconclusive, {why}; more rounds: --rounds {n}",
            rounds_suggested=n,
        )

    if c.rounds < rule.min_samples:
        return inconclusive(f"{c.rounds} round(s), fewer than the {rule.min_samples} the rule needs")
    wholly_beyond = c.high < rule.threshold if rule.direction is Direction.HIGHER else c.low > rule.threshold
    if wholly_beyond:
        if c.p_value < rule.alpha:
            return Judgement(comparison=c, rule=rule, verdict=Verdict.FAILED, words=f"{said}: REGRESSION")
        return inconclusive(f"the interval lies beyond the bound but p >= {rule.alpha:g}")
    if rule.beyond(c.ratio):
        return inconclusive("the median ratio is beyond the bound and its interval reaches back across it")
    wholly_within = (
        c.low >= rule.threshold if rule.direction is Direction.HIGHER else c.high <= rule.threshold
    )
    if wholly_within:
        # However wide, an interval on the good side of the bound rules a regression out.
        return Judgement(comparison=c, rule=rule, verdict=Verdict.VERIFIED, words=f"{said}: within the bound")
    if c.width > rule.widest:
        return inconclusive(
            f"the interval is {c.width:.3f} wide, wider than the {rule.widest:g} that can decide"
        )
    return Judgement(comparison=c, rule=rule, verdict=Verdict.VERIFIED, words=f"{said}: within the bound")
