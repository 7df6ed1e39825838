"""The selector and gate-fallthrough checks run as target binaries: case_runner (built with
every cell) reads the case tables of native/cases where the library runs, natively or under
the platform's emulator, with a time limit on every run. Used for platforms whose
libraries this host's Python cannot load; the host's own platforms keep the pytest suites,
which read the same tables."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from eliza.adapters import proc
from eliza.app.checks.common import Stopwatch
from eliza.app.checks.gate_fallthrough import fallthrough_to_run
from eliza.app.run import Run
from eliza.core.evidence import LoadedRecord
from eliza.core.matrix import Cell, CheckKind, Gate, Platform
from eliza.core.outcome import CaseResult, CheckOutcome, cases_outcome
from eliza.core.target import TargetRunner, test_kit_file
from eliza.formats.case_tables import (
    GATE_TABLE,
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


def _run_cases(runner: TargetRunner, argv: list[str], prefix: str) -> tuple[RunnerReport, str, str]:
    """(report, log, error): error says why the runner's own result cannot be trusted
    (it crashed, hung, or stopped before its summary)."""
    done = proc.run(runner.argv(argv), timeout=runner.timeout_s)
    log = f"$ {' '.join(runner.argv(argv))}\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
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


def run_selector_on_target(
    run: Run,
    cells: Sequence[Cell],
    libraries: Mapping[str, Path],
    existing: dict[tuple[str, str], LoadedRecord],
    runner: TargetRunner,
) -> None:
    table = run.project.repo / SELECTOR_TABLE
    for cell in cells:
        check = run.check_of(cell, CheckKind.SELECTOR)
        if check is None or cell.id not in libraries:
            continue
        if run.fresh_pass(cell, check, existing):
            run.log(f"  {cell.id:<24} {check.id:<24} fresh passing evidence exists; not re-run")
            continue
        watch = Stopwatch()
        build = libraries[cell.id].parent
        kit = build / test_kit_file(cell.platform)
        argv = [str(build / RUNNER), "selector", "--kit", str(kit), "--cases", str(table)]
        report, log, error = _run_cases(runner, argv, "selector::")
        outcome = cases_outcome(cell.id, check.id, report.cases, log, watch.span(), (table, kit), error=error)
        run.record([outcome])


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


def run_gate_fallthrough_on_target(
    run: Run,
    platform: Platform,
    cells: Sequence[Cell],
    libraries: Mapping[str, Path],
    existing: dict[tuple[str, str], LoadedRecord],
    runner: TargetRunner,
) -> None:
    wanted = fallthrough_to_run(run, platform, cells, existing)
    if not wanted:
        return
    repo = run.project.repo
    table_path = repo / GATE_TABLE
    templates = parse_gate_table(table_path.read_text(encoding="utf-8"), str(GATE_TABLE))
    work = run.project.build_root / "cases" / platform.id
    bundles = case_bundles(run.bundle, work / "bundles", run.matrix.gates)
    prompts = repo / "native" / "tools" / "prompts" / "default.txt"
    reports: dict[str, tuple[RunnerReport, str, str, Stopwatch]] = {}
    for cell in cells:
        if cell.id not in libraries:
            continue
        watch = Stopwatch()
        plan = work / f"{cell.gate_key}.plan"
        atomic_write_text(plan, plan_text(expand_gate_cases(templates, run.matrix.gates, cell), bundles))
        library = libraries[cell.id]
        argv = [str(library.parent / RUNNER), "fallthrough", "--library", str(library), "--plan", str(plan)]
        argv += ["--prompts", str(prompts), "--max-tokens", str(MAX_TOKENS)]
        reports[cell.id] = (*_run_cases(runner, argv, ""), watch)
    none = next((c.id for c in cells if not c.gates and c.id in reports), None)
    outcomes: list[CheckOutcome] = []
    for cell, check in wanted:
        if cell.id not in reports:
            continue
        report, log, error, watch = reports[cell.id]
        cases = list(report.cases)
        if none is not None and not error:
            cases = [_same_output(c, report, reports[none][0]) for c in cases]
        outcomes.append(
            cases_outcome(
                cell.id, check.id, cases, log, watch.span(), (table_path, libraries[cell.id]), error=error
            )
        )
    run.record(outcomes)


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
