"""The gate-fallthrough check: the gate suite runs once per platform against every cell's
shipped library; each cell is credited with the cases named after it."""

from __future__ import annotations

from collections.abc import Sequence

from eliza.adapters.pytest_runner import run_pytest
from eliza.app.checks.common import Stopwatch
from eliza.app.run import Run
from eliza.core.evidence import LoadedRecord
from eliza.core.matrix import Cell, CheckKind, Platform
from eliza.core.outcome import cases_of_cell, cases_outcome

# End to end through each shipped library, and each compiled factory against its matrix entry.
SUITE = ("tests/gates/test_gate_cells.py", "tests/gates/test_gate_factories.py")


def run_gate_fallthrough(
    run: Run, platform: Platform, cells: Sequence[Cell], existing: dict[tuple[str, str], LoadedRecord]
) -> None:
    wanted = [(c, k) for c in cells if (k := run.check_of(c, CheckKind.GATE_FALLTHROUGH)) is not None]
    if not wanted or all(run.fresh_pass(c, k, existing) for c, k in wanted):
        if wanted:
            run.log(
                f"  {platform.id}: gate-fallthrough has fresh passing evidence for every cell; not re-run"
            )
        return
    watch = Stopwatch()
    junit = run.project.build_root / "junit" / f"gates-{platform.id}.xml"
    result = run_pytest(run.project.repo, SUITE, junit, {"ELIZA_TEST_PLATFORM": platform.id})
    ids = [c.id for c in cells]
    span = watch.span()
    run.record(
        [
            cases_outcome(
                cell.id,
                check.id,
                cases_of_cell(result.cases, cell.id, ids),
                result.log,
                span,
                (junit,),
                error=result.error,
            )
            for cell, check in wanted
        ]
    )
