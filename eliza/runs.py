"""What `nox -s verify`, `bench-<platform>` and `report` do, composed from eliza's parts:
build, run the checks of matrix.yaml, write evidence, render the report."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from eliza import checks, evidence_io, workflow
from eliza.bench.tools import DEFAULT_PROMPTS
from eliza.bench.workflow import DEFAULT_SETTINGS
from eliza.conan import llama_source_version
from eliza.evidence import InputFingerprint, LoadedRecord, Status, read_records, utc_timestamp
from eliza.fingerprint import InputHashes, fingerprint_for, input_hashes
from eliza.matrix.model import Cell, Check, CheckKind, Matrix, Platform
from eliza.outcome import CheckOutcome, Stopwatch, outcome, skipped
from eliza.paths import REPO_ROOT, build_root
from eliza.report.model import HeaderFacts, PlatformCapability, Report, build_report
from eliza.report.render import ReportPaths, render_report

Log = Callable[[str], None]
EVIDENCE_DIR = build_root() / "evidence"
REPORT_DIR = build_root() / "report"


def abidiff_version() -> str:
    tool = shutil.which("abidiff")
    if tool is None:
        return ""
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False).stdout
    return out.strip().split()[-1] if out.strip() else ""


@dataclass(kw_only=True)
class Run:
    """One verify/bench run: where evidence goes and what it is fingerprinted against."""

    matrix: Matrix
    log: Log
    bundle: Path
    prompts: Path = DEFAULT_PROMPTS
    evidence_dir: Path = EVIDENCE_DIR
    only: frozenset[str] | None = None  # cell ids whose evidence this run records (None: all)
    bench_settings: str = DEFAULT_SETTINGS  # see fingerprint.input_hashes
    cpu_reference: Path | None = None  # a CPU no-gate library, for the CUDA cells' fallback check
    hashes: InputHashes = field(init=False)
    git: evidence_io.GitState = field(init=False)
    written: list[CheckOutcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        host = workflow.host_facts()
        self.hashes = input_hashes(
            REPO_ROOT,
            self.bundle,
            self.prompts,
            host,
            abidiff_version(),
            llama_source=llama_source_version(),
            bench_settings=self.bench_settings,
        )
        self.git = evidence_io.git_state()
        self.host_info = evidence_io.host_info(host)

    def check_of(self, cell: Cell, kind: CheckKind) -> Check | None:
        return next((c for c in cell.checks if c.kind is kind), None)

    def record(self, outcomes: Sequence[CheckOutcome]) -> None:
        for o in outcomes:
            if self.only is not None and o.cell not in self.only:
                continue
            cell = self.matrix.cell(o.cell)
            check = self.matrix.check(o.check)
            baseline = str(o.details.get("baseline_commit", "")) if o.details else ""
            evidence_io.save(
                o,
                fingerprint_for(cell, check, self.hashes, baseline),
                self.git,
                self.host_info,
                self.evidence_dir,
            )
            self.written.append(o)
            mark = {Status.PASSED: "ok", Status.SKIPPED: "skipped"}.get(o.status, o.status.value.upper())
            said = o.reason or str(o.details.get("summary", "")) if o.details or o.reason else ""
            self.log(f"  {o.cell:<24} {o.check:<24} {mark}" + (f" ({said[:200]})" if said else ""))

    def fresh_pass(self, cell: Cell, check: Check, existing: dict[tuple[str, str], LoadedRecord]) -> bool:
        item = existing.get((cell.id, check.id))
        record = item.record if item else None
        if record is None or record.status is not Status.PASSED or record.counts.ran == 0:
            return False
        if record.counts.passed != record.counts.ran:
            return False
        return record.fingerprint.key == fingerprint_for(cell, check, self.hashes).key


def existing_records(directory: Path) -> dict[tuple[str, str], LoadedRecord]:
    return {(r.record.cell, r.record.check): r for r in read_records([directory]) if r.record is not None}


# Failures of the machinery (a build that breaks, a tool that crashes) become error
# evidence for the checks they prevented, never a traceback that loses the other cells.
RUN_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    RuntimeError,
    ValueError,
    subprocess.CalledProcessError,
)


def errored(run: Run, cells: Sequence[Cell], kinds: set[CheckKind], reason: str) -> list[CheckOutcome]:
    watch = Stopwatch()
    outcomes = [
        outcome(c.id, k.id, ran=0, passed=0, watch=watch, reason=reason, error=True)
        for c in cells
        for k in c.checks
        if k.kind in kinds
    ]
    run.record(outcomes)
    return outcomes


def cpu_reference_for(run: Run, platform: Platform) -> Path | None:
    """A CPU no-gate library of the same OS and arch, for a CUDA cell's fallback check."""
    if run.cpu_reference is not None:
        return run.cpu_reference
    for other in run.matrix.platforms:
        if other.llama_backend == "cpu" and (other.os, other.arch) == (platform.os, platform.arch):
            cell = next((c for c in run.matrix.cells_of(other.id) if not c.gates), None)
            if cell is not None and workflow.capability(other).can_build:
                run.cpu_reference = workflow.build_cells((cell,), run.matrix, echo=False)[0].library
                return run.cpu_reference
    return None


