"""The verify use case, shared by `nox -s verify` and the CI check job: plan what this host
can build and check (eliza.core.verify_plan), carry the plan out (eliza.app.executor),
generate a sample through the C ABI, render the report. A dry run prints the plan and
touches nothing."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from eliza.adapters import conan, proc
from eliza.adapters.errors import ToolError
from eliza.adapters.host_probe import usable_cores
from eliza.app.context import Context
from eliza.app.errors import ChecksFailed, ElizaError, NotHere, UsageError
from eliza.app.executor import Builder, Execution, execute
from eliza.app.options import Parser
from eliza.app.services import lab
from eliza.app.services.baseline import BaselineError, resolve_commit
from eliza.app.services.bench_options import BenchOptions, verify_bench_options
from eliza.app.services.build import BUILT_VARIABLE, describe_build
from eliza.app.services.builders import ConanBuilder
from eliza.app.services.bundle import bundle_paths, bundles_of, ensure_bundles, generate_text, sample_bundle
from eliza.app.services.clock import Stopwatch, now
from eliza.app.services.exclusive import exclusive
from eliza.app.services.recording import ArtifactHashes
from eliza.app.services.reporting import describe_paths, render, report_screenshot, summary_line
from eliza.app.services.run import Run, evidence_index, start_run
from eliza.app.services.shipping import candidate_libraries
from eliza.core.call_order import remembered
from eliza.core.cell_id import CellId
from eliza.core.host import check_blockers
from eliza.core.lab import Lab
from eliza.core.matrix import Matrix
from eliza.core.report.model import Entry, Report
from eliza.core.report.states import GridState
from eliza.core.suite import bytecode_env, device_environment, side_by_side_env
from eliza.core.target import library_file
from eliza.core.verify_plan import PlanFacts, Selection, VerifyPlan, plan
from eliza.formats.files import HASH_MEMO, atomic_write_text, file_identity, sha256_file

SAMPLE_PROMPT = "The capital of France is"


@dataclass(frozen=True, kw_only=True)
class VerifyOptions:
    cells: tuple[CellId, ...] = ()
    rerun: bool = False
    baseline: str | None = None  # --baseline REF instead of the matrix's declared one
    bench: bool = True
    dry_run: bool = False
    json: bool = False
    strict: bool = False
    verbose: bool = False
    lab: Lab | None = None  # --devices / ELIZA_DEVICES: devices that run their platforms' checks
    rounds: int | None = None  # --rounds N: the perf check's rounds
    perf_reference: str | None = None  # --perf-reference REF|DIR
    jobs: int | None = None  # --jobs N: check runs at once; None: the cores this process may use


def parser(prog: str = "nox -s verify --") -> Parser:
    p = Parser(prog, skippable=True)
    p.add_argument("--rerun", action="store_true", help="re-run checks that have fresh passing evidence")
    p.add_argument(
        "--baseline",
        metavar="REF",
        help="diff every cell against a build of REF instead of the matrix's declared baseline",
    )
    p.add_argument("--no-bench", action="store_true", help="skip the byte-identity bench and the perf check")
    p.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="interleaved candidate/reference rounds of the perf check (3..50; default: the matrix's)",
    )
    p.add_argument(
        "--perf-reference",
        metavar="REF|DIR",
        help="the perf check's reference: a commit (built like the baseline) or a directory holding a "
        "previous release's library, instead of the matrix's baseline",
    )
    p.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="check runs side by side (default: the cores this process may use); a run that "
        "measures wall time always runs alone",
    )
    p.add_argument(
        "--cell",
        action="append",
        default=[],
        metavar="ID",
        help="only these cells (repeatable); a CI job per cell uses this",
    )
    p.add_argument(
        "--platform",
        action="append",
        default=[],
        metavar="ID",
        help="only the cells of this platform (repeatable), built when they are not; what "
        "`--cell` would name for each of its cells but a slow build variant's",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (builds, runs, kept and skipped checks) and do nothing",
    )
    p.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    lab.add_option(p)
    return p


@dataclass(frozen=True, kw_only=True)
class BaselineChoice:
    commit: str | None
    ref: str | None
    no_baseline_reason: str = ""


def choose_baseline(options: VerifyOptions, matrix: Matrix) -> BaselineChoice:
    """--baseline REF must resolve (a usage error otherwise); the declared baseline missing
    from a shallow clone is not run, and said, rather than a failure of the code under test."""
    if options.baseline is not None:
        try:
            return BaselineChoice(commit=resolve_commit(options.baseline), ref=options.baseline)
        except BaselineError as exc:
            raise UsageError(str(exc)) from None
    declared = matrix.baseline.ref if matrix.baseline else None
    if declared is None:
        return BaselineChoice(commit=None, ref=None, no_baseline_reason="the matrix declares no baseline")
    try:
        return BaselineChoice(commit=resolve_commit(declared), ref=declared)
    except BaselineError:
        return BaselineChoice(
            commit=None,
            ref=None,
            no_baseline_reason=(
                f"the declared baseline {declared[:12]} is not in this clone (a shallow clone?): "
                "fetch the history (git fetch --unshallow) and verify again"
            ),
        )


@dataclass(frozen=True, kw_only=True)
class PerfReference:
    commit: str | None = None  # --perf-reference REF, resolved
    library: Path | None = None  # --perf-reference DIR: the library found in it
    library_sha256: str = ""


def choose_perf_reference(options: VerifyOptions, ctx: Context) -> PerfReference:
    """--perf-reference DIR must hold the first platform's library; REF must resolve."""
    given = options.perf_reference
    if given is None:
        return PerfReference()
    path = Path(given)
    if path.is_dir():
        name = library_file(ctx.matrix.platforms[0])
        found = sorted(p for p in (path / name, path / "build" / name) if p.is_file())
        if not found:
            raise UsageError(
                f"--perf-reference {given}: no {name} in it (give a directory holding a built library, "
                "or a commit)"
            )
        return PerfReference(library=found[0].resolve(), library_sha256=sha256_file(found[0]))
    try:
        return PerfReference(commit=resolve_commit(given))
    except BaselineError as exc:
        raise UsageError(f"--perf-reference {given}: neither a directory nor a commit ({exc})") from None


