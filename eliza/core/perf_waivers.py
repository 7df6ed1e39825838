"""Perf verdicts with the matrix's waivers applied: which per-metric failures a
`perf_waivers` entry accepts today, and which waivers have expired.

The same function decides at run time (the perf runner, with the run's clock) and when a
report is rendered (with the report's clock), so a waiver that expires between the two
stops counting in the report without a re-run. Pure: the date is passed in.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from eliza.core.matrix import Direction, PerfWaiver

__all__ = ["PerfPolicy", "PerfState", "holds", "judge_with_waivers"]

FAILED = "failed"
INCONCLUSIVE = "inconclusive"
VERIFIED = "verified"


@dataclass(frozen=True, kw_only=True)
class PerfPolicy:
    """What waivers are judged with: the matrix's waivers, today's date and milestone."""

    waivers: tuple[PerfWaiver, ...]
    today: date
    milestone: str = ""  # the exit checklist's milestone ("M3"); "" when none


@dataclass(frozen=True, kw_only=True)
class PerfState:
    verdict: str  # "verified" | "failed" | "inconclusive"
    words: str  # the reason: the failing or undecided metrics, or what passed
    waived: tuple[str, ...] = ()  # "decode_tok_s: <reason>" of each waived failure
    warnings: tuple[str, ...] = ()  # expired waivers that would have applied


def holds(waiver: PerfWaiver, today: date, milestone: str) -> bool:
    if waiver.expires is not None:
        return today <= waiver.expires
    return waiver.milestone == milestone


def _wholly_beyond(metric: Mapping[str, Any], bound: float) -> bool:
    """Whether the metric's interval lies wholly beyond 1 -/+ bound."""
    if metric.get("direction") == Direction.LOWER.value:
        return float(metric["ci_low"]) > 1.0 + bound
    return float(metric["ci_high"]) < 1.0 - bound


def _wholly_within(metric: Mapping[str, Any], bound: float) -> bool:
    """Whether the metric's interval lies wholly inside 1 -/+ bound (no regression beyond it)."""
    if metric.get("direction") == Direction.LOWER.value:
        return float(metric["ci_high"]) <= 1.0 + bound
    return float(metric["ci_low"]) >= 1.0 - bound


def judge_with_waivers(
    cell: str, metrics: Sequence[Mapping[str, Any]], policy: PerfPolicy, check: str | None = None
) -> PerfState:
    """The verdict of a perf record's per-metric judgements (as the runner recorded them:
    metric, verdict, ratio, ci_low, ci_high, direction, words) under today's waivers: a
    failure is waived when a waiver of its cell and metric holds and the interval does not
    lie wholly beyond the waiver's bound; an undecided metric is settled by such a waiver
    when its interval lies wholly inside the waiver's bound (the regression it may hide is
    one the waiver accepts). Any other failure fails; any other undecided metric leaves the
    whole inconclusive. A waiver that names a check covers that perf check only."""
    failed: list[str] = []
    undecided: list[str] = []
    waived: list[str] = []
    warnings: list[str] = []
    for m in metrics:
        name = str(m.get("metric", "?"))
        verdict = str(m.get("verdict", ""))
        if verdict not in (FAILED, INCONCLUSIVE):
            continue
        matching = [
            w
            for w in policy.waivers
            if w.metric == name and fnmatch.fnmatchcase(cell, w.cells) and w.check in (None, check)
        ]
        live = [w for w in matching if holds(w, policy.today, policy.milestone)]
        warnings += [
            f"perf waiver of {name} on {w.cells} ({w.reason}) expired {w.expiry()} and no longer counts"
            for w in matching
            if w not in live
        ]
        if verdict == INCONCLUSIVE:
            accepting = next((w for w in live if _wholly_within(m, w.bound)), None)
        else:
            accepting = next((w for w in live if not _wholly_beyond(m, w.bound)), None)
        if accepting is not None:
            waived.append(
                f"{name}: {accepting.reason} (accepted bound {accepting.bound:g}, {accepting.expiry()})"
            )
        elif verdict == INCONCLUSIVE:
            undecided.append(str(m.get("words", name)))
        elif live:
            failed.append(f"{m.get('words', name)}; beyond even the waiver's bound {live[0].bound:g}")
        else:
            failed.append(str(m.get("words", name)))
    if failed:
        return PerfState(
            verdict=FAILED, words="; ".join(failed), waived=tuple(waived), warnings=tuple(warnings)
        )
    if undecided:
        return PerfState(
            verdict=INCONCLUSIVE, words="; ".join(undecided), waived=tuple(waived), warnings=tuple(warnings)
        )
    judged = ", ".join(str(m.get("metric")) for m in metrics)
    words = f"every metric within its bound ({judged})"
    if waived:
        words = "waived: " + "; ".join(waived)
    return PerfState(verdict=VERIFIED, words=words, waived=tuple(waived), warnings=tuple(warnings))
