"""Waivers: a failing metric is VERIFIED (waived: reason) while a waiver of its cell and
metric holds, FAILED again once it expires (by date or milestone), with a warning."""

from __future__ import annotations

import itertools
from datetime import date

from eliza.core.matrix import Direction, MetricRule, PerfWaiver
from eliza.core.perf_stats import compare, judge
from eliza.core.perf_waivers import (
    FAILED,
    INCONCLUSIVE,
    VERIFIED,
    PerfPolicy,
    judge_with_waivers,
    settled,
)

RULE = MetricRule(metric="decode_tok_s", direction=Direction.HIGHER, bound=0.05)
REFERENCE = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8]


def slower(factor: float) -> dict[str, object]:
    """The recorded judgement of a candidate `factor` times the reference's speed."""
    return judge(compare("decode_tok_s", [v * factor for v in REFERENCE], REFERENCE), RULE).as_dict()


def waiver(**kw: object) -> PerfWaiver:
    base: dict[str, object] = {
        "cells": "linux-cpu.*",
        "metric": "decode_tok_s",
        "bound": 0.25,
        "reason": "the seam costs a call",
        "expires": date(2026, 12, 31),
    }
    return PerfWaiver(**(base | kw))  # type: ignore[arg-type]


def test_without_a_waiver_a_regression_fails() -> None:
    state = judge_with_waivers(
        "linux-cpu.none", [slower(0.85)], PerfPolicy(waivers=(), today=date(2026, 12, 1))
    )
    assert state.verdict == FAILED
    assert "decode_tok_s" in state.words


def test_a_holding_waiver_verifies_with_its_reason_and_its_expiry_fails_again() -> None:
    row = [slower(0.85)]
    holding = judge_with_waivers(
        "linux-cpu.none", row, PerfPolicy(waivers=(waiver(),), today=date(2026, 12, 31))
    )
    assert holding.verdict == VERIFIED
    assert "the seam costs a call" in holding.words and not holding.warnings
    expired = judge_with_waivers(
        "linux-cpu.none", row, PerfPolicy(waivers=(waiver(),), today=date(2027, 1, 1))
    )
    assert expired.verdict == FAILED
    assert expired.warnings and "expired" in expired.warnings[0]


def test_a_milestone_waiver_holds_during_its_milestone_only() -> None:
    row = [slower(0.85)]
    w = waiver(expires=None, milestone="M3")
    assert (
        judge_with_waivers(
            "linux-cpu.none", row, PerfPolicy(waivers=(w,), today=date(2030, 1, 1), milestone="M3")
        ).verdict
        == VERIFIED
    )
    assert (
        judge_with_waivers(
            "linux-cpu.none", row, PerfPolicy(waivers=(w,), today=date(2030, 1, 1), milestone="M4")
        ).verdict
        == FAILED
    )


def test_a_waiver_covers_only_its_cells_metric_and_bound() -> None:
    today = date(2026, 12, 1)
    row = [slower(0.85)]
    assert (
        judge_with_waivers("linux-cuda.none", row, PerfPolicy(waivers=(waiver(),), today=today)).verdict
        == FAILED
    )
    other_metric = waiver(metric="peak_rss_kb")
    assert (
        judge_with_waivers("linux-cpu.none", row, PerfPolicy(waivers=(other_metric,), today=today)).verdict
        == FAILED
    )
    narrow = waiver(bound=0.05)
    state = judge_with_waivers("linux-cpu.none", row, PerfPolicy(waivers=(narrow,), today=today))
    assert state.verdict == FAILED and "beyond even the waiver's bound" in state.words


def test_an_undecided_metric_leaves_the_whole_inconclusive() -> None:
    undecided = judge(compare("decode_tok_s", [80.0, 120.0, 100.0], [100.0, 70.0, 130.0]), RULE).as_dict()
    state = judge_with_waivers(
        "linux-cpu.none", [slower(1.0), undecided], PerfPolicy(waivers=(), today=date(2026, 1, 1))
    )
    assert state.verdict == INCONCLUSIVE
    assert "--rounds" in state.words