@dataclass(kw_only=True)
class Planned:
    plan: VerifyPlan
    run: Run
    baseline: BaselineChoice
    artifact_hashes: ArtifactHashes = field(default_factory=ArtifactHashes)
    perf_reference: PerfReference = field(default_factory=PerfReference)
    # Every record that stands as the run starts, of any cell (what a verify of every cell
    # without --rerun would keep): whatever of it the run does not run again must still
    # count in the report afterwards.
    standing: tuple[tuple[str, str], ...] = ()


def plan_facts(
    ctx: Context,
    run: Run,
    artifacts: ArtifactHashes,
    *,
    cached_llama: frozenset[tuple[str, str]] = frozenset(),
) -> PlanFacts:
    """What a plan is made from (verify's, a build session's, a bench session's): this host's
    capabilities, the run's input hashes, the evidence on disk with its artifacts checked,
    and what the host lacks for a check's own requirements."""
    matrix = ctx.matrix
    return PlanFacts(
        capabilities=ctx.capabilities(),
        hashes=run.hashes,
        cached_llama=cached_llama,
        evidence=evidence_index(run, artifacts),
        check_blockers=check_blockers(ctx.host, matrix.checks, matrix.platforms[0]),
    )


def plan_verify(options: VerifyOptions, ctx: Context, *, bundles: Mapping[str, Path]) -> Planned:
    """Every decision verify will make, from this host, this tree and the evidence on disk."""
    matrix = ctx.matrix
    baseline = choose_baseline(options, matrix)
    perf_reference = choose_perf_reference(options, ctx)
    selected = {c.platform for c in options.cells}
    capabilities = ctx.capabilities()
    if options.strict:
        for pid in sorted(selected):
            can = capabilities[pid]
            if not (can.can_build and can.can_run):
                raise NotHere(f"{pid}: {can.build_reason if not can.can_build else can.run_reason}")
    run = start_run(
        ctx.project,
        matrix,
        ctx.host,
        ctx.log,
        bundle=bundles[matrix.default_bundle.id],
        other_bundles=bundles,
    )
    artifacts = ArtifactHashes(repo=ctx.project.repo, memo=ctx.project.cache / HASH_MEMO)
    # The cache decides only whether a plain verify starts a slow platform's build (a slow
    # variant runs only when named; --cell names what to build): ask Conan only then.
    slow = [p for p in matrix.platforms if p.slow_build] if not options.cells else []
    cached = (
        conan.cached_llama_variants(ctx.project.cache, slow, conan.llama_source_version(ctx.project.env))
        if slow
        else frozenset()
    )
    facts = plan_facts(ctx, run, artifacts, cached_llama=cached)
    selection = Selection(
        cells=frozenset(options.cells) if options.cells else None,
        rerun=options.rerun,
        bench=options.bench,
        baseline_commit=baseline.commit,
        no_baseline_reason=baseline.no_baseline_reason,
        perf_reference_commit=perf_reference.commit,
        perf_reference_library=perf_reference.library_sha256,
        perf_rounds=options.rounds,
    )
    chosen = plan(matrix, facts, selection)
    every_cell = replace(selection, cells=None, rerun=False)
    everything = chosen if every_cell == selection else plan(matrix, facts, every_cell)
    return Planned(
        plan=chosen,
        run=run,
        baseline=baseline,
        artifact_hashes=artifacts,
        perf_reference=perf_reference,
        standing=tuple((str(k.cell), k.check) for k in everything.kept),
    )


