"""`nox -s verify`: build every cell this host can build, run every check it can run on
them (one runner per check kind), write evidence, render the report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from eliza.adapters.browser import screenshot
from eliza.app.baseline import BaselineError, resolve_commit
from eliza.app.bench_options import parse_bench_args
from eliza.app.build import (
    PREBUILT_VARIABLE,
    BuiltCell,
    build_cells,
    build_session,
    describe_build,
    llama_package_cached,
    preflight,
)
from eliza.app.bundle import ensure_tiny_bundle, generate_text
from eliza.app.checks.abi import abi_outcome
from eliza.app.checks.build import build_outcome
from eliza.app.checks.byte_identity import IDENTITY_KINDS, run_bench
from eliza.app.checks.common import now
from eliza.app.checks.gate_fallthrough import run_gate_fallthrough
from eliza.app.checks.native_suite import run_native_suite
from eliza.app.checks.selector import run_selector
from eliza.app.checks.target_cases import run_gate_fallthrough_on_target, run_selector_on_target
from eliza.app.errors import NotHere, UsageError
from eliza.app.exclusive import exclusive
from eliza.app.options import Parser, strict_requested
from eliza.app.project import capability, current, host_facts
from eliza.app.recording import resolve_artifact
from eliza.app.report import describe_paths, render, summary_line
from eliza.app.run import RUN_ERRORS, Run, errored, existing_records, start_run
from eliza.core.evidence import LoadedRecord, Status
from eliza.core.matrix import Cell, Check, CheckKind, Matrix, Platform
from eliza.core.matrix_rules import unknown_cell
from eliza.core.outcome import CheckOutcome, skipped
from eliza.core.target import TargetRunner

Log = Callable[[str], None]

RUNTIME_KINDS = {CheckKind.SELECTOR, CheckKind.GATE_FALLTHROUGH, CheckKind.NATIVE_SUITE, *IDENTITY_KINDS}


class ChecksFailed(RuntimeError):
    pass


def cpu_reference_for(run: Run, platform: Platform) -> Path | None:
    """A CPU no-gate library of the same OS and arch, for a CUDA cell's fallback check."""
    if run.cpu_reference is not None:
        return run.cpu_reference
    for other in run.matrix.platforms:
        if other.llama_backend == "cpu" and (other.os, other.arch) == (platform.os, platform.arch):
            cell = next((c for c in run.matrix.cells_of(other.id) if not c.gates and c.variant is None), None)
            if cell is not None and capability(other).can_build:
                run.cpu_reference = build_cells((cell,), run.matrix, echo=False)[0].library
                return run.cpu_reference
    return None


