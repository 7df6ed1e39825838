"""What one check on one cell produced, before it becomes an evidence record (which adds
the input fingerprint, the host and the commit: see eliza.evidence_io)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eliza.evidence import Status


@dataclass(frozen=True, kw_only=True)
class CheckOutcome:
    cell: str
    check: str
    status: Status
    ran: int
    passed: int
    reason: str = ""
    metrics: Mapping[str, float | int | str] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    artifacts: tuple[Path, ...] = ()
    log_tail: str = ""
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def failed(self) -> int:
        return self.ran - self.passed if self.status is Status.FAILED else 0


class Stopwatch:
    """Start/finish times of a check, for its outcome."""

    def __init__(self) -> None:
        self.started = datetime.now(UTC)
        self._t0 = time.monotonic()

    def seconds(self) -> float:
        return time.monotonic() - self._t0


def outcome(
    cell: str,
    check: str,
    *,
    ran: int,
    passed: int,
    watch: Stopwatch,
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
                        started_at=watch.started, finished_at=datetime.now(UTC), **extra)  # fmt: skip


def skipped(cell: str, check: str, reason: str) -> CheckOutcome:
    return CheckOutcome(cell=cell, check=check, status=Status.SKIPPED, ran=0, passed=0, reason=reason)
