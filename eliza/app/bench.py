"""`nox -s bench-<platform>`: the byte-identity diffs of a platform's cells and the
seam-overhead ratio, with the options of eliza.app.bench_options."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from eliza.app.bench_options import options_description, parse_bench_args
from eliza.app.build import BUILD_ERRORS, build_cells, describe_build
from eliza.app.bundle import ensure_tiny_bundle, tiny_bundle_default
from eliza.app.checks.byte_identity import IDENTITY_KINDS, run_bench
from eliza.app.errors import NotHere
from eliza.app.exclusive import exclusive
from eliza.app.project import capability, current, host_facts
from eliza.app.run import start_run
from eliza.app.verify import ChecksFailed
from eliza.core.evidence import Status
from eliza.core.matrix import Matrix

Log = Callable[[str], None]


def bench(matrix: Matrix, platform_id: str, argv: Sequence[str], log: Log) -> None:
    project = current()
    # Options first: a typo ends here, before anything is built or any evidence is touched.
    opts = parse_bench_args(
        argv,
        default_bundle=tiny_bundle_default(),
        repo=project.repo,
        default_baseline=matrix.baseline.ref if matrix.baseline else None,
    )
    platform = matrix.platform(platform_id)
    can = capability(platform)
    if not can.can_build or not can.can_run:
        why = can.build_reason if not can.can_build else can.run_reason
        raise NotHere(f"{platform_id} cannot be benched on this host: {why}")
    with exclusive(f"nox -s bench-{platform_id}", log):
        bundle = (
            ensure_tiny_bundle() if opts.settings.bundle == tiny_bundle_default() else opts.settings.bundle
        )
        run = start_run(
            project,
            matrix,
            host_facts(),
            log,
            bundle=bundle,
            prompts=opts.settings.prompts,
            bench_settings=options_description(opts, project.env),
        )
        try:
            built = build_cells(
                # cells without a byte-identity check (a sanitizer variant's) are not benched
                tuple(
                    c for c in matrix.cells_of(platform_id) if any(k.kind in IDENTITY_KINDS for k in c.checks)
                ),
                matrix,
                echo=opts.verbose,
                on_built=lambda b: log(describe_build(b)),
                on_progress=None if opts.verbose else log,
            )
        except BUILD_ERRORS as exc:
            raise ChecksFailed(str(exc)) from exc
        outcomes = run_bench(run, platform, {b.cell_id: b.library for b in built}, opts)
        failed = [o for o in outcomes if o.status in (Status.FAILED, Status.ERROR)]
        if failed:
            raise ChecksFailed(
                "byte identity does not hold: " + "; ".join(f"{o.cell}/{o.check}: {o.reason}" for o in failed)
            )
