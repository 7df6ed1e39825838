"""The native-suite check: the C ABI suite (tests/native, the thread and cancel races
included) and the bench tools against one cell's build. On a sanitizer variant the
sanitizer runtime is preloaded into every process (pytest, its children, the tools) with
leak checking on and halt_on_error; any report fails the check, with the report in the
evidence. The counts are the test cases plus the two subchecks (bench tools identical,
no sanitizer report)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from eliza.adapters import sanitizer
from eliza.adapters.bench_tools import BenchSettings, BenchToolError, bench_argv, reference_argv, run_tool
from eliza.adapters.pytest_runner import run_pytest
from eliza.app.checks.job import Job
from eliza.app.services.clock import Stopwatch
from eliza.app.services.run import Run
from eliza.core.bench_diff import compare_identity
from eliza.core.evidence import Status
from eliza.core.matrix import Cell
from eliza.core.outcome import CaseResult, CheckOutcome, cases_outcome

SUITE = ("tests/native",)


def suite_env(run: Run, cell: Cell, report_dir: Path, figures: Path) -> dict[str, str]:
    sanitizers = cell.variant.sanitizers if cell.variant is not None else ()
    env = {"ELIZA_TEST_CELL": cell.id, "ELIZA_RACE_FIGURES": str(figures), **run.child_env}
    env.update(sanitizer.runtime_env(sanitizers, report_dir, run.project.env))
    return env


def _bench_tools_case(
    library: Path, bundle: Path, cell: Cell, out_dir: Path, env: Mapping[str, str]
) -> CaseResult:
    """Greedy through the FFI (e2e_loop_bench) and plain llama.h (reference_runner) on the
    tiny bundle, both under the sanitizer: identical outputs."""
    settings = BenchSettings(bundle=bundle, max_tokens=16, repeats=1)
    build_dir = library.parent
    name = "bench tools: e2e_loop_bench vs reference_runner"
    try:
        ffi = run_tool(
            bench_argv(build_dir, library, settings, cell.id, out_dir / "ffi.jsonl"),
            out_dir / "ffi.jsonl",
            env,
        )
        ref = run_tool(
            reference_argv(build_dir, settings, cell.id, out_dir / "ref.jsonl"), out_dir / "ref.jsonl", env
        )
    except (BenchToolError, OSError) as exc:
        return CaseResult(name=name, passed=False, skipped=False, message=str(exc)[-1500:])
    result = compare_identity(ffi, ref, left_label="ffi", right_label="reference")
    return CaseResult(name=name, passed=result.identical, skipped=False, message=result.summary())


def unfinished_leak_checks(reports: sanitizer.Findings) -> str:
    """Why the suite has no verdict on leaks, or "": a process of ours (the interpreter
    that loads the library, a tool linked to it) whose leak check could not finish. Not a
    pass and not a failure: an error, which verify runs again."""
    ours = [name for name in reports.incomplete_leak_checks if sanitizer.of_ours(name)]
    if not ours:
        return ""
    return (
        f"the leak check of {', '.join(ours)} did not finish: {sanitizer.TRACER_FAILED} (its "
        "stop-the-world tracer crashed, an intermittent failure of the runtime, not a report "
        "against the library); run the check again"
    )


def run(job: Job, evidence: Run) -> list[CheckOutcome]:
    return [native_suite_outcome(evidence, cell, check.id, job.library(cell)) for cell, check in job.pairs()]


def native_suite_outcome(run: Run, cell: Cell, check_id: str, library: Path) -> CheckOutcome:
    watch = Stopwatch()
    work = run.project.build_root / "native-suite" / cell.id
    report_dir = work / "sanitizer-reports"
    figures = work / "races.json"
    work.mkdir(parents=True, exist_ok=True)
    sanitizer.clear_reports(report_dir)
    figures.unlink(missing_ok=True)
    env = suite_env(run, cell, report_dir, figures)
    junit = run.project.build_root / "junit" / f"native-{cell.id}.xml"
    result = run_pytest(run.project.repo, SUITE, junit, env)
    bench = _bench_tools_case(library, run.bundle, cell, work, env)
    reports = sanitizer.findings(report_dir)
    found = [*reports.counted, *sanitizer.findings_in_output(result.log)]
    sanitized = bool(cell.variant and cell.variant.sanitizers)
    clean = CaseResult(
        name="sanitizer reports: none" if sanitized else "no sanitizer in this variant (nothing to report)",
        passed=not found,
        skipped=False,
        message=sanitizer.summary(found),
    )
    outcome = cases_outcome(
        cell.id,
        check_id,
        [*result.cases, bench, clean] if not result.error else [],
        result.log,
        watch.span(),
        (junit,),
        error=result.error
        + (f"; sanitizer reports: {sanitizer.summary(found)}" if found and result.error else ""),
    )
    unfinished = unfinished_leak_checks(reports)
    if unfinished and outcome.status is Status.PASSED:
        outcome = cases_outcome(cell.id, check_id, [], result.log, watch.span(), (junit,), error=unfinished)
    races = json.loads(figures.read_text(encoding="utf-8")) if figures.is_file() else {}
    metrics: dict[str, float | int | str] = {
        "tests_ran": len([c for c in result.cases if not c.skipped]),
        "sanitizer_reports": len(found),
        "foreign_leak_reports": reports.foreign_leaks,
        "leak_checks_unfinished": len(reports.incomplete_leak_checks),
        "duration_s": round(watch.seconds(), 1),
    }
    for name, counts in sorted(races.items()):
        for key, value in sorted(counts.items()):
            metrics[f"race.{name}.{key}"] = int(value)
    details = {
        **outcome.details,
        "sanitizers": list(cell.variant.sanitizers) if cell.variant else [],
        "sanitizer_reports": sanitizer.summary(found),
        "leak_checks_unfinished": list(reports.incomplete_leak_checks),
        "bench_tools": bench.message,
        "skipped": [c.name for c in result.cases if c.skipped],
    }
    return replace(outcome, metrics=metrics, details=details)
