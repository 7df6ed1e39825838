"""The CI pipeline as data: one job per matrix cell (pure, from the matrix)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from eliza.core.matrix import Matrix, Platform


@dataclass(frozen=True, kw_only=True)
class Job:
    id: str
    cell: str
    platform: str
    runs_on: list[str]
    slow: bool


def job_id(cell_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", cell_id.replace("+", "-"))


def jobs_of(matrix: Matrix) -> list[Job]:
    return [
        Job(
            id=job_id(c.id),
            cell=c.id,
            platform=c.platform.id,
            runs_on=list(c.platform.ci_runner),
            slow=c.platform.slow_build,
        )
        for c in matrix.cells
    ]


def report_platform(matrix: Matrix) -> Platform:
    """Where the report job runs: the first Linux platform that builds quickly."""
    return next((p for p in matrix.platforms if not p.slow_build and p.os == "linux"), matrix.platforms[0])
