"""What every check runner shares: the clock that times a check."""

from __future__ import annotations

import resource
import time
from datetime import UTC, datetime

from eliza.core.outcome import Span


def now() -> datetime:
    return datetime.now(UTC)


def cpu_seconds() -> float:
    """CPU time (user and system) of this process and of the children it has waited for."""
    mine, theirs = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + theirs.ru_utime + theirs.ru_stime


class Stopwatch:
    """Start time of a check; `span()` closes it at the moment of the call."""

    def __init__(self) -> None:
        self.started = now()
        self._t0 = time.monotonic()
        self._cpu0 = cpu_seconds()

    def seconds(self) -> float:
        return time.monotonic() - self._t0

    def cpu_seconds(self) -> float:
        """CPU time spent since the start by this process and the children it waited for
        (every tool a step runs), on all cores together."""
        return cpu_seconds() - self._cpu0

    def span(self) -> Span:
        return Span(started=self.started, finished=now())