def run_platform_checks(
    run: Run,
    platform: Platform,
    *,
    rerun: bool = False,
    bench: bool = True,
    baseline: str | None = None,
    no_baseline: str = "",
) -> list[BuiltCell]:
    """Builds the platform's cells and runs every check this host can run on them."""
    matrix = run.matrix
    # With --cell, the platform's no-gate cell is built too: gates and abi compare with it.
    cells = tuple(
        c
        for c in matrix.cells_of(platform.id)
        if (run.only is None or c.id in run.only or (not c.gates and c.variant is None))
        and not slow_variant_skipped(run, c)
    )
    can = capability(platform)
    built: list[BuiltCell] = []
    for cell in cells:
        try:
            built += build_cells(
                (cell,),
                matrix,
                echo=run.verbose,
                on_built=lambda b: run.log(describe_build(b)),
                on_progress=None if run.verbose else run.log,
            )
        except RUN_ERRORS as exc:
            run.log(f"{cell.id}: build failed: {str(exc)[-2000:]}")
            errored(run, (cell,), {CheckKind.BUILD, CheckKind.ABI}, f"build failed: {str(exc)[-1500:]}")
    existing = {} if rerun else existing_records(run.evidence_dir)
    record_builds(run, platform, cells, built, existing)

    if not (can.can_run or can.can_run_fallback):
        run.log(f"{platform.id}: run-time checks not run here ({can.run_reason})")
        return built
    if len(built) < len(cells):
        run.log(f"{platform.id}: run-time checks not run: not every cell built")
        errored(run, cells, RUNTIME_KINDS, "not run: a cell of the platform failed to build")
        return built
    runnable = {k.kind for c in cells for k in c.checks if can.can_run_check(k.device_free)}
    if can.emulated:
        # The host's Python cannot load these libraries: the cases run as target binaries.
        run.log(f"{platform.id}: checks run as target binaries, {can.runner_words}")
        run.ran_on[platform.id] = can.runner_words
        runner = TargetRunner(prefix=can.runner, words=can.runner_words)
        libraries = {b.cell_id: b.library for b in built}
        if CheckKind.SELECTOR in runnable:
            run_selector_on_target(run, cells, libraries, existing, runner)
        if CheckKind.GATE_FALLTHROUGH in runnable:
            run_gate_fallthrough_on_target(run, platform, cells, libraries, existing, runner)
        runnable -= {CheckKind.SELECTOR, CheckKind.GATE_FALLTHROUGH}
    if not can.can_run:
        how = can.how_it_runs(device_free=True)
        run.log(
            f"{platform.id}: {can.run_reason}; device-free checks run on the {how} ({can.fallback_reason})"
        )
        run.ran_on[platform.id] = how
    # The suites run for the cells whose evidence this run records (--cell): the no-gate
    # cell built beside them is a reference for the comparing checks, not a subject.
    recorded = tuple(c for c in cells if run.only is None or c.id in run.only)
    if CheckKind.SELECTOR in runnable:
        run_selector(run, recorded, existing)
    if CheckKind.GATE_FALLTHROUGH in runnable:
        run_gate_fallthrough(run, platform, recorded, existing)
    if CheckKind.NATIVE_SUITE in runnable:
        run_native_suite(run, recorded, {b.cell_id: b.library for b in built}, existing)
    if bench and runnable & IDENTITY_KINDS:
        if identity_is_fresh(run, cells, existing, baseline):
            run.log(
                f"  {platform.id}: byte identity has fresh passing evidence for every cell; not re-run "
                "(the seam-overhead figure stands as measured; --rerun or nox -s bench-* measures again)"
            )
            return built
        opts = parse_bench_args(
            ["--baseline", baseline] if baseline else [], default_bundle=run.bundle, repo=run.project.repo
        )
        if no_baseline:
            opts = replace(opts, no_baseline_reason=no_baseline)
        run_bench(run, platform, {b.cell_id: b.library for b in built}, opts)
    return built


def slow_variant_skipped(run: Run, cell: Cell) -> bool:
    """A cell of a slow-build variant (ASan llama.cpp) that verify does not build now: its
    llama.cpp package is not cached yet and --cell did not name it. Its checks get skipped
    evidence saying how to run them."""
    variant = cell.variant
    if variant is None or not variant.slow_build or (run.only is not None and cell.id in run.only):
        return False
    if llama_package_cached(cell.platform, variant.sanitize_option):
        return False
    reason = (
        f"slow build not started by verify: run `nox -s build-{cell.id}` once (llama.cpp with "
        f"{variant.sanitize_option}), then verify again, or `nox -s verify -- --cell {cell.id}`"
    )
    run.log(f"{cell.id}: {reason}")
    at = now()
    run.record([skipped(cell.id, k.id, reason, at) for k in cell.checks])
    return True


def identity_is_fresh(
    run: Run, cells: Sequence[Cell], existing: dict[tuple[str, str], LoadedRecord], baseline: str | None
) -> bool:
    """Whether every byte-identity check of the cells has fresh passing evidence, the
    baseline check against the commit this run would use. One stale check re-runs the
    platform's bench: its runs are shared by the checks."""
    commit = ""
    if baseline is not None:
        try:
            commit = resolve_commit(baseline)
        except BaselineError:
            return False
    wanted = [(c, k) for c in cells for k in c.checks if k.kind in IDENTITY_KINDS]
    return bool(wanted) and all(
        run.fresh_pass(c, k, existing, commit if k.kind is CheckKind.BYTE_IDENTITY_BASELINE else "")
        and artifacts_match(run, existing[(c.id, k.id)])
        for c, k in wanted
    )


def artifacts_match(run: Run, item: LoadedRecord) -> bool:
    """Every artifact the record names is here and hashes as recorded."""
    record = item.record
    return record is not None and all(resolve_artifact(a, run.project.repo) for a in record.artifacts)