def run_platform_checks(
    run: Run, platform: Platform, *, rerun: bool = False, bench: bool = True, baseline: str | None = None
) -> list[workflow.BuiltCell]:
    """Builds the platform's cells and runs every check this host can run on them."""
    matrix = run.matrix
    # With --cell, the platform's no-gate cell is built too: gates and abi compare with it.
    cells = tuple(
        c for c in matrix.cells_of(platform.id) if run.only is None or c.id in run.only or not c.gates
    )
    can = workflow.capability(platform)
    built: list[workflow.BuiltCell] = []
    for cell in cells:
        try:
            built += workflow.build_cells(
                (cell,), matrix, on_built=lambda b: run.log(workflow.describe_build(b))
            )
        except RUN_ERRORS as exc:
            run.log(f"{cell.id}: build failed: {str(exc)[-2000:]}")
            errored(run, (cell,), {CheckKind.BUILD, CheckKind.ABI}, f"build failed: {str(exc)[-1500:]}")
    by_id = {b.cell_id: b for b in built}
    none = next((c for c in cells if not c.gates and c.id in by_id), None)
    reference = None
    if platform.llama_backend == "cuda":
        try:
            reference = cpu_reference_for(run, platform)
        except RUN_ERRORS as exc:
            run.log(f"{platform.id}: no CPU reference for the fallback check: {exc}")

    outcomes: list[CheckOutcome] = []
    for cell in (c for c in cells if c.id in by_id):
        if (check := run.check_of(cell, CheckKind.BUILD)) is not None:
            outcomes.append(
                checks.build_outcome(
                    cell, check.id, by_id[cell.id], cpu_reference=reference, bundle=run.bundle
                )
            )
            if platform.llama_backend == "cpu" and not cell.gates and run.cpu_reference is None:
                run.cpu_reference = by_id[cell.id].library
        if (check := run.check_of(cell, CheckKind.ABI)) is not None:
            ref_lib = by_id[none.id].library if none is not None else None
            outcomes.append(checks.abi_outcome(cell, check.id, by_id[cell.id].library, ref_lib))
    run.record(outcomes)

    if not can.can_run:
        run.log(f"{platform.id}: run-time checks not run here ({can.run_reason})")
        return built
    if len(built) < len(cells):
        run.log(f"{platform.id}: run-time checks not run: not every cell built")
        errored(
            run,
            cells,
            {
                CheckKind.SELECTOR,
                CheckKind.GATE_FALLTHROUGH,
                CheckKind.BYTE_IDENTITY_REFERENCE,
                CheckKind.BYTE_IDENTITY_GATES,
                CheckKind.BYTE_IDENTITY_BASELINE,
            },
            "not run: a cell of the platform failed to build",
        )
        return built
    existing = {} if rerun else existing_records(run.evidence_dir)
    run_selector(run, cells, existing)
    run_gate_fallthrough(run, platform, cells, existing)
    if bench:
        run_bench(run, platform, {b.cell_id: b.library for b in built}, baseline)
    return built


def run_selector(run: Run, cells: Sequence[Cell], existing: dict[tuple[str, str], LoadedRecord]) -> None:
    for cell in cells:
        check = run.check_of(cell, CheckKind.SELECTOR)
        if check is None:
            continue
        if run.fresh_pass(cell, check, existing):
            run.log(f"  {cell.id:<24} {check.id:<24} fresh passing evidence exists; not re-run")
            continue
        watch = Stopwatch()
        junit = build_root() / "junit" / f"selector-{cell.id}.xml"
        result = checks.run_pytest(["tests/selector"], junit, {"ELIZA_TEST_CELL": cell.id})
        run.record(
            [
                checks.cases_outcome(
                    cell, check.id, result.cases, result.log, watch, (junit,), error=result.error
                )
            ]
        )


def run_gate_fallthrough(
    run: Run, platform: Platform, cells: Sequence[Cell], existing: dict[tuple[str, str], LoadedRecord]
) -> None:
    wanted = [(c, k) for c in cells if (k := run.check_of(c, CheckKind.GATE_FALLTHROUGH)) is not None]
    if not wanted or all(run.fresh_pass(c, k, existing) for c, k in wanted):
        if wanted:
            run.log(
                f"  {platform.id}: gate-fallthrough has fresh passing evidence for every cell; not re-run"
            )
        return
    watch = Stopwatch()
    junit = build_root() / "junit" / f"gates-{platform.id}.xml"
    result = checks.run_pytest(
        ["tests/gates/test_gate_cells.py"], junit, {"ELIZA_TEST_PLATFORM": platform.id}
    )
    ids = [c.id for c in cells]
    run.record(
        [
            checks.cases_outcome(
                cell,
                check.id,
                checks.cases_of_cell(result.cases, cell.id, ids),
                result.log,
                watch,
                (junit,),
                error=result.error,
            )
            for cell, check in wanted
        ]
    )


