"""What the release tests share."""

from __future__ import annotations

import subprocess


def line_of(cell: str, done: subprocess.CompletedProcess[str]) -> str:
    """The release's verdict line on the cell (else the end of its output, to show)."""
    return next((line for line in done.stderr.splitlines() if f"{cell}: " in line), done.stderr[-2000:])
