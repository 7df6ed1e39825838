"""What a check runner is handed: the steps it runs, the cells and libraries they need,
and how the platform's binaries run here. A runner runs and returns outcomes; it never
builds, never decides freshness and never records (the executor does)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from eliza.adapters.targets import Target
from eliza.app.services.bench_options import BenchOptions
from eliza.app.services.built import BuiltCell
from eliza.app.services.run import Run as EvidenceRun
from eliza.core.cell_id import CellId
from eliza.core.matrix import Cell, Check, Matrix, Platform
from eliza.core.outcome import CheckOutcome
from eliza.core.verify_plan import Run

# Where a runner measures wall time: nothing else runs on the host until the block ends.
Alone = Callable[[], AbstractContextManager[None]]
# Where a runner repeats a measurement apart from its first: the block starts the gap
# (seconds) later, the call's place given to the others meanwhile.
Apart = Callable[[float], AbstractContextManager[None]]


def at_once(gap: float) -> AbstractContextManager[None]:
    """apart() outside an executor (the tests' runs): at once."""
    return nullcontext()


@dataclass(frozen=True, kw_only=True)
class Job:
    matrix: Matrix
    platform: Platform
    steps: tuple[Run, ...]
    libraries: Mapping[CellId, Path]  # every library the steps read: subjects and references
    built: Mapping[CellId, BuiltCell] = field(default_factory=dict)  # the cells built in this run
    baselines: Mapping[str, Path] = field(default_factory=dict)  # commit -> this platform's baseline library
    target: Target | None = None  # the emulator or the lab device, when the platform's binaries run there
    bench: BenchOptions | None = None  # the bench's settings, for the byte-identity runner
    # Where a runner measures wall time: nothing else runs on the host until the block ends
    # (the executor's; outside an executor nothing runs beside anyway).
    alone: Alone = nullcontext
    # (the executor's; outside an executor the block starts at once)
    apart: Apart = at_once

    @property
    def cells(self) -> tuple[Cell, ...]:
        """The steps' cells, in order, each once."""
        seen: dict[CellId, Cell] = {}
        for step in self.steps:
            seen.setdefault(step.cell, self.matrix.cell(step.cell))
        return tuple(seen.values())

    def pairs(self) -> list[tuple[Cell, Check]]:
        return [(self.matrix.cell(s.cell), self.matrix.check(s.check)) for s in self.steps]

    def library(self, cell: Cell | CellId) -> Path:
        return self.libraries[cell.ref if isinstance(cell, Cell) else cell]


CheckRunner = Callable[[Job, EvidenceRun], list[CheckOutcome]]