def run_bench(
    run: Run, platform: Platform, libraries: dict[str, Path], baseline: str | None, argv: Sequence[str] = ()
) -> list[CheckOutcome]:
    from eliza.baseline import baseline_library
    from eliza.bench.workflow import bench_platform, parse_bench_args

    opts = parse_bench_args([*argv, *(["--baseline", baseline] if baseline else [])], run.bundle)
    env = workflow.platform_env(platform)
    try:
        outcomes, _ = bench_platform(
            run.matrix,
            platform.id,
            libraries,
            opts,
            run.log,
            lambda sha, cell: baseline_library(sha, cell, env),
        )
    except RUN_ERRORS as exc:
        run.log(f"{platform.id}: bench failed: {exc}")
        cells = [c for c in run.matrix.cells_of(platform.id) if c.id in libraries]
        kinds = {
            CheckKind.BYTE_IDENTITY_REFERENCE,
            CheckKind.BYTE_IDENTITY_GATES,
            CheckKind.BYTE_IDENTITY_BASELINE,
        }
        return errored(run, cells, kinds, f"bench failed: {str(exc)[-1500:]}")
    run.record(outcomes)
    return outcomes


def skip_platform(run: Run, platform: Platform, reason: str) -> None:
    """Evidence that a platform was deliberately not built here, with the reason."""
    outcomes = [
        skipped(c.id, k.id, reason)
        for c in run.matrix.cells_of(platform.id)
        for k in c.checks
        if k.kind is CheckKind.BUILD
    ]
    run.record(outcomes)


def render(
    matrix: Matrix, evidence_dirs: Sequence[Path], out_dir: Path, bundle: Path
) -> tuple[ReportPaths, Report]:
    """Reads evidence from every directory, judges it against the current tree, renders
    HTML, Markdown and JSON. Returns (paths, report)."""
    host = workflow.host_facts()
    hashes = input_hashes(
        REPO_ROOT,
        bundle,
        DEFAULT_PROMPTS,
        host,
        abidiff_version(),
        llama_source=llama_source_version(),
        bench_settings=DEFAULT_SETTINGS,
    )
    records = read_records(list(evidence_dirs))
    baselines = {
        (r.record.cell, r.record.check): str(r.record.details.get("baseline_commit", ""))
        for r in records
        if r.record is not None and r.record.details.get("baseline_commit")
    }
    # Tool versions are facts of the host that ran a check, which the host rendering the
    # report (a CI report job, say) may not have: the report takes them as recorded, while
    # verify, on the host that runs checks, re-runs a check when its tools changed.
    recorded_tools = {
        (r.record.cell, r.record.check): r.record.fingerprint.parts["tools"]
        for r in records
        if r.record is not None and "tools" in r.record.fingerprint.parts
    }

    def current(cell: Cell, check: Check) -> InputFingerprint:
        now = fingerprint_for(cell, check, hashes, baselines.get((cell.id, check.id), ""))
        tools = recorded_tools.get((cell.id, check.id))
        return now if tools is None else InputFingerprint.of({**now.parts, "tools": tools})

    capabilities = {}
    for platform in matrix.platforms:
        can = workflow.capability(platform)
        capabilities[platform.id] = PlatformCapability(
            can_build=can.can_build,
            build_reason=can.build_reason,
            can_run=can.can_run,
            run_reason=can.run_reason,
        )
    git = evidence_io.git_state()
    cpu = host.cpu_model or host.arch
    report = build_report(
        matrix,
        records=records,
        current_fingerprint=current,
        capabilities=capabilities,
        artifact_matches=evidence_io.resolve_artifact,
        facts=HeaderFacts(
            commit=git.commit,
            dirty=git.dirty,
            generated_at=utc_timestamp(),
            host=f"{host.describe()} ({cpu}, {host.cpu_count} threads)",
        ),
    )
    return render_report(report, out_dir), report


def summary_line(report: Report) -> str:
    header = report.header
    states = ", ".join(f"{s.count} {s.state.label}" for s in header.by_state if s.count)
    return f"{header.verified} of {header.declared} checks verified ({states})"


def screenshot(html: Path, png: Path) -> Path | None:
    """Renders the report in headless Chromium; None when no Chromium is installed."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        return None
    import tempfile

    with tempfile.TemporaryDirectory() as profile:
        cmd = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            f"--screenshot={png}",
            "--window-size=1400,2000",
            html.resolve().as_uri(),
        ]
        subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
    return png if png.is_file() else None
