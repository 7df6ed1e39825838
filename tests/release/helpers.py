"""What the release tests share."""

from __future__ import annotations

import subprocess

import pytest

# The other reasons a release refuses a cell: any of them is a failure of the test's premise.
_OTHER_REFUSALS = ("FAILED", "STALE", "NOT RUN", "UNTRUSTED", "INVALID", "has sha256", "does not exist")


def skip_when_perf_could_not_decide(cell: str, line: str) -> None:
    """A host too noisy for the perf check to decide leaves it INCONCLUSIVE: the release then
    rightly refuses the cell (never VERIFIED), and a test of what ships has nothing to test.
    Any other refusal is left to the test to fail on."""
    if f"{cell}: refused" in line and "INCONCLUSIVE" in line and not any(r in line for r in _OTHER_REFUSALS):
        pytest.skip(
            f"the release rightly refuses {cell}: its perf was INCONCLUSIVE on this host ({line[:300]})"
        )


def line_of(cell: str, done: subprocess.CompletedProcess[str]) -> str:
    """The release's verdict line on the cell (else the end of its output, to show)."""
    return next((line for line in done.stderr.splitlines() if f"{cell}: " in line), done.stderr[-2000:])
