"""What every check runner shares: the clock that times a check."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from eliza.core.outcome import Span


def now() -> datetime:
    return datetime.now(UTC)


class Stopwatch:
    """Start time of a check; `span()` closes it at the moment of the call."""

    def __init__(self) -> None:
        self.started = now()
        self._t0 = time.monotonic()

    def seconds(self) -> float:
        return time.monotonic() - self._t0

    def span(self) -> Span:
        return Span(started=self.started, finished=now())
