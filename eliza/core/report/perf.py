"""The report's perf part: each perf entry re-judged with the waivers that hold on the
report's date (a waiver that expired since the run stops counting, with a warning), and
one row per (cell, metric) for the perf tables and the chart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import date
from typing import Any

from eliza.core.evidence import EvidenceRecord
from eliza.core.matrix import CheckKind
from eliza.core.perf_waivers import FAILED, INCONCLUSIVE, PerfPolicy, instrument_of, judge_with_waivers
from eliza.core.report.model import WAIVED_PREFIX, Entry, PerfRow
from eliza.core.report.states import GridState

__all__ = ["decision", "perf_entry", "perf_rows", "report_date"]


def report_date(generated_at: str) -> date:
    """The day a report is generated on (its header's ISO 8601 UTC time)."""
    return date.fromisoformat(generated_at[:10])


def _perf(record: EvidenceRecord) -> Mapping[str, Any]:
    perf = record.details.get("perf")
    return perf if isinstance(perf, Mapping) else {}


def perf_entry(entry: Entry, record: EvidenceRecord | None, policy: PerfPolicy) -> Entry:
    """A fresh perf entry judged again under today's waivers; any other entry as it is."""
    if entry.kind is not CheckKind.PERF or record is None:
        return entry
    if entry.state not in (GridState.VERIFIED, GridState.FAILED, GridState.INCONCLUSIVE):
        return entry
    metrics = _perf(record).get("metrics")
    if not isinstance(metrics, Sequence) or not metrics:
        return entry
    state = judge_with_waivers(
        entry.cell, [m for m in metrics if isinstance(m, Mapping)], policy, entry.check
    )
    notes = (*entry.notes, *state.warnings, f"decided by {state.decision()}")
    if state.verdict == FAILED:
        return replace(entry, state=GridState.FAILED, reason=f"failed: {state.words}", notes=notes)
    if state.verdict == INCONCLUSIVE:
        return replace(
            entry, state=GridState.INCONCLUSIVE, reason=f"inconclusive: {state.words}", notes=notes
        )
    reason = f"{WAIVED_PREFIX}{'; '.join(state.waived)})" if state.waived else entry.reason
    if entry.state is not GridState.VERIFIED and not state.waived:
        return replace(entry, notes=notes)  # counts or status disagree: keep the judge's word
    return replace(entry, state=GridState.VERIFIED, reason=reason, notes=notes)


def decision(entry: Entry, record: EvidenceRecord, policy: PerfPolicy) -> str:
    """Which instrument decided the entry, in words (judged as perf_entry judges it)."""
    metrics = [m for m in _perf(record).get("metrics", []) if isinstance(m, Mapping)]
    if not metrics:
        return ""
    return judge_with_waivers(entry.cell, metrics, policy, entry.check).decision()


def perf_rows(entry: Entry, record: EvidenceRecord, platform: str, decided_by: str = "") -> list[PerfRow]:
    perf = _perf(record)
    rows: list[PerfRow] = []
    for m in perf.get("metrics", []):
        if not isinstance(m, Mapping):
            continue
        candidate = [float(v) for v in m.get("candidate", [])]
        reference = [float(v) for v in m.get("reference", [])]
        rows.append(
            PerfRow(
                cell=entry.cell,
                platform=platform,
                check=entry.check,
                # a backend check's row names the backend it timed: "mlx-coreml decode_tok_s"
                metric=f"{m['backend']} {m['metric']}" if m.get("backend") else str(m["metric"]),
                direction=str(m.get("direction", "higher")),
                ratio=float(m["ratio"]),
                ci_low=float(m["ci_low"]),
                ci_high=float(m["ci_high"]),
                p_value=float(m["p_value"]),
                bound=float(m["bound"]),
                threshold=float(m["threshold"]),
                verdict=str(m["verdict"]),
                candidate=_median(candidate),
                reference=_median(reference),
                rounds=_rounds(m, perf, len(candidate)),
                # a body against its own runner names that runner (its row says so)
                against=str(m.get("against") or perf.get("reference", "")),
                ran_on=f"{perf.get('ran_on', 'native')} on {record.host.cpu} ({record.host.os})",
                measured_at=record.finished_at,
                state=entry.state,
                anchor=entry.anchor,
                instrument=instrument_of(m),
                exact=bool(m.get("exact", False)),
                decided_by=decided_by,
            )
        )
    return rows


def _rounds(metric: Mapping[str, Any], perf: Mapping[str, Any], samples: int) -> int:
    """The rounds behind a metric: one run per side for an exact count, else its samples
    (one a round: a series that settled at the first look ran fewer than another, and a
    body's own-runner rounds are their own), else the record's rounds run."""
    if metric.get("exact"):
        return 1
    return samples or int(perf.get("rounds_run", perf.get("rounds", 0)))


def _median(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
