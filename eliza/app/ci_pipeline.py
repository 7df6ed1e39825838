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

import json
import os
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from eliza.adapters import conan_remote
from eliza.app import build
from eliza.app.build import BUILD_ERRORS, BuildFailed, BuiltCell, build_cells, describe_build
from eliza.app.bundle import ensure_tiny_bundle
from eliza.app.checks.common import now
from eliza.app.ci_files import templates_dir
from eliza.app.errors import NotHere, UsageError
from eliza.app.options import Parser
from eliza.app.project import capability, current, host_facts
from eliza.app.report import report as render_report
from eliza.app.run import start_run
from eliza.app.verify import verify
from eliza.core.ci_jobs import PipelineError
from eliza.core.layout import cell_build_dir, library_path
from eliza.core.matrix import Cell, Matrix
from eliza.core.matrix_rules import unknown_cell
from eliza.core.outcome import skipped
from eliza.core.target import library_file
from eliza.formats.ci_workflow import RunnersError, pipeline_of
from eliza.formats.files import atomic_write_text, sha256_file

Log = Callable[[str], None]
MANIFEST = "ci-cell.json"  # beside each cell's build folder: what the build job made
# The files of a cell a check needs: the libraries, build-info.json and the bench tools.
CELL_FILES = ("libelizainference*", "build-info.json", "e2e_loop_bench", "reference_runner")


class CiFailed(RuntimeError):
    """A CI job could not do its work; the message says which and why."""


def llama_builds_line(count: int, where: str) -> str:
    """The line the rehearsal counts compilations by."""
    return f"llama.cpp built {count} time(s) {where}"


def _cell_files(cell: Cell, repo: Path) -> list[Path]:
    out = cell_build_dir(cell.id, repo) / "build"
    return sorted({p for pattern in CELL_FILES for p in out.glob(pattern) if p.is_file() or p.is_symlink()})


def write_manifest(built: BuiltCell, cell: Cell, repo: Path, llama: conan_remote.LlamaBinary) -> Path:
    files = {str(p.relative_to(repo)): sha256_file(p) for p in _cell_files(cell, repo) if p.is_file()}
    manifest = {
        "cell": cell.id,
        "llama_ref": llama.ref,
        "llama_package_id": built.llama_package_id,
        "llama_built_now": built.llama_built_now,
        "seconds": round(built.seconds, 2),
        "files": files,
    }
    path = cell_build_dir(cell.id, repo) / MANIFEST
    atomic_write_text(path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return path


def load_prebuilt(cell: Cell) -> BuiltCell:
    """A cell the build job made, after its artifact was unpacked: every file as the
    manifest lists it, or CiFailed naming what differs."""
    repo = current().repo
    path = cell_build_dir(cell.id, repo) / MANIFEST
    if not path.is_file():
        raise CiFailed(
            f"{cell.id}: no prebuilt cell at {path.parent}: this job takes its cells from the build "
            f"job's artifact (cells-{cell.platform.id}); is it unpacked (--artifacts)?"
        )
    manifest = json.loads(path.read_text())
    for rel, digest in manifest["files"].items():
        file = repo / rel
        if not file.is_file() or sha256_file(file) != digest:
            raise CiFailed(f"{cell.id}: {rel} is missing or differs from the build job's manifest")
    library = library_path(cell.id, repo, library_file(cell.platform))
    return BuiltCell(
        cell_id=cell.id,
        library=library,
        llama_built_now=False,
        llama_package=Path(),
        llama_package_id=str(manifest["llama_package_id"]),
        seconds=float(manifest["seconds"]),
        log=path,
        prebuilt=True,
    )


def pack_cells(cells: Sequence[Cell], repo: Path, archive: Path) -> Path:
    """The cells' files and manifests, relative to the repository, symlinks and modes kept
    (an artifact store keeps neither)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for cell in cells:
            for path in [*_cell_files(cell, repo), cell_build_dir(cell.id, repo) / MANIFEST]:
                tar.add(path, arcname=str(path.relative_to(repo)), recursive=False)
    return archive


def unpack_cells(artifacts: Path, repo: Path, log: Log) -> list[str]:
    archives = sorted(artifacts.rglob("cells-*.tar.gz")) if artifacts.is_dir() else []
    if not archives:
        raise UsageError(f"--artifacts {artifacts}: no cells-*.tar.gz there (the build jobs' artifacts)")
    names = []
    for archive in archives:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(repo, filter="data")
        names.append(archive.name)
        log(f"unpacked {archive}")
    return names


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


def ci_check(matrix: Matrix, argv: Sequence[str], log: Log) -> Path:
    parser = Parser("nox -s ci-check --")
    parser.add_argument("--cell", required=True, help="the cell whose checks this job runs")
    parser.add_argument("--artifacts", type=Path, required=True, help="where the build jobs' artifacts are")
    args = parser.parse_args(list(argv))
    if args.cell not in {c.id for c in matrix.cells}:
        parser.error(unknown_cell(matrix, args.cell, "--cell"))
    project = current()
    unpack_cells(project.repo / args.artifacts, project.repo, log)
    # The suites verify runs in other processes take their cells from the artifact too.
    os.environ[build.PREBUILT_VARIABLE] = "1"
    try:
        with build.using_prebuilt(load_prebuilt):
            html = verify(matrix, ["--cell", args.cell, "--strict"], log)
    except NotHere as exc:  # strict here whatever the session's own options say
        raise CiFailed(f"{args.cell}: {exc}") from None
    line = llama_builds_line(0, "in this job (its cells came from the build job; nothing was compiled)")
    log(line)
    _step_summary(f"**{args.cell}**: {line}")
    return html


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
    return render_report(matrix, [str(evidence)], log)