def test_a_waiver_settles_an_undecided_metric_whose_interval_it_wholly_accepts() -> None:
    noisy = [v * f for v, f in zip(REFERENCE, (0.80, 0.97, 0.86, 1.02, 0.90, 0.94, 0.99), strict=True)]
    undecided = judge(compare("decode_tok_s", noisy, REFERENCE), RULE).as_dict()
    assert undecided["verdict"] == INCONCLUSIVE  # the median is beyond 0.05, the interval reaches back
    low = float(undecided["ci_low"])  # type: ignore[arg-type]
    loose, tight = round(1.0 - low + 0.05, 2), round((1.0 - low) / 2, 3)  # bounds around the interval
    today = date(2026, 1, 1)
    settled = judge_with_waivers(
        "linux-cpu.none", [undecided], PerfPolicy(waivers=(waiver(bound=loose),), today=today)
    )
    assert settled.verdict == VERIFIED and settled.waived and "the seam costs a call" in settled.waived[0]
    reaching = judge_with_waivers(
        "linux-cpu.none", [undecided], PerfPolicy(waivers=(waiver(bound=tight),), today=today)
    )
    assert reaching.verdict == INCONCLUSIVE and not reaching.waived  # it could hide more than it accepts
    lapsed = PerfPolicy(waivers=(waiver(bound=loose, expires=date(2025, 12, 31)),), today=today)
    expired = judge_with_waivers("linux-cpu.none", [undecided], lapsed)
    assert expired.verdict == INCONCLUSIVE and expired.warnings


def test_on_a_cell_with_two_runtimes_each_is_judged_by_its_own_waivers() -> None:
    """linux-cpu.litert+mlx: MLX's generous waiver does not accept LiteRT-LM's regression, and
    a runtime's waiver does not cover the library check's metric of the same name."""
    mlx = waiver(
        cells="linux-cpu.*mlx", bound=0.9, check="backend-perf", backend="mlx-coreml", reason="mlx kernels"
    )
    litert = waiver(
        cells="linux-cpu.litert*", bound=0.1, check="backend-perf", backend="litert-lm", reason="ring"
    )
    policy = PerfPolicy(waivers=(mlx, litert), today=date(2026, 12, 1))
    cell = "linux-cpu.litert+mlx"
    mlx_slow = {**slower(0.2), "backend": "mlx-coreml"}
    litert_slow = {**slower(0.5), "backend": "litert-lm"}
    assert judge_with_waivers(cell, [mlx_slow], policy, "backend-perf").verdict == VERIFIED
    state = judge_with_waivers(cell, [mlx_slow, litert_slow], policy, "backend-perf")
    assert state.verdict == FAILED and "beyond even the waiver's bound 0.1" in state.words
    assert judge_with_waivers(
        cell, [{**slower(0.92), "backend": "litert-lm"}], policy, "backend-perf"
    ).verdict == (VERIFIED)
    assert judge_with_waivers(cell, [slower(0.5)], policy, "perf").verdict == FAILED


def three_a_side(candidate: list[float], reference: list[float]) -> dict[str, object]:
    return judge(compare("decode_tok_s", candidate, reference), RULE).as_dict()


def test_a_first_look_settles_a_runtime_exactly_at_the_bound_once_in_twenty() -> None:
    """At the bound, the six samples are exchangeable once the candidate's are divided by
    1 - bound: of the 20 ways three of them can be the candidate's, only the one where the
    candidate drew the three fastest lies wholly inside the bound."""
    values = [97.0, 98.5, 99.0, 100.0, 101.5, 102.0]
    policy = PerfPolicy(waivers=(), today=date(2026, 12, 1))
    settling = []
    for chosen in itertools.combinations(range(6), 3):
        candidate = [values[i] * (1 - RULE.bound) for i in chosen]
        reference = [values[i] for i in range(6) if i not in chosen]
        if settled("linux-cpu.none", [three_a_side(candidate, reference)], policy, fewest=3):
            settling.append(chosen)
    assert settling == [(3, 4, 5)]


def test_a_first_look_settles_only_what_it_has_enough_rounds_and_a_bound_for() -> None:
    policy = PerfPolicy(waivers=(), today=date(2026, 12, 1))
    steady = three_a_side([100.0, 100.5, 99.5], [100.2, 99.8, 100.1])
    assert settled("linux-cpu.none", [steady], policy, fewest=3)
    assert not settled("linux-cpu.none", [steady], policy, fewest=4)  # fewer rounds than the rule's
    assert not settled("linux-cpu.none", [], policy, fewest=3)  # nothing judged settles nothing
    slow = three_a_side([85.0, 85.5, 84.5], [100.2, 99.8, 100.1])
    assert not settled("linux-cpu.none", [steady, slow], policy, fewest=3)
    # a waiver whose bound wholly holds the interval settles it, until it expires
    waived = PerfPolicy(waivers=(waiver(),), today=date(2026, 12, 1))
    assert settled("linux-cpu.none", [steady, slow], waived, fewest=3)
    expired = PerfPolicy(waivers=(waiver(),), today=date(2027, 1, 1))
    assert not settled("linux-cpu.none", [steady, slow], expired, fewest=3)
    assert not settled("linux-arm64.none", [slow], waived, fewest=3)  # another cell
