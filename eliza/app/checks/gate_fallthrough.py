"""The gate-fallthrough check: the gate suite runs once per platform against every cell's
shipped library; each cell is credited with the cases named after it. On an emulated
platform, case_runner runs the same case table on the target."""

from __future__ import annotations

from eliza.adapters.pytest_runner import run_pytest
from eliza.app.checks.job import Job
from eliza.app.checks.runtimes import runtime_hidden
from eliza.app.checks.target_cases import gate_fallthrough_on_target
from eliza.app.services.clock import Stopwatch
from eliza.app.services.run import Run
from eliza.core.outcome import CheckOutcome, cases_of_cell, cases_outcome

# End to end through each shipped library, and each compiled factory against its matrix entry.
SUITE = ("tests/gates/test_gate_cells.py", "tests/gates/test_gate_factories.py")


def run(job: Job, evidence: Run) -> list[CheckOutcome]:
    if job.target is not None:
        return gate_fallthrough_on_target(job, evidence, job.target)
    platform = job.platform
    watch = Stopwatch()
    junit = evidence.project.build_root / "junit" / f"gates-{platform.id}.xml"
    # The suite tests the cells of this job and the reference cell they are compared with:
    # the libraries the executor built for it.
    cells = [str(c) for c in job.libraries if c.platform == platform.id]
    env = {
        "ELIZA_TEST_PLATFORM": platform.id,
        "ELIZA_TEST_CELLS": ",".join(cells),
        **evidence.child_env,
        **runtime_hidden(evidence),
    }
    result = run_pytest(evidence.project.repo, SUITE, junit, env)
    ids = [c.id for c in job.matrix.cells_of(platform.id)]
    span = watch.span()
    return [
        cases_outcome(
            cell.id,
            check.id,
            cases_of_cell(result.cases, cell.id, ids),
            result.log,
            span,
            (junit,),
            error=result.error,
        )
        for cell, check in job.pairs()
    ]
