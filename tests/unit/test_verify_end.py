"""Verify's last line (eliza.app.verification.no_longer_counted): a record that stood when the
run started, of any cell, and that the run did not run again, must still be counted by the
report rendered afterwards; the entries that are not are named."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eliza.app.verification import Planned, no_longer_counted
from eliza.core.cell_id import CellId
from eliza.core.matrix import CheckKind
from eliza.core.report.states import GridState
from eliza.core.verify_plan import Run, VerifyPlan


@dataclass(frozen=True)
class Entry:
    cell: str
    check: str
    state: GridState
    reason: str = ""


class Report:
    """The one method no_longer_counted reads of a report."""

    def __init__(self, states: dict[tuple[str, str], GridState]) -> None:
        self.states = states

    def entry(self, cell: str, check: str) -> Entry:
        return Entry(cell, check, self.states[(cell, check)])


def planned(standing: list[tuple[str, str]], ran: list[tuple[str, str]]) -> Any:
    runs = tuple(
        Run(cell=CellId.parse(c), check=k, kind=CheckKind.GATE_FALLTHROUGH, reason="--rerun") for c, k in ran
    )
    return Planned(plan=VerifyPlan(steps=runs), run=None, baseline=None, standing=tuple(standing))  # type: ignore[arg-type]


def test_a_record_of_a_cell_not_run_that_stopped_counting_is_named() -> None:
    standing = [("linux-cpu.none", "gate-fallthrough"), ("linux-cpu.mlx", "gate-fallthrough"),
                ("linux-cpu.litert", "gate-fallthrough"), ("linux-cpu.mlx", "perf")]  # fmt: skip
    report = Report({
        ("linux-cpu.none", "gate-fallthrough"): GridState.FAILED,  # it ran: its own line says so
        ("linux-cpu.mlx", "gate-fallthrough"): GridState.INVALID,  # not run, and broken meanwhile
        ("linux-cpu.litert", "gate-fallthrough"): GridState.VERIFIED,
        ("linux-cpu.mlx", "perf"): GridState.INCONCLUSIVE,  # an undecided perf record stands
    })  # fmt: skip
    found = no_longer_counted(planned(standing, [("linux-cpu.none", "gate-fallthrough")]), report)  # type: ignore[arg-type]
    assert [(e.cell, e.check) for e in found] == [("linux-cpu.mlx", "gate-fallthrough")]


def test_nothing_is_named_when_every_standing_record_still_counts() -> None:
    standing = [("linux-cpu.mlx", "abi")]
    report = Report({("linux-cpu.mlx", "abi"): GridState.VERIFIED})
    assert no_longer_counted(planned(standing, []), report) == []  # type: ignore[arg-type]
