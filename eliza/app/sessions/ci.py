"""The jobs of the generated CI workflow (always strict: a job that cannot do its work
fails, naming why):

- `nox -s ci-build -- --platform P --out DIR`: builds every cell of P (llama.cpp once,
  fetched from the Conan remote when it has it), uploads llama.cpp to the remote, and packs
  the cells' libraries and tools into DIR/cells-P.tar.gz with a manifest of their sha256.
  A cell that fails to build does not stop the others: the archive holds the cells that
  built and, for each other, why it did not; then the job fails, naming them. The check
  jobs still run: a failed cell's checks report its build error.
- `nox -s ci-check -- --cell C --artifacts DIR`: unpacks the cells, runs every check of C
  (verify --cell C --strict) on them and compiles nothing.
- `nox -s ci-report -- --evidence DIR --artifacts DIR`: unpacks the cells (so the report
  can re-check artifact hashes), records why each platform left out of the pipeline is
  not in it, and renders the report from every job's evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from eliza.adapters import conan, conan_remote
from eliza.app.context import Context
from eliza.app.errors import BuildFailed, CiFailed, NotHere, UsageError
from eliza.app.options import Parser
from eliza.app.services import build
from eliza.app.services import lab as lab_service
from eliza.app.services.build import BUILD_ERRORS, PREBUILT_VARIABLE, build_cells, describe_build
from eliza.app.services.builders import PrebuiltBuilder
from eliza.app.services.bundle import ensure_tiny_bundle
from eliza.app.services.ci_files import templates_dir
from eliza.app.services.clock import now
from eliza.app.services.prebuilt import pack_cells, unpack_cells, write_failure_note, write_manifest
from eliza.app.services.reporting import render_and_say
from eliza.app.services.run import start_run
from eliza.app.verification import VerifyOptions, verify
from eliza.core.cell_id import CellId
from eliza.core.ci_jobs import PipelineError
from eliza.core.lab import Lab
from eliza.core.matrix import Cell, Matrix
from eliza.core.matrix_rules import unknown_cell
from eliza.core.outcome import skipped
from eliza.formats.ci_workflow import RunnersError, pipeline_of

Log = Callable[[str], None]


def llama_builds_line(count: int, where: str) -> str:
    """The line the rehearsal counts compilations by."""
    return f"llama.cpp built {count} time(s) {where}"


def _step_summary(env: Mapping[str, str], text: str) -> None:
    summary = env.get("GITHUB_STEP_SUMMARY")
    if summary:
        with Path(summary).open("a") as f:
            f.write(text + "\n")


@dataclass(frozen=True, kw_only=True)
class CiBuildOptions:
    platform: str
    out: Path
    cells: tuple[str, ...] = ()  # () : every cell of the platform


def parse_build_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> CiBuildOptions:
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
    known = [c.id for c in matrix.cells_of(args.platform)]
    unknown = [c for c in args.cell if c not in known]
    if unknown:
        parser.error(f"--cell {unknown[0]!r}: not a cell of {args.platform} ({', '.join(known)})")
    return CiBuildOptions(platform=args.platform, out=args.out, cells=tuple(args.cell))


def run_build(options: CiBuildOptions, ctx: Context) -> Path:
    matrix, log, project = ctx.matrix, ctx.log, ctx.project
    platform = matrix.platform(options.platform)
    can = ctx.capability(platform)
    if not can.can_build:
        raise CiFailed(f"{platform.id} cannot be built on this runner: {can.build_reason}")
    remote = build.binary_remote()
    log(f"Conan remote: {remote.describe() if remote else 'none (ELIZA_CONAN_REMOTE_URL unset)'}")
    cells = tuple(c for c in matrix.cells_of(platform.id) if not options.cells or c.id in options.cells)
    failed: dict[str, str] = {}

    def on_failed(cell: Cell, exc: BaseException) -> None:
        log(f"{cell.id}: build failed; the other cells build on: {str(exc)[-2000:]}")
        failed[cell.id] = str(exc)

    try:
        built = build_cells(
            cells, matrix, on_built=lambda b: log(describe_build(b)), on_progress=log, on_failed=on_failed
        )
        by_id = {b.cell_id: b for b in built}
        llamas: dict[str, conan_remote.LlamaBinary] = {}  # a sanitizer variant links its own
        for cell in cells:
            if cell.id in by_id:
                llama = conan_remote.built_llama(by_id[cell.id].log.parent)
                llamas.setdefault(llama.pattern, llama)
                write_manifest(by_id[cell.id], cell, project.repo, llama)
        if remote is not None:
            for llama in llamas.values():
                log(conan_remote.upload_llama(llama, project.cache, remote))
    except BUILD_ERRORS as exc:
        raise BuildFailed(str(exc)) from exc
    for cell in cells:
        if cell.id in failed:
            write_failure_note(cell, project.repo, failed[cell.id])
    archive = pack_cells(
        [c for c in cells if c.id in by_id],
        project.repo,
        project.repo / options.out / f"cells-{platform.id}.tar.gz",
        failed=[c for c in cells if c.id in failed],
    )
    count = sum(b.llama_built_now for b in built)
    line = llama_builds_line(count, f"for {len(built)} cell(s) of {platform.id}")
    log(f"{line}; cells packed into {archive}")
    _step_summary(project.env, f"**build {platform.id}**: {line}")
    if failed:
        raise BuildFailed(
            f"{len(failed)} of {len(cells)} cell(s) of {platform.id} failed to build: {', '.join(failed)}. "
            f"{archive} holds the {len(built)} that built and why each other did not: their check "
            "jobs still run, and a failed cell's checks report its build error"
        )
    return archive


@dataclass(frozen=True, kw_only=True)
class CiCheckOptions:
    cell: CellId
    artifacts: Path
    dry_run: bool = False
    json: bool = False
    lab: Lab | None = None  # --devices / ELIZA_DEVICES: a device runner's lab


def parse_check_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> CiCheckOptions:
    parser = Parser("nox -s ci-check --")
    parser.add_argument("--cell", required=True, help="the cell whose checks this job runs")
    parser.add_argument("--artifacts", type=Path, required=True, help="where the build jobs' artifacts are")
    parser.add_argument("--dry-run", action="store_true", help="print the job's plan and do nothing")
    parser.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    lab_service.add_option(parser)
    args = parser.parse_args(list(argv))
    if args.cell not in {c.id for c in matrix.cells}:
        parser.error(unknown_cell(matrix, args.cell, "--cell"))
    return CiCheckOptions(
        cell=CellId.parse(args.cell),
        artifacts=args.artifacts,
        dry_run=args.dry_run,
        json=args.json,
        lab=lab_service.lab_from(args.devices, env, matrix),
    )


def run_check(options: CiCheckOptions, ctx: Context) -> Path | None:
    """The cell's checks on the build job's cells, strict whatever the session's own
    options say; nothing is compiled."""
    project = ctx.project
    compiled_before = conan.llama_build_folders(project.cache)
    if not options.dry_run:
        unpack_cells(project.repo / options.artifacts, project.repo, ctx.log)
    # The suites verify runs in other processes take their cells from the artifact too.
    job_ctx = replace(ctx, child_env={PREBUILT_VARIABLE: "1"})
    verify_options = VerifyOptions(
        cells=(options.cell,), strict=True, dry_run=options.dry_run, json=options.json, lab=options.lab
    )
    try:
        result = verify(verify_options, job_ctx, builder=PrebuiltBuilder(ctx=job_ctx))
    except NotHere as exc:
        raise CiFailed(f"{options.cell}: {exc}") from None
    if options.dry_run:
        return None
    # Counted, not assumed: a check job that had to compile llama.cpp (say, for the baseline,
    # with no remote to fetch it from) says so, and the rehearsal fails on it.
    compiled = conan.llama_build_folders(project.cache) - compiled_before
    where = (
        "in this job (its cells came from the build job; nothing was compiled)"
        if compiled == 0
        else "in this job (its Conan home has that many new llama.cpp build folders)"
    )
    line = llama_builds_line(compiled, where)
    ctx.log(line)
    _step_summary(project.env, f"**{options.cell}**: {line}")
    return result.report


def record_not_in_pipeline(ctx: Context, out: Path) -> int:
    """Skipped evidence, with the reason, for every check of every cell the pipeline has
    no job for; returns how many records."""
    matrix = ctx.matrix
    try:
        pipeline = pipeline_of(matrix, templates_dir(ctx.project.repo))
    except (PipelineError, RunnersError) as exc:
        raise UsageError(str(exc)) from None
    if not pipeline.omitted:
        return 0
    run = replace(
        start_run(ctx.project, matrix, ctx.host, ctx.log, bundle=ensure_tiny_bundle()), evidence_dir=out
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


@dataclass(frozen=True, kw_only=True)
class CiReportOptions:
    evidence: Path
    artifacts: Path
    release: bool = False


def parse_report_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> CiReportOptions:
    parser = Parser("nox -s ci-report --")
    parser.add_argument("--evidence", type=Path, required=True, help="the check jobs' evidence artifacts")
    parser.add_argument("--artifacts", type=Path, required=True, help="the build jobs' artifacts")
    parser.add_argument(
        "--release",
        action="store_true",
        help="trust only the keys of the matrix's trust policy (CI's report)",
    )
    args = parser.parse_args(list(argv))
    return CiReportOptions(evidence=args.evidence, artifacts=args.artifacts, release=args.release)


def run_report(options: CiReportOptions, ctx: Context) -> Path:
    project, log = ctx.project, ctx.log
    evidence = project.repo / options.evidence
    evidence.mkdir(parents=True, exist_ok=True)
    try:
        unpack_cells(project.repo / options.artifacts, project.repo, log)
    except UsageError as exc:  # every build failed: the report still says what ran
        log(f"no cells to re-check artifact hashes against: {exc}")
    count = record_not_in_pipeline(ctx, evidence / "not-in-ci")
    log(f"{count} check(s) recorded as not in the CI pipeline")
    html, _ = render_and_say(ctx.matrix, [evidence], project.report_dir, log, release=options.release)
    return html
