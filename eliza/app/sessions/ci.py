"""The jobs of the generated CI workflow (always strict: a job that cannot do its work
fails, naming why):

- `nox -s ci-build -- --platform P --out DIR`: builds every cell of P (llama.cpp once,
  fetched from the Conan remote when it has it), uploads llama.cpp to the remote, and packs
  the cells' libraries and tools into DIR/cells-P.tar.gz with a manifest of their sha256.
- `nox -s ci-check -- --cell C --artifacts DIR`: unpacks the cells, runs every check of C
  (verify --cell C --strict) on them and compiles nothing.
- `nox -s ci-report -- --evidence DIR --artifacts DIR`: unpacks the cells (so the report
  can re-check artifact hashes), records why each platform left out of the pipeline is
  not in it, and renders the report from every job's evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from eliza.adapters import conan_remote
from eliza.app.context import current_context
from eliza.app.errors import BuildFailed, CiFailed, NotHere, UsageError
from eliza.app.options import Parser
from eliza.app.project import capability, current, host_facts
from eliza.app.services import build
from eliza.app.services.build import BUILD_ERRORS, PREBUILT_VARIABLE, build_cells, describe_build
from eliza.app.services.builders import PrebuiltBuilder
from eliza.app.services.bundle import ensure_tiny_bundle
from eliza.app.services.ci_files import templates_dir
from eliza.app.services.clock import now
from eliza.app.services.prebuilt import pack_cells, unpack_cells, write_manifest
from eliza.app.services.reporting import render_and_say
from eliza.app.services.run import start_run
from eliza.app.verification import VerifyOptions, verify
from eliza.core.cell_id import CellId
from eliza.core.ci_jobs import PipelineError
from eliza.core.matrix import Matrix
from eliza.core.matrix_rules import unknown_cell
from eliza.core.outcome import skipped
from eliza.formats.ci_workflow import RunnersError, pipeline_of

Log = Callable[[str], None]


def llama_builds_line(count: int, where: str) -> str:
    """The line the rehearsal counts compilations by."""
    return f"llama.cpp built {count} time(s) {where}"


def _step_summary(text: str) -> None:
    summary = current().env.get("GITHUB_STEP_SUMMARY")
    if summary:
        with Path(summary).open("a") as f:
            f.write(text + "\n")


def ci_build(matrix: Matrix, argv: Sequence[str], log: Log) -> Path:
    parser = Parser("nox -s ci-build --")
    parser.add_argument("--platform", required=True, help="the platform whose cells this job builds")
    parser.add_argument(
        "--out", type=Path, default=Path("build/ci"), help="where cells-<platform>.tar.gz goes"
    )
    parser.add_argument(
        "--cell",
        action="append",
        default=[],
        metavar="ID",
        help="only these cells of the platform (repeatable)",
    )
    args = parser.parse_args(list(argv))
    ids = [p.id for p in matrix.platforms]
    if args.platform not in ids:
        parser.error(f"--platform {args.platform!r}: not a platform of {matrix.source} ({', '.join(ids)})")
    platform = matrix.platform(args.platform)
    can = capability(platform)
    if not can.can_build:
        raise CiFailed(f"{platform.id} cannot be built on this runner: {can.build_reason}")
    project = current()
    remote = build.binary_remote()
    log(f"Conan remote: {remote.describe() if remote else 'none (ELIZA_CONAN_REMOTE_URL unset)'}")
    cells = matrix.cells_of(platform.id)
    if args.cell:
        unknown = [c for c in args.cell if c not in {x.id for x in cells}]
        if unknown:
            parser.error(
                f"--cell {unknown[0]!r}: not a cell of {platform.id} ({', '.join(c.id for c in cells)})"
            )
        cells = tuple(c for c in cells if c.id in args.cell)
    try:
        built = build_cells(cells, matrix, on_built=lambda b: log(describe_build(b)), on_progress=log)
        llama = conan_remote.built_llama(built[0].log.parent)
        for cell, done in zip(cells, built, strict=True):
            write_manifest(done, cell, project.repo, llama)
        if remote is not None:
            log(conan_remote.upload_llama(llama, project.cache, remote))
    except BUILD_ERRORS as exc:
        raise BuildFailed(str(exc)) from exc
    archive = pack_cells(cells, project.repo, project.repo / args.out / f"cells-{platform.id}.tar.gz")
    count = sum(b.llama_built_now for b in built)
    line = llama_builds_line(count, f"for {len(built)} cell(s) of {platform.id}")
    log(f"{line}; cells packed into {archive}")
    _step_summary(f"**build {platform.id}**: {line}")
    return archive


def ci_check(matrix: Matrix, argv: Sequence[str], log: Log) -> Path | None:
    parser = Parser("nox -s ci-check --")
    parser.add_argument("--cell", required=True, help="the cell whose checks this job runs")
    parser.add_argument("--artifacts", type=Path, required=True, help="where the build jobs' artifacts are")
    parser.add_argument("--dry-run", action="store_true", help="print the job's plan and do nothing")
    parser.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    args = parser.parse_args(list(argv))
    if args.cell not in {c.id for c in matrix.cells}:
        parser.error(unknown_cell(matrix, args.cell, "--cell"))
    project = current()
    if not args.dry_run:
        unpack_cells(project.repo / args.artifacts, project.repo, log)
    # The suites verify runs in other processes take their cells from the artifact too.
    ctx = replace(current_context(log, matrix), child_env={PREBUILT_VARIABLE: "1"})
    options = VerifyOptions(
        cells=(CellId.parse(args.cell),), strict=True, dry_run=args.dry_run, json=args.json
    )
    try:
        result = verify(options, ctx, builder=PrebuiltBuilder(ctx=ctx))
    except NotHere as exc:  # strict here whatever the session's own options say
        raise CiFailed(f"{args.cell}: {exc}") from None
    if args.dry_run:
        return None
    line = llama_builds_line(0, "in this job (its cells came from the build job; nothing was compiled)")
    log(line)
    _step_summary(f"**{args.cell}**: {line}")
    return result.report


def record_not_in_pipeline(matrix: Matrix, out: Path, log: Log) -> int:
    """Skipped evidence, with the reason, for every check of every cell the pipeline has
    no job for; returns how many records."""
    try:
        pipeline = pipeline_of(matrix, templates_dir(current().repo))
    except (PipelineError, RunnersError) as exc:
        raise UsageError(str(exc)) from None
    if not pipeline.omitted:
        return 0
    run = replace(
        start_run(current(), matrix, host_facts(), log, bundle=ensure_tiny_bundle()), evidence_dir=out
    )
    at = now()
    outcomes = [
        skipped(cell.id, check.id, f"not in the CI pipeline: {o.describe()}", at)
        for o in pipeline.omitted
        for cell in matrix.cells_of(o.platform)
        for check in cell.checks
    ]
    run.record(outcomes)
    return len(outcomes)


def ci_report(matrix: Matrix, argv: Sequence[str], log: Log) -> Path:
    parser = Parser("nox -s ci-report --")
    parser.add_argument("--evidence", type=Path, required=True, help="the check jobs' evidence artifacts")
    parser.add_argument("--artifacts", type=Path, required=True, help="the build jobs' artifacts")
    args = parser.parse_args(list(argv))
    project = current()
    evidence = project.repo / args.evidence
    evidence.mkdir(parents=True, exist_ok=True)
    try:
        unpack_cells(project.repo / args.artifacts, project.repo, log)
    except UsageError as exc:  # every build failed: the report still says what ran
        log(f"no cells to re-check artifact hashes against: {exc}")
    count = record_not_in_pipeline(matrix, evidence / "not-in-ci", log)
    log(f"{count} check(s) recorded as not in the CI pipeline")
    return render_and_say(matrix, [evidence], project.report_dir, log)
