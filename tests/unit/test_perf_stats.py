"""The perf statistics on synthetic samples derived here: a 15 % slowdown fails, identical
distributions verify, three noisy samples are inconclusive, and the bootstrap is
reproducible."""

from __future__ import annotations

import random
import statistics

import pytest

from eliza.core.matrix import Direction, MetricRule
from eliza.core.perf_stats import Judgement, Verdict, compare, compare_paired, judge

DECODE = MetricRule(metric="decode_tok_s", direction=Direction.HIGHER, bound=0.05)
RSS = MetricRule(metric="peak_rss_kb", direction=Direction.LOWER, bound=0.10)


def noisy(centre: float, n: int, spread: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [centre * (1.0 + rng.gauss(0.0, spread)) for _ in range(n)]


def test_a_15_percent_slowdown_fails_naming_metric_ratio_interval_p_and_bound() -> None:
    reference = noisy(3000.0, 9, 0.03, seed=1)
    candidate = [v * 0.85 for v in noisy(3000.0, 9, 0.03, seed=2)]
    verdict = judge(compare("decode_tok_s", candidate, reference), DECODE)
    assert verdict.verdict is Verdict.FAILED
    c = verdict.comparison
    assert c.high < DECODE.threshold
    expected = statistics.median(candidate) / statistics.median(reference)
    assert c.ratio == pytest.approx(expected)
    for word in ("decode_tok_s", f"{c.ratio:.3f}", f"{c.low:.3f}..{c.high:.3f}", "p=", "bound 0.05"):
        assert word in verdict.words


def test_identical_distributions_are_verified_and_the_interval_holds_1() -> None:
    reference = noisy(3000.0, 9, 0.03, seed=3)
    candidate = noisy(3000.0, 9, 0.03, seed=4)
    verdict = judge(compare("decode_tok_s", candidate, reference), DECODE)
    assert verdict.verdict is Verdict.VERIFIED
    assert verdict.comparison.low <= 1.0 <= verdict.comparison.high


def test_unchanged_samples_never_fail_over_many_seeds() -> None:
    """The false-alarm rate of the rule on same-distribution samples (5 % noise, 9 rounds)."""
    verdicts = [
        judge(compare("decode_tok_s", noisy(100.0, 9, 0.05, 2 * s), noisy(100.0, 9, 0.05, 2 * s + 1)), DECODE)
        for s in range(40)
    ]
    assert not [v for v in verdicts if v.verdict is Verdict.FAILED]


def test_three_noisy_samples_are_inconclusive_and_ask_for_more_rounds() -> None:
    verdict = judge(compare("decode_tok_s", [80.0, 120.0, 100.0], [100.0, 70.0, 130.0]), DECODE)
    assert verdict.verdict is Verdict.INCONCLUSIVE
    assert verdict.rounds_suggested > 3
    assert f"--rounds {verdict.rounds_suggested}" in verdict.words


def test_too_few_rounds_are_inconclusive_whatever_the_values() -> None:
    verdict = judge(compare("decode_tok_s", [50.0, 50.0], [100.0, 100.0]), DECODE)
    assert verdict.verdict is Verdict.INCONCLUSIVE
    assert "fewer than the 3" in verdict.words


def test_more_memory_fails_a_lower_is_better_metric_and_less_does_not() -> None:
    reference = [36_000.0 + d for d in (0, 40, -30, 20, 10)]
    grown = [v + 64 * 1024 for v in reference]
    assert judge(compare("peak_rss_kb", grown, reference), RSS).verdict is Verdict.FAILED
    shrunk = [v - 4000 for v in reference]
    assert judge(compare("peak_rss_kb", shrunk, reference), RSS).verdict is Verdict.VERIFIED


def test_the_bootstrap_is_reproducible_with_its_fixed_seed() -> None:
    a, b = noisy(10.0, 7, 0.1, 5), noisy(10.0, 7, 0.1, 6)
    first, second = compare("m", a, b), compare("m", a, b)
    assert (first.low, first.high) == (second.low, second.high)
    assert first.low < first.ratio < first.high


def test_equal_samples_have_p_1_and_a_zero_width_interval() -> None:
    c = compare("m", [5.0] * 4, [5.0] * 4)
    assert (c.ratio, c.low, c.high, c.p_value) == (1.0, 1.0, 1.0, 1.0)


def test_a_reference_of_zero_cannot_be_divided_by() -> None:
    with pytest.raises(ValueError, match="positive"):
        compare("m", [1.0, 2.0], [0.0, 1.0])


def test_a_wide_interval_wholly_on_the_good_side_of_the_bound_is_verified() -> None:
    """A noisy host widens the interval towards "faster": no regression is possible then."""
    reference = noisy(3000.0, 9, 0.01, seed=5)
    candidate = [v * (1.0 + 0.5 * (i % 2)) for i, v in enumerate(noisy(3000.0, 9, 0.01, seed=6))]
    c = compare("decode_tok_s", candidate, reference)
    assert c.width > DECODE.widest and c.low >= DECODE.threshold  # the premise, derived
    assert judge(c, DECODE).verdict is Verdict.VERIFIED
    # the same width straddling the bound decides nothing
    slower = [v * 0.9 for v in candidate]
    s = compare("decode_tok_s", slower, reference)
    assert s.low < DECODE.threshold < s.high and s.width > DECODE.widest
    assert judge(s, DECODE).verdict is Verdict.INCONCLUSIVE


def drifting_rounds(n: int, cost: float, seed: int) -> tuple[list[float], list[float]]:
    """n rounds of two sides run next to each other on a machine whose speed drifts ±4 %
    from round to round (as two-core hosts measured), each side with 0.5 % noise of its own;
    the candidate pays `cost` of every step."""
    rng = random.Random(seed)
    candidate, reference = [], []
    for _ in range(n):
        machine = 80.0 * (1.0 + rng.uniform(-0.04, 0.04))
        reference.append(machine * (1.0 + rng.gauss(0.0, 0.005)))
        candidate.append(machine / (1.0 + cost) * (1.0 + rng.gauss(0.0, 0.005)))
    return candidate, reference


def test_paired_rounds_decide_a_steady_cost_that_independent_samples_mostly_cannot() -> None:
    """A body 8 % slower (a ratio of 0.926, past the 0.95 bound) in 4 rounds on a drifting
    host: paired, every seed fails; the same samples taken independently fail on few."""
    paired_failed = unpaired_failed = 0
    for seed in range(50):
        candidate, reference = drifting_rounds(4, 0.08, seed=seed)
        unpaired_failed += judge(compare("decode", candidate, reference), DECODE).verdict is Verdict.FAILED
        paired = judge(compare_paired("decode", candidate, reference), DECODE)
        paired_failed += paired.verdict is Verdict.FAILED
        ratios = [c / r for c, r in zip(candidate, reference, strict=True)]
        assert paired.comparison.ratio == pytest.approx(statistics.median(ratios))
        assert "4 paired rounds" in paired.words
    assert paired_failed == 50
    assert unpaired_failed < 25


def test_paired_rounds_of_an_unchanged_body_never_fail_over_many_seeds() -> None:
    for seed in range(200):
        candidate, reference = drifting_rounds(4, 0.0, seed=seed)
        assert judge(compare_paired("decode", candidate, reference), DECODE).verdict is not Verdict.FAILED


def test_paired_rounds_need_as_many_samples_on_each_side() -> None:
    with pytest.raises(ValueError, match="as many"):
        compare_paired("decode", [1.0, 2.0], [1.0])


# MLX's decode against its own runner on Gemma, six paired rounds' ratios as measured on an
# Intel Xeon 2-core (2026-12-07, linux-cpu.mlx at 2b45df1): 95 % CI 0.88..1.32.
MLX_GEMMA_DECODE_RATIOS = [1.101, 1.321, 0.667, 1.321, 1.202, 1.096]
OWN = MetricRule(metric="own_runner_decode", direction=Direction.HIGHER, bound=0.05)


def _paired(ratios: list[float], scale: float = 1.0) -> Judgement:
    return judge(
        compare_paired("own_runner_decode", [100.0 * r * scale for r in ratios], [100.0] * len(ratios)), OWN
    )


def test_an_undecided_ratio_well_inside_its_bound_is_suggested_the_rounds_that_clear_it() -> None:
    """An interval too wide to decide, centred well above the bound, decides as soon as it
    lies wholly inside it: the suggestion counts those rounds, fewer than narrowing it to the
    rule's widest interval would take; the same spread centred on the bound is suggested
    more. Twelve rounds of the same spread (the six twice) do decide the first."""
    far = _paired(MLX_GEMMA_DECODE_RATIOS)
    near = _paired(MLX_GEMMA_DECODE_RATIOS, scale=0.83)
    assert far.verdict is Verdict.INCONCLUSIVE and near.verdict is Verdict.INCONCLUSIVE
    assert far.comparison.low < OWN.threshold < far.comparison.ratio
    assert far.rounds_suggested <= 12 < near.rounds_suggested
    assert _paired(MLX_GEMMA_DECODE_RATIOS * 2).verdict is Verdict.VERIFIED
