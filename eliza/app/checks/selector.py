"""The selector check: the selector suite (fake factories against the compiled selector of
the cell's test kit) run once per cell through pytest, counted from its JUnit XML."""

from __future__ import annotations

from collections.abc import Sequence

from eliza.adapters.pytest_runner import run_pytest
from eliza.app.checks.common import Stopwatch
from eliza.app.run import Run
from eliza.core.evidence import LoadedRecord
from eliza.core.matrix import Cell, CheckKind
from eliza.core.outcome import cases_outcome

SUITE = "tests/selector"


def run_selector(run: Run, cells: Sequence[Cell], existing: dict[tuple[str, str], LoadedRecord]) -> None:
    for cell in cells:
        check = run.check_of(cell, CheckKind.SELECTOR)
        if check is None:
            continue
        if run.fresh_pass(cell, check, existing):
            run.log(f"  {cell.id:<24} {check.id:<24} fresh passing evidence exists; not re-run")
            continue
        watch = Stopwatch()
        junit = run.project.build_root / "junit" / f"selector-{cell.id}.xml"
        result = run_pytest(run.project.repo, [SUITE], junit, {"ELIZA_TEST_CELL": cell.id})
        run.record(
            [
                cases_outcome(
                    cell.id, check.id, result.cases, result.log, watch.span(), (junit,), error=result.error
                )
            ]
        )