def print_plan(verify_plan: VerifyPlan, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(verify_plan.as_dict(), indent=2))
    else:
        print("\n".join(verify_plan.lines()))


@dataclass(frozen=True, kw_only=True)
class VerifyResult:
    plan: VerifyPlan
    report: Path | None = None
    execution: Execution | None = None


def bench_options_for(
    ctx: Context,
    bundle: Path,
    baseline: BaselineChoice,
    *,
    rounds: int | None = None,
    perf_reference: PerfReference | None = None,
) -> BenchOptions:
    opts = verify_bench_options(default_bundle=bundle, repo=ctx.project.repo, baseline=baseline.ref)
    opts = replace(
        opts, perf_rounds=rounds, perf_reference_dir=perf_reference.library if perf_reference else None
    )
    return (
        replace(opts, no_baseline_reason=baseline.no_baseline_reason) if baseline.no_baseline_reason else opts
    )


def verify(options: VerifyOptions, ctx: Context, builder: Builder | None = None) -> VerifyResult:
    ctx = lab.with_lab(ctx, options.lab, strict=options.strict)
    if options.dry_run:
        # The bundle as it is: a dry run writes nothing, so a missing bundle makes the
        # bundle-dependent checks plan to run.
        planned = plan_verify(options, ctx, bundles=bundle_paths(ctx.matrix))
        print_plan(planned.plan, as_json=options.json)
        return VerifyResult(plan=planned.plan)
    builder = builder or ConanBuilder(ctx=ctx, verbose=options.verbose)
    started = Stopwatch()
    with exclusive("nox -s verify", ctx.log):
        # Every bundle the selected cells' checks run on, before anything is planned: a
        # model that cannot be had stops verify here, with nothing written.
        watch = Stopwatch()
        bundles = ensure_bundles(ctx.matrix, bundles_of(ctx.matrix, options.cells))
        bundle_seconds = watch.seconds()
        bundle = bundles[ctx.matrix.default_bundle.id]
        planned = plan_verify(options, ctx, bundles=bundles)
        evidence_run = planned.run
        evidence_run.verbose = options.verbose
        evidence_run.details_shown = False  # each record's line says what counts; -v shows the rest
        # The executor builds what each check needs first: the suites build nothing.
        evidence_run.child_env = {BUILT_VARIABLE: "1", **ctx.child_env}
        evidence_run.device_facts = lab.device_facts(ctx)
        for note in planned.plan.notes:
            ctx.log(note)
        evidence_run.notes_said = tuple(planned.plan.notes)
        jobs = options.jobs or usable_cores()
        # Checks side by side share the cores: each process decodes with its share (the
        # wall-time rounds, alone, name their own threads).
        shares = side_by_side_env(jobs, ctx.project.env, cpus=usable_cores())
        last_seconds, start_by = start_seconds(ctx.project.cache)
        with proc.children_environment(
            shares | device_environment(ctx.host, shares) | bytecode_env(ctx.project.env)
        ):
            done = execute(
                planned.plan,
                evidence_run,
                builder,
                ctx.capabilities(),
                bench=bench_options_for(
                    ctx,
                    bundle,
                    planned.baseline,
                    rounds=options.rounds,
                    perf_reference=planned.perf_reference,
                ),
                describe_build=describe_build,
                devices=lab.device_targets(ctx),
                jobs=jobs,
                last_seconds=start_by,
            )
        if done.call_seconds:
            _remember_call_seconds(ctx, remembered(last_seconds, done.call_seconds))
        ctx.log(f"verify: {done.summary()}")
        done.timings.add("bundles", "ensured", bundle_seconds)
        sample = sample_bundle(ctx.matrix)
        shown = sample.id if sample.id in bundles else ctx.matrix.default_bundle.id
        _generate_sample(ctx, builder, done.libraries, bundles[shown], shown)
        watch = Stopwatch()
        evidence_dirs = [evidence_run.evidence_dir, *ctx.project.default_evidence_dirs()[1:]]
        memo = ctx.project.build_root / MEMO_NAME
        key = _report_key(ctx, evidence_dirs, evidence_run)
        said = _report_said_before(memo, key, ctx.project.report_dir)
        html = ctx.project.report_dir / _REPORT_FILES[0]  # as rendered last time
        report: Report | None = None
        if said is None:
            paths, report = render(
                ctx.matrix,
                evidence_dirs,
                ctx.project.report_dir,
                bundle,
                hashes=evidence_run.hashes,
                artifact_matches=planned.artifact_hashes.resolve,
                capabilities=ctx.capabilities(),
            )
            html = paths.html
            png = report_screenshot(html, ctx.project.report_dir / "report.png", report)
            said = [describe_paths(paths, png), summary_line(report), f"trust: {report.header.trust}"]
            _remember_report(memo, key, said, ctx.project.report_dir)
            done.timings.add("report", "rendered", watch.seconds())
        else:
            said[0] += " (unchanged: no record and no input of the report changed)"
        for line in said:
            ctx.log(line)
        if planned.plan.runs or planned.plan.builds:  # a verify that ran nothing has no table
            for line in done.timings.lines(started.seconds()):
                ctx.log(line)
        if done.failed:
            raise ChecksFailed(
                f"{len(done.failed)} check(s) failed: "
                + ", ".join(f"{o.cell}/{o.check}" for o in done.failed)
            )
        if report is not None:
            changed = no_longer_counted(planned, report)
            if changed:
                cells = sorted({e.cell for e in changed})
                for e in changed:
                    ctx.log(f"  {e.cell:<24} {e.check:<24} {e.state.value.upper()} ({e.reason[:200]})")
                raise ChecksFailed(
                    f"{len(changed)} record(s) that stood when this verify started, and that it did not run, "
                    f"are not counted by the report now (cells {', '.join(cells)}): mend them with "
                    "nox -s verify -- --rerun " + " ".join(f"--cell {c}" for c in cells)
                )
        return VerifyResult(plan=planned.plan, report=html, execution=done)


