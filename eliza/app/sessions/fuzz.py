"""`nox -s fuzz -- [--seconds N] [--target NAME] [--cell ID]`: every fuzz target of
tests/fuzz (one per folder of its seed corpus) for N seconds under atheris, against the
library of a sanitizer cell with the sanitizer runtime preloaded.

Each target runs in a process of its own, on a working copy of its seed corpus under
build/fuzz/<target>/ (the repository's seeds are never rewritten). Findings are the
inputs atheris saves (crash-*, timeout-*, oom-*) and the sanitizer's reports; the figures
(executions, corpus size, findings per target) go to build/fuzz/summary.json, which the
report shows.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters import proc, sanitizer
from eliza.app.context import Context
from eliza.app.errors import Failed, NotHere, UsageError
from eliza.app.options import Parser
from eliza.app.project import current
from eliza.app.services.build import BUILD_ERRORS, build_cells, describe_build
from eliza.app.services.bundle import ensure_tiny_bundle
from eliza.app.services.clock import Stopwatch, now
from eliza.app.services.exclusive import exclusive
from eliza.app.services.inputs import fuzz_inputs
from eliza.core.evidence import utc_timestamp
from eliza.core.matrix import Cell, Matrix
from eliza.core.matrix_rules import unknown_cell
from eliza.formats.files import atomic_write_text

Log = Callable[[str], None]

CORPUS = Path("tests") / "fuzz" / "corpus"
FINDING_PREFIXES = ("crash-", "timeout-", "oom-", "leak-")
_DONE = re.compile(r"Done (\d+) runs in (\d+) second")
_EXECUTED = re.compile(r"stat::number_of_executed_units:\s*(\d+)")


class FuzzFailed(Failed):
    pass


@dataclass(frozen=True, kw_only=True)
class TargetResult:
    target: str
    executions: int
    seconds: float
    corpus_files: int
    findings: tuple[str, ...]
    exit_status: int
    leak_check: str  # "done", "off" (no sanitizer) or "unfinished: <why>"

    @property
    def ok(self) -> bool:
        return not self.findings and self.exit_status == 0 and self.executions > 0


def leak_checker_died(found: sanitizer.Findings, output: str) -> bool:
    """Whether a crash-* input is LeakSanitizer's tracer dying at a leak check rather than
    the input crashing the target: the only report is the tracer's, and neither a signal
    (libFuzzer's "deadly signal") nor a Python exception ended the run."""
    return (
        bool(found.incomplete_leak_checks)
        and not found.counted
        and "deadly signal" not in output
        and "Uncaught Python exception" not in output
    )


def targets_of(repo: Path) -> list[str]:
    root = repo / CORPUS
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def default_cell(matrix: Matrix) -> Cell:
    """The first cell of a sanitizer variant, else the first no-gate cell."""
    sanitized = [c for c in matrix.cells if c.variant is not None and c.variant.sanitizers]
    return sanitized[0] if sanitized else next(c for c in matrix.cells if c.is_reference)


def executions(output: str) -> int:
    found = _EXECUTED.findall(output) or [m[0] for m in _DONE.findall(output)]
    return int(found[-1]) if found else 0


def run_target(
    repo: Path, target: str, cell: Cell, library: Path, bundle: Path, seconds: int, work: Path
) -> TargetResult:
    corpus = work / "corpus"
    findings_dir = work / "findings"
    reports_dir = work / "sanitizer-reports"
    for folder in (corpus, findings_dir):
        folder.mkdir(parents=True, exist_ok=True)
    for seed in (repo / CORPUS / target).iterdir():
        if seed.is_file() and not (corpus / seed.name).exists():
            shutil.copyfile(seed, corpus / seed.name)
    for old in findings_dir.iterdir():
        old.unlink()
    sanitizer.clear_reports(reports_dir)
    sanitizers = cell.variant.sanitizers if cell.variant is not None else ()
    env = {"ELIZA_N_THREADS": "1", **sanitizer.runtime_env(sanitizers, reports_dir, current().env)}
    watch = Stopwatch()
    done = proc.run(
        [
            sys.executable,
            "-m",
            "tests.fuzz.atheris_main",
            target,
            library,
            bundle,
            work / "harness",
            f"-max_total_time={seconds}",
            f"-artifact_prefix={findings_dir}/",
            "-print_final_stats=1",
            # No leak check after each input: every input of a Python host allocates, so
            # libFuzzer would stop the world after each, which is slow and is where
            # LeakSanitizer's tracer was seen to crash. The process's leak check at exit
            # stays on; the native-suite check is where leaks are judged.
            "-detect_leaks=0",
            "-timeout=60",
            "-rss_limit_mb=4096",
            corpus,
        ],
        cwd=repo,
        extra_env=env,
        timeout=seconds + 600,
    )
    (work / "fuzz.log").write_text(done.output, encoding="utf-8")
    found = [p.name for p in sorted(findings_dir.iterdir()) if p.name.startswith(FINDING_PREFIXES)]
    reports = sanitizer.findings(reports_dir)
    leak_check = "done" if sanitizers else "off"
    if reports.incomplete_leak_checks:
        leak_check = f"unfinished: {sanitizer.TRACER_FAILED} ({', '.join(reports.incomplete_leak_checks)})"
        if leak_checker_died(reports, done.output):
            # the input atheris saved is the one in flight when the tracer died, not a crash
            found = [name for name in found if not name.startswith("crash-")]
    found += [f"sanitizer {line[:200]}" for line in reports.counted]
    return TargetResult(
        target=target,
        executions=executions(done.output),
        seconds=round(watch.seconds(), 1),
        corpus_files=sum(1 for p in corpus.iterdir() if p.is_file()),
        findings=tuple(found),
        exit_status=done.returncode,
        leak_check=leak_check,
    )


@dataclass(frozen=True, kw_only=True)
class FuzzOptions:
    seconds: int
    targets: tuple[str, ...]  # () : every target
    cell: str | None


def parse_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> FuzzOptions:
    known = targets_of(current().repo)
    parser = Parser("nox -s fuzz --")
    parser.add_argument(
        "--seconds", type=int, default=60, metavar="N", help="how long each target runs (>= 1)"
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME",
        help=f"only these targets ({', '.join(known)})",
    )
    parser.add_argument(
        "--cell", metavar="ID", help="the cell whose library is fuzzed (default: a sanitizer cell)"
    )
    args = parser.parse_args(list(argv))
    if args.seconds < 1:
        parser.error(f"--seconds {args.seconds}: must be at least 1")
    for name in args.target:
        if name not in known:
            parser.error(f"--target {name!r}: not a fuzz target ({', '.join(known)})")
    if args.cell is not None and args.cell not in {c.id for c in matrix.cells}:
        parser.error(unknown_cell(matrix, args.cell, "--cell"))
    return FuzzOptions(seconds=args.seconds, targets=tuple(args.target), cell=args.cell)


def run(options: FuzzOptions, ctx: Context) -> Path:
    matrix, log, project = ctx.matrix, ctx.log, ctx.project
    known = targets_of(project.repo)
    cell = matrix.cell(options.cell) if options.cell else default_cell(matrix)
    can = ctx.capability(cell.platform)
    if not can.loads_in_process:  # atheris drives the library through ctypes, in this process
        raise NotHere(f"fuzz: {cell.id}'s library cannot be loaded here: {can.in_process_reason()}")
    wanted = options.targets or known
    if not wanted:
        raise UsageError(f"no fuzz targets: {project.repo / CORPUS} has no seed corpus folders")
    with exclusive("nox -s fuzz", log):
        try:
            built = build_cells((cell,), matrix, on_built=lambda b: log(describe_build(b)), on_progress=log)[
                0
            ]
        except BUILD_ERRORS as exc:
            raise FuzzFailed(f"{cell.id} did not build: {exc}") from exc
        bundle = ensure_tiny_bundle()
        results: list[TargetResult] = []
        width = max(len(t) for t in wanted)  # the figures line up in one column
        for target in wanted:
            log(f"fuzzing {target} for {options.seconds} s on {cell.id} ...")
            result = run_target(
                project.repo,
                target,
                cell,
                built.library,
                bundle,
                options.seconds,
                project.build_root / "fuzz" / target,
            )
            results.append(result)
            said = ", ".join(result.findings) or "no findings"
            log(
                f"  {target:<{width}} {result.executions:>9} executions in {result.seconds:6.1f} s, "
                f"corpus {result.corpus_files} file(s), {said}"
                + ("" if result.exit_status == 0 else f" (exit status {result.exit_status})")
                + ("" if result.leak_check in ("done", "off") else f"; leak check {result.leak_check}")
            )
        summary = project.build_root / "fuzz" / "summary.json"
        atomic_write_text(
            summary,
            json.dumps(
                {
                    "cell": cell.id,
                    "sanitizers": list(cell.variant.sanitizers) if cell.variant else [],
                    "seconds_per_target": options.seconds,
                    "finished_at": utc_timestamp(now()),
                    "inputs": fuzz_inputs(project.repo),
                    "targets": {
                        r.target: {
                            "executions": r.executions,
                            "seconds": r.seconds,
                            "corpus_files": r.corpus_files,
                            "findings": list(r.findings),
                            "exit_status": r.exit_status,
                            "leak_check": r.leak_check,
                        }
                        for r in results
                    },
                },
                indent=2,
                sort_keys=True,
            )
            + "\n",
        )
        log(f"summary: {summary}; findings and logs under {summary.parent}/<target>/")
    bad = [r for r in results if not r.ok]
    if bad:
        problems = [
            f"{r.target}: "
            + (", ".join(r.findings) or f"exit status {r.exit_status}, {r.executions} executions")
            for r in bad
        ]
        raise FuzzFailed("; ".join(problems))
    return summary
