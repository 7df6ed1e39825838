"""Two reports side by side: "since OLD", what changed between an older report (a previous
release's report.json) and this one. Pure: both come in as report.json data.

- regressions first: an entry VERIFIED before and not now, or FAILED now and not before;
- the entries newly VERIFIED;
- every other change of state;
- every perf metric's change: the ratio before and now, significant when the two
  intervals do not overlap ("~" otherwise, as benchstat writes it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MetricChange", "ReportFormatError", "Since", "StateChange", "check_format", "compare_reports"]

VERIFIED = "verified"
FAILED = "failed"


class ReportFormatError(ValueError):
    """A report this reader cannot compare with; the message names the file and the field."""


@dataclass(frozen=True, kw_only=True)
class StateChange:
    cell: str
    check: str
    before: str  # a GridState value, or "absent"
    now: str

    def describe(self) -> str:
        return f"{self.cell} · {self.check}: {self.before} -> {self.now}"


@dataclass(frozen=True, kw_only=True)
class MetricChange:
    cell: str
    metric: str
    before: float  # ratio candidate / reference in the old report
    now: float
    before_interval: tuple[float, float]
    now_interval: tuple[float, float]
    significant: bool  # the intervals do not overlap

    @property
    def change(self) -> float:
        return self.now / self.before - 1.0 if self.before else 0.0

    def describe(self) -> str:
        mark = f"{self.change:+.1%}" if self.significant else "~"
        return (
            f"{self.cell} {self.metric}: ratio {self.before:.3f} -> {self.now:.3f} ({mark}; "
            f"CI {self.before_interval[0]:.3f}..{self.before_interval[1]:.3f} -> "
            f"{self.now_interval[0]:.3f}..{self.now_interval[1]:.3f})"
        )


@dataclass(frozen=True, kw_only=True)
class Since:
    old: str  # the old report's path, as given
    old_commit: str
    old_generated_at: str
    regressions: tuple[StateChange, ...]
    newly_verified: tuple[StateChange, ...]
    other: tuple[StateChange, ...]
    metrics: tuple[MetricChange, ...]

    @property
    def regressed(self) -> bool:
        """Whether --fail-on-regression fails: an entry regressed (a perf metric's
        regression makes its entry FAILED, so it is counted there)."""
        return bool(self.regressions)

    def summary(self) -> str:
        return (
            f"since {self.old}: {len(self.regressions)} regression(s), "
            f"{len(self.newly_verified)} newly verified, {len(self.other)} other change(s), "
            f"{sum(m.significant for m in self.metrics)} significant metric change(s)"
        )


def check_format(data: Any, source: str, version_known: int) -> Mapping[str, Any]:
    """The data of a report.json this reader understands, or ReportFormatError."""
    if not isinstance(data, Mapping):
        raise ReportFormatError(f"{source}: not a report (the top level is not a JSON object)")
    version = data.get("schema_version")
    if version != version_known:
        raise ReportFormatError(
            f"{source}: field 'schema_version': report format {version!r} is not one this reader knows "
            f"(it reads {version_known}); render the old report again with this version, or compare "
            "with a report of the same format"
        )
    rows = data.get("rows")
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) and "entries" in r for r in rows):
        raise ReportFormatError(f"{source}: field 'rows': missing or not a list of rows with entries")
    return data


def _states(data: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    return {
        (str(e["cell"]), str(e["check"])): str(e["state"])
        for row in data.get("rows", [])
        for e in row.get("entries", [])
        if e.get("state") != "n/a"
    }


def _perf(data: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    return {(str(r["cell"]), str(r["metric"])): r for r in data.get("perf", []) if isinstance(r, Mapping)}


def _is_regression(before: str, now: str) -> bool:
    return (before == VERIFIED and now != VERIFIED) or (now == FAILED and before != FAILED)


def compare_reports(old: Mapping[str, Any], new: Mapping[str, Any], *, old_source: str) -> Since:
    """What changed from `old` to `new` (both report.json data, checked with check_format)."""
    before, now = _states(old), _states(new)
    regressions: list[StateChange] = []
    verified: list[StateChange] = []
    other: list[StateChange] = []
    for key in sorted(set(before) | set(now)):
        b, n = before.get(key, "absent"), now.get(key, "absent")
        if b == n:
            continue
        change = StateChange(cell=key[0], check=key[1], before=b, now=n)
        if _is_regression(b, n):
            regressions.append(change)
        elif n == VERIFIED:
            verified.append(change)
        else:
            other.append(change)
    old_perf, new_perf = _perf(old), _perf(new)
    metrics: list[MetricChange] = []
    for key in sorted(set(old_perf) & set(new_perf)):
        was, now_row = old_perf[key], new_perf[key]
        o_iv = (float(was["ci_low"]), float(was["ci_high"]))
        n_iv = (float(now_row["ci_low"]), float(now_row["ci_high"]))
        metrics.append(
            MetricChange(
                cell=key[0],
                metric=key[1],
                before=float(was["ratio"]),
                now=float(now_row["ratio"]),
                before_interval=o_iv,
                now_interval=n_iv,
                significant=o_iv[1] < n_iv[0] or n_iv[1] < o_iv[0],
            )
        )
    header: Mapping[str, Any] = old.get("header", {}) if isinstance(old.get("header"), Mapping) else {}
    return Since(
        old=old_source,
        old_commit=str(header.get("commit", "")),
        old_generated_at=str(header.get("generated_at", "")),
        regressions=tuple(regressions),
        newly_verified=tuple(verified),
        other=tuple(other),
        metrics=tuple(sorted(metrics, key=lambda m: (not m.significant, m.cell, m.metric))),
    )
