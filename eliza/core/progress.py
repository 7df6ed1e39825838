"""Progress of a long build, read from its output: the steps Ninja reports ("[12/345]"),
turned into a few lines with elapsed and estimated remaining time instead of thousands.

Pure: the caller feeds each output line with the seconds elapsed since the build began.
It also keeps how long each Conan package's output lasted (`package_spans`), which is how
long that package took to build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STEP = re.compile(r"\[(\d+)/(\d+)\]")
# Conan names the package whose output follows: "llama-cpp/0.3.36: Calling build()".
_PACKAGE = re.compile(r"^([A-Za-z0-9_.+-]+/[A-Za-z0-9_.+-]+)(?:@\S*)?: ")


@dataclass
class BuildProgress:
    """Reports a line when a build passes another `every_percent`, or `every_s` seconds
    after the last report, whichever comes first; nothing before the build has run
    `quiet_s` seconds (a build of a few seconds needs no progress)."""

    label: str
    every_percent: int = 10
    every_s: float = 60.0
    quiet_s: float = 5.0
    # package reference -> (first, last) elapsed second a line of its output was seen
    package_spans: dict[str, tuple[float, float]] = field(default_factory=dict)
    _package: str = ""
    _last_percent: int = -1
    _last_report_s: float = 0.0
    _started_s: float | None = None  # when the current step counter began

    def feed(self, line: str, elapsed_s: float) -> str | None:
        package = _PACKAGE.match(line)
        if package:
            self._package = package.group(1)
            first, _ = self.package_spans.get(self._package, (elapsed_s, elapsed_s))
            self.package_spans[self._package] = (first, elapsed_s)
        step = _STEP.search(line)
        if step is None:
            return None
        done, total = int(step.group(1)), int(step.group(2))
        if total <= 0 or done > total:
            return None
        if done == 1 or self._started_s is None:
            self._started_s, self._last_percent = elapsed_s, -1
        if elapsed_s < self.quiet_s:
            return None
        percent = done * 100 // total
        due_by_percent = percent // self.every_percent > self._last_percent // self.every_percent
        due_by_time = elapsed_s - self._last_report_s >= self.every_s
        if not (due_by_percent or due_by_time or done == total):
            return None
        self._last_percent, self._last_report_s = percent, elapsed_s
        spent = elapsed_s - self._started_s
        left = spent * (total - done) / done if done else 0.0
        what = f"{self.label} ({self._package})" if self._package else self.label
        timing = f"{_clock(elapsed_s)} elapsed, about {_clock(left)} left"
        return f"{what}: step {done}/{total} ({percent}%), {timing}"

    def package_seconds(self, prefix: str) -> float:
        """How long the output of the package whose reference starts with `prefix` lasted
        (0 when it printed nothing: reused from the cache)."""
        spans = [last - first for ref, (first, last) in self.package_spans.items() if ref.startswith(prefix)]
        return max(spans, default=0.0)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds + 0.5), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
