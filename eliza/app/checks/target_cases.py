"""The selector and gate-fallthrough checks run as target binaries: case_runner (built with
every cell) reads the case tables of native/cases where the library runs, natively or under
the platform's emulator, with a time limit on every run. Used for platforms whose
libraries this host's Python cannot load; the host's own platforms keep the pytest suites,
which read the same tables."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from eliza.adapters.targets import Target
from eliza.app.checks.job import Job
from eliza.app.checks.runtimes import runtime_hidden
from eliza.app.services.clock import Stopwatch
from eliza.app.services.run import Run
from eliza.core.matrix import Gate
from eliza.core.outcome import CaseResult, CheckOutcome, cases_outcome
from eliza.core.target import test_kit_file
from eliza.formats.case_tables import (
    GATE_TABLE,
    SEAM_TABLE,
    SELECTOR_TABLE,
    RunnerReport,
    expand_gate_cases,
    parse_gate_table,
    parse_runner_output,
    plan_text,
)
from eliza.formats.files import atomic_write_text

RUNNER = "case_runner"
MAX_TOKENS = 16


def _run_cases(
    runner: Target, argv: list[str], prefix: str, env: Mapping[str, str] | None = None
) -> tuple[RunnerReport, str, str]:
    """(report, log, error): error says why the runner's own result cannot be trusted
    (it crashed, hung, or stopped before its summary)."""
    done = runner.run(argv, env=env)
    log = f"$ {' '.join(argv)}  [{runner.words}]\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    report = parse_runner_output(done.stdout, prefix)
    if done.returncode not in (0, 1) or report.summary is None:
        said = done.stderr.strip()[-800:]
        return (
            report,
            log,
            f"{RUNNER} exited {done.returncode} under {runner.words} before its summary: {said}",
        )
    if report.summary != (len(report.cases), sum(c.passed for c in report.cases)):
        return report, log, f"{RUNNER}'s summary {report.summary} disagrees with its case lines"
    return report, log, ""


def selector_on_target(job: Job, evidence: Run, runner: Target) -> list[CheckOutcome]:
    table = evidence.project.repo / SELECTOR_TABLE
    seam = evidence.project.repo / SEAM_TABLE
    outcomes = []
    for cell, check in job.pairs():
        watch = Stopwatch()
        build = job.library(cell).parent
        kit = build / test_kit_file(cell.platform)
        # The seam table named, not found beside --cases: on a device each file is pushed alone.
        argv = [str(build / RUNNER), "selector", "--kit", str(kit), "--cases", str(table),
                "--seam-cases", str(seam)]  # fmt: skip
        report, log, error = _run_cases(runner, argv, "selector::")
        outcomes.append(
            cases_outcome(cell.id, check.id, report.cases, log, watch.span(), (table, kit), error=error)
        )
    return outcomes


def _place(bundle: Path, pattern: str) -> None:
    """What a matrix artifact pattern names: text/*.ext (a file artifact.ext), text/name/
    (a directory), text/name (a file)."""
    target = bundle / pattern.replace("*", "artifact").rstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if pattern.endswith("/"):
        target.mkdir(exist_ok=True)
    else:
        target.write_bytes(b"not a real model")


def case_bundles(tiny: Path, root: Path, gates: Sequence[Gate]) -> dict[str, Path]:
    """The bundles the gate table names, under root: gguf (the tiny bundle beside every
    gate's artifacts), corrupt-gguf (its model truncated), only-<gate> (no GGUF)."""
    if root.exists():
        shutil.rmtree(root)
    bundles = {"gguf": root / "gguf", "corrupt-gguf": root / "corrupt-gguf"}
    shutil.copytree(tiny, bundles["gguf"])
    for gate in gates:
        for pattern in gate.artifacts:
            _place(bundles["gguf"], pattern)
        only = bundles[f"only-{gate.id}"] = root / f"only-{gate.id}"
        for pattern in gate.artifacts:
            _place(only, pattern)
    shutil.copytree(bundles["gguf"], bundles["corrupt-gguf"])
    for model in (bundles["corrupt-gguf"] / "text").glob("*.gguf"):
        model.write_bytes(model.read_bytes()[:4096])
    return bundles


def gate_fallthrough_on_target(job: Job, evidence: Run, runner: Target) -> list[CheckOutcome]:
    """Every cell the steps name and the platform's reference cell run the gate table; a
    case that generates passes only with the reference cell's output."""
    repo = evidence.project.repo
    matrix = job.matrix
    table_path = repo / GATE_TABLE
    templates = parse_gate_table(table_path.read_text(encoding="utf-8"), str(GATE_TABLE))
    work = evidence.project.build_root / "cases" / job.platform.id
    bundles = case_bundles(evidence.bundle, work / "bundles", matrix.gates)
    prompts = repo / "native" / "tools" / "prompts" / "default.txt"
    reference = matrix.reference_cell(job.platform.id)
    cells = list(job.cells)
    if reference is not None and reference.ref in job.libraries and reference not in cells:
        cells.append(reference)
    reports: dict[str, tuple[RunnerReport, str, str, Stopwatch]] = {}
    hidden = runtime_hidden(evidence)
    for cell in cells:
        watch = Stopwatch()
        plan = work / f"{cell.gate_key}.plan"
        # The plan names each bundle as the target sees it (the same path here; its copy on a device).
        placed = {name: Path(runner.place(path)) for name, path in bundles.items()}
        atomic_write_text(plan, plan_text(expand_gate_cases(templates, matrix.gates, cell), placed))
        library = job.library(cell)
        argv = [str(library.parent / RUNNER), "fallthrough", "--library", str(library), "--plan", str(plan)]
        argv += ["--prompts", str(prompts), "--max-tokens", str(MAX_TOKENS)]
        # The runtime absent, as on a host without it (runtimes.runtime_hidden; a
        # folder that does not exist on a device has the same effect).
        reports[cell.id] = (*_run_cases(runner, argv, "", hidden), watch)
    none = reference.id if reference is not None and reference.id in reports else None
    outcomes: list[CheckOutcome] = []
    for cell, check in job.pairs():
        report, log, error, watch = reports[cell.id]
        cases = list(report.cases)
        if none is not None and not error:
            cases = [_same_output(c, report, reports[none][0]) for c in cases]
        outcomes.append(
            cases_outcome(
                cell.id, check.id, cases, log, watch.span(), (table_path, job.library(cell)), error=error
            )
        )
    return outcomes


def _same_output(case: CaseResult, report: RunnerReport, reference: RunnerReport) -> CaseResult:
    """A case that generated passes only when its output equals the no-gate cell's."""
    mine = report.outputs.get(case.name)
    if not case.passed or mine is None:
        return case
    theirs = reference.outputs.get(case.name)
    if not mine or mine != theirs:
        return CaseResult(
            name=case.name,
            passed=False,
            skipped=False,
            message=f"greedy output differs from the no-gate cell's: {mine[:1]} vs {(theirs or ())[:1]}",
        )
    return case