def record_builds(
    run: Run,
    platform: Platform,
    cells: Sequence[Cell],
    built: Sequence[BuiltCell],
    existing: dict[tuple[str, str], LoadedRecord] | None = None,
) -> None:
    """Build and abi evidence of the cells that were built (they inspect, run nothing).
    Evidence that is fresh, passed, and whose artifacts are still these bytes stands."""
    existing = existing or {}
    by_id = {b.cell_id: b for b in built}
    none = next((b for b in built if b.cell_id.endswith(".none")), None)
    reference = None
    if platform.llama_backend == "cuda":
        try:
            reference = cpu_reference_for(run, platform)
        except RUN_ERRORS as exc:
            run.log(f"{platform.id}: no CPU reference for the fallback check: {exc}")

    def stands(cell: Cell, check: Check) -> bool:
        """Fresh passing evidence of these very artifacts that compared all this run would."""
        item = existing.get((cell.id, check.id))
        if item is None or item.record is None or not run.fresh_pass(cell, check, existing):
            return False
        details = item.record.details
        narrower = check.kind is CheckKind.ABI and cell.gates and none is not None
        if narrower and not details.get("compared_with_no_gate"):
            return False  # made by a narrower build, without the no-gate cell to compare
        if check.kind is CheckKind.BUILD and reference is not None:
            names = [str(s.get("name", "")) for s in details.get("subchecks", []) if isinstance(s, dict)]
            if not any(n.startswith("without a GPU") for n in names):
                return False  # made without the CPU-fallback comparison
        return artifacts_match(run, item)

    repo = run.project.repo
    outcomes: list[CheckOutcome] = []
    for cell in (c for c in cells if c.id in by_id):
        if (check := run.check_of(cell, CheckKind.BUILD)) is not None and stands(cell, check):
            run.log(f"  {cell.id:<24} {check.id:<24} fresh passing evidence of these artifacts; not re-run")
        elif check is not None:
            try:
                outcomes.append(
                    build_outcome(
                        cell, check.id, by_id[cell.id], repo=repo, cpu_reference=reference, bundle=run.bundle
                    )
                )
            except RUN_ERRORS as exc:
                errored(run, (cell,), {CheckKind.BUILD}, f"build check could not run: {str(exc)[-1500:]}")
        if platform.llama_backend == "cpu" and not cell.gates and run.cpu_reference is None:
            run.cpu_reference = by_id[cell.id].library
        if (check := run.check_of(cell, CheckKind.ABI)) is not None and stands(cell, check):
            run.log(f"  {cell.id:<24} {check.id:<24} fresh passing evidence of these artifacts; not re-run")
        elif check is not None:
            ref_lib = none.library if none is not None else None
            try:
                outcomes.append(abi_outcome(cell, check.id, by_id[cell.id].library, ref_lib, repo))
            except RUN_ERRORS as exc:
                errored(run, (cell,), {CheckKind.ABI}, f"abi check could not run: {str(exc)[-1500:]}")
    run.record(outcomes)


def build_with_evidence(
    matrix: Matrix, cell_ids: Sequence[str], argv: Sequence[str], log: Log
) -> list[BuiltCell]:
    """`nox -s build-<platform>[.<gates>]`: builds the cells and records their build and abi
    evidence, so the report shows them built without a verify. One line sums up the
    evidence; the checks' own lines are in the evidence files."""
    # Options first, and what cannot be built here: a typo, --help or "needs Xcode" ends
    # here, without waiting for another session.
    Parser("nox -s build-* --", skippable=True).parse_args(list(argv))
    if current().env.get(PREBUILT_VARIABLE) != "1":
        preflight(tuple(matrix.cell(c) for c in cell_ids))
    with exclusive("nox -s build-*", log):
        return _build_with_evidence(matrix, cell_ids, argv, log)


def _build_with_evidence(
    matrix: Matrix, cell_ids: Sequence[str], argv: Sequence[str], log: Log
) -> list[BuiltCell]:
    built = build_session(matrix, cell_ids, argv, log)
    if not built:
        return built
    quiet: list[str] = []
    run = start_run(current(), matrix, host_facts(), quiet.append, bundle=ensure_tiny_bundle())
    by_platform: dict[str, list[BuiltCell]] = {}
    for b in built:
        by_platform.setdefault(matrix.cell(b.cell_id).platform.id, []).append(b)
    for pid, cells_built in by_platform.items():
        cells = tuple(matrix.cell(b.cell_id) for b in cells_built)
        record_builds(run, matrix.platform(pid), cells, cells_built, existing_records(run.evidence_dir))
    for line in quiet:
        if not line.startswith("  "):  # per-check lines are in the evidence; anything else is news
            log(line)
    kept = sum("not re-run" in line for line in quiet)
    states = Counter(o.status.value for o in run.written)
    said = ", ".join([f"{n} {s}" for s, n in sorted(states.items())] + [f"{kept} fresh, kept"])
    log(f"evidence: {len(run.written)} build/abi record(s) written to {run.evidence_dir} ({said})")
    failed = [o for o in run.written if o.status in (Status.FAILED, Status.ERROR)]
    if failed:
        raise ChecksFailed(
            f"{len(failed)} check(s) failed: "
            + "; ".join(f"{o.cell}/{o.check}: {o.reason[:300]}" for o in failed)
        )
    return built