def no_longer_counted(planned: Planned, report: Report) -> list[Entry]:
    """The entries whose record stood when the run started (of any cell: the selected ones'
    kept records, the others' too) and that the run did not run again, which the report
    rendered after it does not count: their evidence changed state while this verify ran
    (something it ran wrote a file they name). Verify's last line must not call such a run
    successful."""
    ran = {(str(r.cell), r.check) for r in planned.plan.runs}
    counted = (GridState.VERIFIED, GridState.INCONCLUSIVE)
    found = []
    for cell, check in planned.standing:
        if (cell, check) in ran:
            continue
        entry = report.entry(cell, check)
        if entry.state not in counted:
            found.append(entry)
    return found


def _generate_sample(
    ctx: Context, builder: Builder, built: Mapping[CellId, Path], bundle: Path, bundle_id: str
) -> None:
    """A line of greedy text through the C ABI, from a reference library that this process
    may load (the planner's loads_in_process: never a library of another architecture or
    one meant for a device), or one line saying why there is none. A library that fails to
    load is that one line too: the report is still written."""
    capabilities = ctx.capabilities()
    sample = next(
        (
            path
            for cell_id, path in built.items()
            if cell_id.is_reference and capabilities[cell_id.platform].loads_in_process
        ),
        None,
    ) or _kept_reference_library(ctx, builder)
    if sample is None:
        ctx.log(
            "generated through the C ABI: nothing: no reference cell this host runs natively was "
            "built or kept (build one, e.g. `nox -s build-linux-cpu.none`)"
        )
        return
    memo = ctx.project.build_root / "sample.json"
    key = _sample_key(sample, bundle)
    text = _sample_generated_before(memo, key)
    if text is None:
        try:
            _, generated = generate_text(sample, bundle, SAMPLE_PROMPT)
        except ToolError as exc:
            ctx.log(f"generated through the C ABI: nothing: {exc}")
            return
        text = generated.decode("utf-8", errors="replace")
        atomic_write_text(memo, json.dumps({"key": key, "text": text}) + "\n")
    shown = SAMPLE_PROMPT + text
    ctx.log(f"generated through the C ABI from the {bundle_id} bundle: {shown!r}")
    ctx.log(f"library: {sample}")


# What the last verify's report was rendered from, and the lines it said.
MEMO_NAME = "report-rendered.json"
_REPORT_FILES = ("report.html", "report.md", "report.json", "report.png", "report-perf.png")


def _identities(paths: Sequence[Path]) -> list[list[object]]:
    return [[str(f), *file_identity(f)] for f in paths if f.is_file()]


