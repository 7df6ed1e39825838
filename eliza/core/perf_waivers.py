"""Perf verdicts with the matrix's waivers applied: which per-metric failures a
`perf_waivers` entry accepts today, and which waivers have expired.

The same function decides at run time (the perf runner, with the run's clock) and when a
report is rendered (with the report's clock), so a waiver that expires between the two
stops counting in the report without a re-run. Pure: the date is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from eliza.core.matrix import Direction, Instrument, PerfWaiver

__all__ = ["PerfPolicy", "PerfState", "holds", "instrument_of", "judge_with_waivers", "settled"]

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
    # The instruments whose metrics made the verdict (Instrument values: "simulated CPU",
    # "wall time", "memory"): the failing ones' when failed, else those that decided.
    decided_by: tuple[str, ...] = ()
    # Wall-time metrics that could not decide where the simulated CPU did (their words).
    undecided_wall: tuple[str, ...] = ()
    # The metrics that failed and no waiver accepted: "<backend>.<metric>" where a row names
    # its backend, else the metric.
    failing: tuple[str, ...] = ()
    # The metrics that left the verdict undecided, named as `failing` names them: what more
    # rounds would have to settle.
    undecided: tuple[str, ...] = ()

    def decision(self) -> str:
        """Which instrument decided, in words, for the report and the record."""
        if self.verdict == INCONCLUSIVE:
            return "no instrument could decide"
        *first, last = self.decided_by or ("no metric",)
        said = f"{', '.join(first)} and {last}" if first else last
        if self.undecided_wall:
            said += " (wall time could not decide: " + "; ".join(self.undecided_wall) + ")"
        return said


def instrument_of(metric: Mapping[str, Any]) -> str:
    """A judged metric's instrument; a record made before instruments were named carries
    none: its peak RSS is memory, every other metric wall time."""
    named = metric.get("instrument")
    if named:
        return str(named)
    return Instrument.MEMORY.value if metric.get("metric") == "peak_rss_kb" else Instrument.WALL_TIME.value


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
    metric, verdict, ratio, ci_low, ci_high, direction, words, instrument) under today's
    waivers: a failure is waived when a waiver of its cell, metric and runtime (a backend
    check's row names the runtime it judged: each runtime is judged by its own waivers
    only) holds and the interval
    does not lie wholly beyond the waiver's bound; an undecided metric is settled by such a
    waiver when its interval lies wholly inside the waiver's bound (the regression it may
    hide is one the waiver accepts). Any other failure fails. An undecided wall-time metric
    leaves the whole inconclusive unless the simulated CPU judged the same record (its
    counts decide the work; wall time still fails a decisive regression, such as a sleep,
    that adds none); any other undecided metric leaves it inconclusive. A waiver that names
    a check covers that perf check only."""
    failed: list[str] = []
    undecided: list[str] = []
    undecided_wall: list[str] = []
    waived: list[str] = []
    warnings: list[str] = []
    failing_metrics: list[str] = []
    undecided_metrics: list[str] = []
    failing: set[str] = set()
    deciding: set[str] = set()
    simulated = any(instrument_of(m) == Instrument.SIMULATED.value for m in metrics)
    for m in metrics:
        name = str(m.get("metric", "?"))
        verdict = str(m.get("verdict", ""))
        instrument = instrument_of(m)
        if verdict not in (FAILED, INCONCLUSIVE):
            deciding.add(instrument)
            continue
        backend = str(m["backend"]) if m.get("backend") else None
        matching = [w for w in policy.waivers if w.covers(cell, name, check, backend)]
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
            deciding.add(instrument)
            waived.append(
                f"{name}: {accepting.reason} (accepted bound {accepting.bound:g}, {accepting.expiry()})"
            )
        elif verdict == INCONCLUSIVE and simulated and instrument == Instrument.WALL_TIME.value:
            undecided_wall.append(str(m.get("words", name)))
        elif verdict == INCONCLUSIVE:
            undecided.append(str(m.get("words", name)))
            undecided_metrics.append(f"{backend}.{name}" if backend else name)
        else:
            failing.add(instrument)
            failing_metrics.append(f"{backend}.{name}" if backend else name)
            failed.append(
                f"{m.get('words', name)}; beyond even the waiver's bound {live[0].bound:g}"
                if live
                else str(m.get("words", name))
            )
    order = [i.value for i in Instrument]

    def state(verdict: str, words: str, decided_by: set[str]) -> PerfState:
        return PerfState(
            verdict=verdict,
            words=words,
            waived=tuple(waived),
            warnings=tuple(warnings),
            decided_by=tuple(i for i in order if i in decided_by),
            undecided_wall=tuple(undecided_wall),
            failing=tuple(failing_metrics),
            undecided=tuple(undecided_metrics),
        )

    if failed:
        return state(FAILED, "; ".join(failed), failing)
    if undecided:
        return state(INCONCLUSIVE, "; ".join(undecided), set())
    judged = ", ".join(str(m.get("metric")) for m in metrics)
    words = f"every metric within its bound ({judged})"
    if waived:
        words = "waived: " + "; ".join(waived)
    if undecided_wall:
        words += f"; wall time could not decide {len(undecided_wall)} metric(s), the simulated CPU decided"
    return state(VERIFIED, words, deciding)


def settled(
    cell: str,
    metrics: Sequence[Mapping[str, Any]],
    policy: PerfPolicy,
    check: str | None = None,
    *,
    fewest: int,
) -> bool:
    """Whether a series' first look leaves nothing for its remaining rounds to change: every
    metric (as the runner recorded it: bound, direction, ci_low, ci_high, candidate) has at
    least `fewest` samples (what its rule needs) and an interval wholly inside its bound, or inside the
    bound of a waiver that holds today for its cell, metric and runtime. Three rounds a side
    is where the perf rule first decides; there the bootstrap interval of the ratio of
    medians reaches the extremes (every candidate sample against every reference sample), so
    it lies wholly inside the bound only when all three candidate samples beat all three
    reference samples scaled by the bound: for a build exactly at the bound (its samples
    exchangeable) a chance of 1 in 20 of stopping there, stricter than the declared rounds'
    own rule, which also verifies an interval that straddles the bound when it is narrow
    enough. A decisive regression never settles (its interval lies beyond the bound): it
    runs the declared rounds, where the rule can fail it."""
    for m in metrics:
        if len(m.get("candidate", ())) < fewest:
            return False
        if _wholly_within(m, float(m["bound"])):
            continue
        backend = str(m["backend"]) if m.get("backend") else None
        name = str(m.get("metric", "?"))
        live = [
            w
            for w in policy.waivers
            if w.covers(cell, name, check, backend) and holds(w, policy.today, policy.milestone)
        ]
        if not any(_wholly_within(m, w.bound) for w in live):
            return False
    return bool(metrics)
