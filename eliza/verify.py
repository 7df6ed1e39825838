"""`nox -s verify`, `nox -s bench-<platform>` and `nox -s report` as functions of a
session-like logger and the arguments after `--`."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from eliza import conan, workflow
from eliza.bench.workflow import settings_description
from eliza.evidence import Status
from eliza.matrix.model import Matrix
from eliza.runs import (
    EVIDENCE_DIR,
    REPORT_DIR,
    Run,
    render,
    run_bench,
    run_platform_checks,
    screenshot,
    skip_platform,
    summary_line,
)

Log = Callable[[str], None]


class ChecksFailed(RuntimeError):
    pass


def verify(matrix: Matrix, argv: Sequence[str], log: Log) -> Path:
    parser = argparse.ArgumentParser(prog="nox -s verify --")
    parser.add_argument("--rerun", action="store_true", help="re-run checks that have fresh passing evidence")
    parser.add_argument("--baseline", metavar="REF", help="also diff every cell against a build of REF")
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
        parser.error(f"unknown cell {unknown[0]!r}; cells of matrix.yaml: {', '.join(sorted(known))}")
    only = frozenset(args.cell) if args.cell else None
    wanted_platforms = {matrix.cell(c).platform.id for c in args.cell}

    run = Run(matrix=matrix, log=log, bundle=workflow.ensure_tiny_bundle(), only=only)
    reference: Path | None = None
    for platform in matrix.platforms:
        if only is not None and platform.id not in wanted_platforms:
            continue
        can = workflow.capability(platform)
        if not can.can_build:
            log(f"{platform.id}: not buildable here — {can.build_reason}")
            continue
        if platform.slow_build and only is None and not conan.package_cached(platform):
            reason = (
                f"slow build not started by verify: run `nox -s build-{platform.id}` once, then verify again"
            )
            log(f"{platform.id}: {reason}")
            skip_platform(run, platform, reason)
            continue
        log(f"{platform.id}: building and running its checks")
        built = run_platform_checks(
            run, platform, rerun=args.rerun, bench=not args.no_bench, baseline=args.baseline
        )
        reference = reference or next((b.library for b in built if b.cell_id.endswith(".none")), None)

    if reference is not None:
        prompt = "Once upon a time there was"
        _, text = workflow.generate_text(reference, run.bundle, prompt)
        shown = prompt + text.decode("utf-8", errors="replace")
        log(f"generated through the C ABI: {shown!r}")
        log(f"library: {reference}")
    paths, report = render(matrix, [run.evidence_dir], REPORT_DIR, run.bundle)
    png = screenshot(paths.html, REPORT_DIR / "report.png")
    log(
        f"report: {paths.html} (also {paths.markdown.name}, {paths.json.name}"
        + (f", {png.name})" if png else ")")
    )
    log(summary_line(report))
    failed = [o for o in run.written if o.status in (Status.FAILED, Status.ERROR)]
    if failed:
        raise ChecksFailed(
            f"{len(failed)} check(s) failed: " + ", ".join(f"{o.cell}/{o.check}" for o in failed)
        )
    return paths.html


def bench(matrix: Matrix, platform_id: str, argv: Sequence[str], log: Log) -> None:
    from eliza.bench.workflow import parse_bench_args

    platform = matrix.platform(platform_id)
    can = workflow.capability(platform)
    if not can.can_build or not can.can_run:
        why = can.build_reason if not can.can_build else can.run_reason
        raise workflow.NotBuildableHere(f"{platform_id} cannot be benched on this host: {why}")
    opts = parse_bench_args(argv, workflow.tiny_bundle_default())
    bundle = (
        workflow.ensure_tiny_bundle()
        if opts.settings.bundle == workflow.tiny_bundle_default()
        else opts.settings.bundle
    )
    run = Run(
        matrix=matrix,
        log=log,
        bundle=bundle,
        prompts=opts.settings.prompts,
        bench_settings=settings_description(opts.settings),
    )
    try:
        built = workflow.build_cells(
            matrix.cells_of(platform_id), matrix, on_built=lambda b: log(workflow.describe_build(b))
        )
    except workflow.BUILD_ERRORS as exc:
        raise ChecksFailed(str(exc)) from exc
    outcomes = run_bench(run, platform, {b.cell_id: b.library for b in built}, None, argv)
    failed = [o for o in outcomes if o.status in (Status.FAILED, Status.ERROR)]
    if failed:
        raise ChecksFailed(
            "byte identity does not hold: " + "; ".join(f"{o.cell}/{o.check}: {o.reason}" for o in failed)
        )


def report(matrix: Matrix, argv: Sequence[str], log: Log) -> Path:
    parser = argparse.ArgumentParser(prog="nox -s report --")
    parser.add_argument(
        "evidence", nargs="*", type=Path, help=f"evidence directories (default: {EVIDENCE_DIR})"
    )
    parser.add_argument("--out", type=Path, default=REPORT_DIR)
    args = parser.parse_args(list(argv))
    dirs = args.evidence or [EVIDENCE_DIR]
    # The tiny bundle is deterministic: regenerating it lets a fresh report host judge
    # bundle-dependent evidence instead of calling it stale.
    paths, rep = render(matrix, dirs, args.out, workflow.ensure_tiny_bundle())
    log(f"report: {paths.html} (also {paths.markdown.name}, {paths.json.name})")
    log(summary_line(rep))
    return paths.html
