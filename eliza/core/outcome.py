"""What one check on one cell produced, before it becomes an evidence record (which adds
the input fingerprint, the host and the commit: see eliza.app.services.recording).

Times are given, never read here: the runner that timed the check passes its Span.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from eliza.core.evidence import Status


@dataclass(frozen=True, kw_only=True)
class Span:
    """When a check started and finished (timezone-aware)."""

    started: datetime
    finished: datetime


@dataclass(frozen=True, kw_only=True)
class CheckOutcome:
    cell: str
    check: str
    status: Status
    ran: int
    passed: int
    started_at: datetime
    finished_at: datetime
    reason: str = ""
    metrics: Mapping[str, float | int | str] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    artifacts: tuple[Path, ...] = ()
    log_tail: str = ""

    @property
    def failed(self) -> int:
        return self.ran - self.passed if self.status is Status.FAILED else 0


def outcome(
    cell: str,
    check: str,
    *,
    ran: int,
    passed: int,
    span: Span,
    reason: str = "",
    error: bool = False,
    **extra: Any,
) -> CheckOutcome:
    """passed when every case that ran passed (and something ran), else failed/error."""
    if error:
        status = Status.ERROR
    elif ran > 0 and passed == ran:
        status = Status.PASSED
    else:
        status = Status.FAILED
        reason = reason or ("nothing ran" if ran == 0 else f"{ran - passed} of {ran} failed")
    return CheckOutcome(cell=cell, check=check, status=status, ran=ran, passed=passed, reason=reason,
                        started_at=span.started, finished_at=span.finished, **extra)  # fmt: skip


def skipped(cell: str, check: str, reason: str, at: datetime) -> CheckOutcome:
    return CheckOutcome(
        cell=cell,
        check=check,
        status=Status.SKIPPED,
        ran=0,
        passed=0,
        reason=reason,
        started_at=at,
        finished_at=at,
    )


@dataclass(frozen=True, kw_only=True)
class SubCheck:
    """One named condition of a check computed from artefacts (build, abi)."""

    name: str
    ok: bool
    detail: str = ""


def from_subchecks(
    cell: str,
    check: str,
    subs: Sequence[SubCheck],
    span: Span,
    *,
    artifacts: tuple[Path, ...],
    details: Mapping[str, object],
    metrics: Mapping[str, float | int | str] | None = None,
) -> CheckOutcome:
    failed = [s for s in subs if not s.ok]
    reason = "; ".join(f"{s.name}: {s.detail}" for s in failed)
    everything = {**details, "subchecks": [{"name": s.name, "ok": s.ok, "detail": s.detail} for s in subs]}
    return outcome(
        cell,
        check,
        ran=len(subs),
        passed=len(subs) - len(failed),
        span=span,
        reason=reason,
        details=everything,
        artifacts=artifacts,
        metrics=metrics or {},
    )


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    """One test case of a pytest-driven check, as its JUnit XML reports it."""

    name: str
    passed: bool
    skipped: bool
    message: str


def cases_outcome(
    cell: str,
    check: str,
    cases: Sequence[CaseResult],
    log: str,
    span: Span,
    artifacts: tuple[Path, ...],
    *,
    error: str = "",
) -> CheckOutcome:
    if error:
        return outcome(cell, check, ran=0, passed=0, span=span, reason=error, error=True, log_tail=log)
    ran = [c for c in cases if not c.skipped]
    passed = [c for c in ran if c.passed]
    failed = [c for c in ran if not c.passed]
    reason = "; ".join(f"{c.name}: {c.message[:200]}" for c in failed[:3])
    return outcome(
        cell,
        check,
        ran=len(ran),
        passed=len(passed),
        span=span,
        reason=reason,
        log_tail=log,
        artifacts=artifacts,
        details={"cases": [c.name for c in ran], "failed": [c.name for c in failed]},
    )


def cases_of_cell(cases: Sequence[CaseResult], cell_id: str, all_cells: Sequence[str]) -> list[CaseResult]:
    """Cases parametrised with cell=<id> for this cell, plus the platform-wide ones."""

    def names_cell(name: str, cid: str) -> bool:
        return f"cell={cid}]" in name or f"cell={cid}-" in name

    own = [c for c in cases if names_cell(c.name, cell_id)]
    if not own:
        return []  # without a case of its own, platform-wide cases prove nothing about this cell
    return own + [c for c in cases if not any(names_cell(c.name, x) for x in all_cells)]