def _report_key(ctx: Context, evidence_dirs: Sequence[Path], run: Run) -> list[object]:
    """Everything the report is made from: the evidence files, the tree's input hashes, the
    matrix, the code and templates that judge and draw it, the commit, this host's
    capabilities, the day (a waiver expires by date) and the cells' libraries (what would
    ship), each file by its identity."""
    repo = ctx.project.repo
    records = sorted(f for d in evidence_dirs if d.is_dir() for f in d.glob("*.json"))
    code = sorted(
        f
        for folder in (repo / "eliza", repo / "templates")
        if folder.is_dir()
        for f in folder.rglob("*")
        if f.is_file() and "__pycache__" not in f.parts
    )
    return [
        now().date().isoformat(),
        repr(run.git),
        repr(run.hashes),
        repr(sorted(ctx.capabilities().items())),
        _identities([repo / "matrix.yaml", *records, *code, *candidate_libraries(ctx.matrix, repo)]),
    ]


def _report_said_before(memo: Path, key: list[object], report_dir: Path) -> list[str] | None:
    """The lines of the report rendered last time from the same inputs, when its files are
    still the ones written then; None otherwise."""
    try:
        data = json.loads(memo.read_text(encoding="utf-8"))
        files = _identities([report_dir / name for name in _REPORT_FILES])
        if data["key"] != json.loads(json.dumps(key)) or data["files"] != files:
            return None
        return [str(line) for line in data["said"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remember_report(memo: Path, key: list[object], said: list[str], report_dir: Path) -> None:
    files = _identities([report_dir / name for name in _REPORT_FILES])
    atomic_write_text(memo, json.dumps({"key": key, "files": files, "said": said}) + "\n")


def _sample_key(library: Path, bundle: Path) -> list[object]:
    """What the sample line depends on: the prompt, and the library and the bundle's files as
    the file system identifies them (path, size, modification time, inode): the same files
    generate the same greedy text, so it is not generated again (loading Gemma takes
    seconds)."""
    files = [library, *sorted(p for p in bundle.rglob("*") if p.is_file())]
    return [SAMPLE_PROMPT, *([str(f), *file_identity(f)] for f in files)]


def _sample_generated_before(memo: Path, key: list[object]) -> str | None:
    try:
        data = json.loads(memo.read_text(encoding="utf-8"))
        return str(data["text"]) if data["key"] == key else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _kept_reference_library(ctx: Context, builder: Builder) -> Path | None:
    """The first natively runnable platform's reference library, when nothing was built:
    the sample still goes through a library this process can load."""
    for platform in ctx.matrix.platforms:
        can = ctx.capability(platform)
        cell = ctx.matrix.reference_cell(platform.id)
        if cell is None or not can.loads_in_process:
            continue
        try:
            library = builder.locate(cell)
        except (OSError, ElizaError):  # not built here (or not in this CI job's artifact)
            continue
        if library.is_file():
            return library
    return None


# What each runner call took the last time, by call: which calls a verify starts first
# (eliza.core.call_order). In the cache, so a fresh clone on warm caches has it too.
CALL_SECONDS = "verify-call-seconds.json"


# What each call took in a verify from empty caches on the machine the README names (its
# shareable seconds: the first simulated-CPU counts of every perf call among them): the
# order a verify starts its calls in while its cache holds no seconds of its own. Started in
# the plan's order instead, an empty-cache verify's checks took 23 s more than their
# windows alone and the rest on two cores allow (docs/verify-plan.md). A hint, never
# evidence: a call it does not know starts first, and the verify's own seconds replace it
# in the cache.
EMPTY_CACHE_SECONDS = "data/empty-cache-call-seconds.json"


def _seconds_in(source: Path | Traversable) -> dict[str, float]:
    """A call-seconds file's numbers ({} when there is none, or it is not a JSON object)."""
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return {}
    if not isinstance(data, dict):
        return {}
    numbers = {k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {str(k): float(v) for k, v in numbers.items()}


def _empty_cache_seconds() -> dict[str, float]:
    """The calls' seconds of a verify from empty caches, as the package ships them."""
    return _seconds_in(resources.files("eliza").joinpath(EMPTY_CACHE_SECONDS))


def start_seconds(cache: Path) -> tuple[dict[str, float], dict[str, float]]:
    """(the seconds the cache keeps from the last verify, which this one's are merged into;
    the seconds its calls start by: those, or the shipped ones where the cache keeps none)."""
    kept = _seconds_in(cache / CALL_SECONDS)
    return kept, kept or _empty_cache_seconds()


def _remember_call_seconds(ctx: Context, seconds: Mapping[str, float]) -> None:
    text = json.dumps(seconds, indent=1, sort_keys=True) + "\n"
    # an unwritable cache costs the order next time, nothing else
    with contextlib.suppress(OSError):
        atomic_write_text(ctx.project.cache / CALL_SECONDS, text)