def skip_platform(run: Run, platform: Platform, reason: str) -> None:
    """Evidence that a platform was deliberately not built here, with the reason."""
    at = now()
    run.record(
        [
            skipped(c.id, k.id, reason, at)
            for c in run.matrix.cells_of(platform.id)
            for k in c.checks
            if k.kind is CheckKind.BUILD
        ]
    )


def verify(matrix: Matrix, argv: Sequence[str], log: Log) -> Path:
    parser = Parser("nox -s verify --", skippable=True)
    parser.add_argument("--rerun", action="store_true", help="re-run checks that have fresh passing evidence")
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="diff every cell against a build of REF instead of the matrix's declared baseline",
    )
    parser.add_argument("--no-bench", action="store_true", help="skip the byte-identity bench")
    parser.add_argument(
        "--cell",
        action="append",
        default=[],
        metavar="ID",
        help="only these cells (repeatable); a CI job per cell uses this",
    )
    args = parser.parse_args(list(argv))
    known = {c.id for c in matrix.cells}
    unknown = [c for c in args.cell if c not in known]
    if unknown:
        parser.error(unknown_cell(matrix, unknown[0], "--cell"))
    only = frozenset(args.cell) if args.cell else None
    wanted_platforms = {matrix.cell(c).platform.id for c in args.cell}
    project = current()
    if args.baseline is not None:
        try:
            resolve_commit(args.baseline)
        except BaselineError as exc:
            raise UsageError(str(exc)) from None
    baseline = args.baseline or (matrix.baseline.ref if matrix.baseline else None)
    no_baseline = ""
    if args.baseline is None and baseline is not None:
        try:
            resolve_commit(baseline)
        except BaselineError:
            # A clone without the history (a shallow CI checkout) cannot build it: not run,
            # and said, rather than a failure of the code under test.
            no_baseline = (
                f"the declared baseline {baseline[:12]} is not in this clone (a shallow clone?): "
                "fetch the history (git fetch --unshallow) and verify again"
            )
            log(f"byte-identity-baseline not run: {no_baseline}")
            baseline = None
    if strict_requested(argv, project.env):
        for pid in sorted(wanted_platforms):
            can = capability(matrix.platform(pid))
            if not (can.can_build and can.can_run):
                raise NotHere(f"{pid}: {can.build_reason if not can.can_build else can.run_reason}")

    with exclusive("nox -s verify", log):
        run = start_run(project, matrix, host_facts(), log, bundle=ensure_tiny_bundle(), only=only)
        run.verbose = args.verbose
        reference: Path | None = None
        for platform in matrix.platforms:
            if only is not None and platform.id not in wanted_platforms:
                continue
            can = capability(platform)
            if not can.can_build:
                log(f"{platform.id}: not buildable here — {can.build_reason}")
                continue
            if platform.slow_build and only is None and not llama_package_cached(platform):
                reason = (
                    f"slow build not started by verify: run `nox -s build-{platform.id}` once, "
                    "then verify again"
                )
                log(f"{platform.id}: {reason}")
                skip_platform(run, platform, reason)
                continue
            log(f"{platform.id}: building and running its checks")
            built = run_platform_checks(
                run,
                platform,
                rerun=args.rerun,
                bench=not args.no_bench,
                baseline=baseline,
                no_baseline=no_baseline,
            )
            if not can.emulated:  # the sample below goes through ctypes: a library this process loads
                reference = reference or next((b.library for b in built if b.cell_id.endswith(".none")), None)

        if reference is not None:
            prompt = "Once upon a time there was"
            _, text = generate_text(reference, run.bundle, prompt)
            shown = prompt + text.decode("utf-8", errors="replace")
            log(f"generated through the C ABI: {shown!r}")
            log(f"library: {reference}")
        paths, report = render(
            matrix, [run.evidence_dir, *project.default_evidence_dirs()[1:]], project.report_dir, run.bundle
        )
        log(describe_paths(paths, screenshot(paths.html, project.report_dir / "report.png")))
        log(summary_line(report))
        failed = [o for o in run.written if o.status in (Status.FAILED, Status.ERROR)]
        if failed:
            raise ChecksFailed(
                f"{len(failed)} check(s) failed: " + ", ".join(f"{o.cell}/{o.check}" for o in failed)
            )
        return paths.html
