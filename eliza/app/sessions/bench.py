"""`nox -s bench-<platform>`: the byte-identity diffs of a platform's cells, the
seam-overhead ratio and the drafter speedup, always measured (fresh evidence is no reason
to skip a measurement), with the options of eliza.app.services.bench_options."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from eliza.adapters import proc
from eliza.app.context import Context
from eliza.app.errors import ChecksFailed, NotHere, UsageError
from eliza.app.executor import Execution, execute
from eliza.app.options import strict_requested
from eliza.app.project import current
from eliza.app.services import lab as lab_service
from eliza.app.services.baseline import BaselineError, resolve_commit
from eliza.app.services.bench_options import BenchOptions, options_description, parse_bench_args
from eliza.app.services.build import describe_build
from eliza.app.services.builders import ConanBuilder
from eliza.app.services.bundle import ensure_tiny_bundle, tiny_bundle_default
from eliza.app.services.exclusive import exclusive
from eliza.app.services.recording import ArtifactHashes
from eliza.app.services.run import Run, start_run
from eliza.app.verification import plan_facts, print_plan
from eliza.core.lab import Lab
from eliza.core.matrix import Matrix
from eliza.core.suite import device_environment
from eliza.core.verify_plan import IDENTITY_KINDS, Selection, VerifyPlan, plan

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class BenchSessionOptions:
    platform: str
    bench: BenchOptions
    baseline_given: bool = False  # --baseline on the command line (else the matrix's)
    lab: Lab | None = None  # --devices / ELIZA_DEVICES
    strict: bool = False


def parse_options(
    argv: Sequence[str], env: Mapping[str, str], matrix: Matrix, platform_id: str
) -> BenchSessionOptions:
    """Options first: a typo ends here, before anything is built or any evidence is touched."""
    opts = parse_bench_args(
        argv,
        default_bundle=tiny_bundle_default(),
        repo=current().repo,
        default_baseline=matrix.baseline.ref if matrix.baseline else None,
    )
    given = any(a == "--baseline" or a.startswith("--baseline=") for a in argv)
    return BenchSessionOptions(
        platform=platform_id,
        bench=opts,
        baseline_given=given,
        lab=lab_service.lab_from(opts.devices, env, matrix),
        strict=strict_requested(argv, env),
    )


def run(options: BenchSessionOptions, ctx: Context) -> Execution | None:
    ctx = lab_service.with_lab(ctx, options.lab, strict=options.strict)
    matrix, log, project = ctx.matrix, ctx.log, ctx.project
    opts, platform_id = options.bench, options.platform
    commit = None
    no_baseline = opts.no_baseline_reason
    if opts.baseline is not None:
        try:
            commit = resolve_commit(opts.baseline)
        except BaselineError as exc:
            if options.baseline_given:  # --baseline REF: the user's mistake
                raise UsageError(str(exc)) from None
            # the declared one, missing from a shallow clone: not run, and said
            no_baseline = f"the declared baseline {opts.baseline[:12]} is not in this clone: {exc}"
    platform = matrix.platform(platform_id)
    can = ctx.capability(platform)
    if not can.can_build or not can.can_run:
        why = can.build_reason if not can.can_build else can.run_reason
        raise NotHere(f"{platform_id} cannot be benched on this host: {why}")
    # cells without a byte-identity check (a sanitizer variant's) are not benched
    cells = frozenset(
        c.ref for c in matrix.cells_of(platform_id) if any(k.kind in IDENTITY_KINDS for k in c.checks)
    )
    selection = Selection(
        cells=cells,
        rerun=True,
        kinds=IDENTITY_KINDS,
        build_all=True,
        # --bundle, --prompts and the sizes stand for the first bundle's checks
        bundles=frozenset({matrix.default_bundle.id}),
        baseline_commit=commit,
        no_baseline_reason=no_baseline,
    )

    def planned(bundle_ready: bool) -> tuple[VerifyPlan, Run]:
        bundle = opts.settings.bundle
        if bundle_ready and bundle == tiny_bundle_default():
            bundle = ensure_tiny_bundle()
        run = start_run(
            project,
            matrix,
            ctx.host,
            log,
            bundle=bundle,
            prompts=opts.settings.prompts,
            bench_settings=options_description(opts, project.env),
        )
        facts = plan_facts(ctx, run, ArtifactHashes(repo=project.repo))
        return plan(matrix, facts, selection), run

    if opts.dry_run:
        bench_plan, _ = planned(bundle_ready=False)
        print_plan(bench_plan, as_json=opts.json)
        return None
    with exclusive(f"nox -s bench-{platform_id}", log):
        bench_plan, run = planned(bundle_ready=True)
        run.device_facts = lab_service.device_facts(ctx)
        with proc.children_environment(device_environment(ctx.host, {})):
            done = execute(
                bench_plan,
                run,
                ConanBuilder(ctx=ctx, verbose=opts.verbose),
                ctx.capabilities(),
                bench=opts,
                describe_build=describe_build,
                devices=lab_service.device_targets(ctx),
            )
        if done.failed:
            raise ChecksFailed(
                "byte identity does not hold: "
                + "; ".join(f"{o.cell}/{o.check}: {o.reason}" for o in done.failed)
            )
        return done
