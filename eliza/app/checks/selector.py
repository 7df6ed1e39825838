"""The selector check: the selector suite (fake factories against the compiled selector of
the cell's test kit), through pytest once per cell, counted from its JUnit XML; on an
emulated platform, case_runner reads the same case table on the target."""

from __future__ import annotations

from eliza.adapters.pytest_runner import run_pytest
from eliza.app.checks.job import Job
from eliza.app.checks.target_cases import selector_on_target
from eliza.app.services.clock import Stopwatch
from eliza.app.services.run import Run
from eliza.core.outcome import CheckOutcome, cases_outcome

SUITE = "tests/selector"


def run(job: Job, evidence: Run) -> list[CheckOutcome]:
    if job.target is not None:
        return selector_on_target(job, evidence, job.target)
    outcomes = []
    for cell, check in job.pairs():
        watch = Stopwatch()
        junit = evidence.project.build_root / "junit" / f"selector-{cell.id}.xml"
        env = {"ELIZA_TEST_CELL": cell.id, **evidence.child_env}
        result = run_pytest(evidence.project.repo, [SUITE], junit, env)
        outcomes.append(
            cases_outcome(
                cell.id, check.id, result.cases, result.log, watch.span(), (junit,), error=result.error
            )
        )
    return outcomes
