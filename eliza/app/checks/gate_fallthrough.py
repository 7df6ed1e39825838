"""The gate-fallthrough check: the gate suite runs once per platform against every cell's
shipped library; each cell is credited with the cases named after it."""

from __future__ import annotations

from collections.abc import Sequence

from eliza.adapters.pytest_runner import run_pytest
from eliza.app.checks.common import Stopwatch
from eliza.app.run import Run
from eliza.core.evidence import LoadedRecord
from eliza.core.matrix import Cell, Check, CheckKind, Platform
from eliza.core.outcome import cases_of_cell, cases_outcome

# End to end through each shipped library, and each compiled factory against its matrix entry.
SUITE = ("tests/gates/test_gate_cells.py", "tests/gates/test_gate_factories.py")


def fallthrough_to_run(
    run: Run, platform: Platform, cells: Sequence[Cell], existing: dict[tuple[str, str], LoadedRecord]
) -> list[tuple[Cell, Check]]:
    """The cells' gate-fallthrough checks, or none when every one has fresh passing evidence
    (the suite runs all cells of a platform at once, so it runs for all or for none)."""
    wanted = [(c, k) for c in cells if (k := run.check_of(c, CheckKind.GATE_FALLTHROUGH)) is not None]
    if wanted and all(run.fresh_pass(c, k, existing) for c, k in wanted):
        run.log(f"  {platform.id}: gate-fallthrough has fresh passing evidence for every cell; not re-run")
        return []
    return wanted


def run_gate_fallthrough(
    run: Run, platform: Platform, cells: Sequence[Cell], existing: dict[tuple[str, str], LoadedRecord]
) -> None:
    wanted = fallthrough_to_run(run, platform, cells, existing)
    if not wanted:
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
