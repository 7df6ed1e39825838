"""`nox -s build-<platform>[.<gates>]`: builds the cells (a no-op when nothing changed) and
records their build and abi evidence, so the report shows them built without a verify.
One line per cell, then one line summing up the evidence; the checks' own lines are in
the evidence files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from eliza.app.context import Context
from eliza.app.errors import BuildFailed, ChecksFailed
from eliza.app.executor import Builder, execute
from eliza.app.options import Parser, strict_requested
from eliza.app.services.build import PREBUILT_VARIABLE, describe_build, preflight
from eliza.app.services.builders import ConanBuilder, PrebuiltBuilder
from eliza.app.services.built import BuiltCell
from eliza.app.services.bundle import ensure_tiny_bundle
from eliza.app.services.exclusive import exclusive
from eliza.app.services.recording import ArtifactHashes
from eliza.app.services.run import start_run
from eliza.app.verification import VerifyOptions, choose_baseline, plan_facts
from eliza.core.cell_id import CellId
from eliza.core.matrix import CheckKind
from eliza.core.verify_plan import Selection, plan

BUILD_KINDS = frozenset({CheckKind.BUILD, CheckKind.ABI})


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    cells: tuple[CellId, ...]
    strict: bool = False
    verbose: bool = False


def parse_options(argv: Sequence[str], env: Mapping[str, str], cells: Sequence[CellId]) -> BuildOptions:
    args = Parser("nox -s build-* --", skippable=True).parse_args(list(argv))
    return BuildOptions(cells=tuple(cells), strict=strict_requested(argv, env), verbose=args.verbose)


def run(options: BuildOptions, ctx: Context) -> list[BuiltCell]:
    matrix = ctx.matrix
    prebuilt = ctx.project.env.get(PREBUILT_VARIABLE) == "1"
    if not prebuilt:
        # What cannot be built here ("needs Xcode") ends before waiting for another session.
        preflight(tuple(matrix.cell(c) for c in options.cells))
    with exclusive("nox -s build-*", ctx.log):
        quiet: list[str] = []
        evidence = start_run(ctx.project, matrix, ctx.host, quiet.append, bundle=ensure_tiny_bundle())
        facts = plan_facts(ctx, evidence, ArtifactHashes(repo=ctx.project.repo))
        # The abi check compares x86-64 cells with the declared pre-M3 baseline's library,
        # as verify does, so both record the same evidence.
        baseline = choose_baseline(VerifyOptions(), matrix)
        selection = Selection(
            cells=frozenset(options.cells),
            kinds=BUILD_KINDS,
            build_all=True,
            baseline_commit=baseline.commit,
            no_baseline_reason=baseline.no_baseline_reason,
        )
        build_plan = plan(matrix, facts, selection)
        builder: Builder = (
            PrebuiltBuilder(ctx=ctx) if prebuilt else ConanBuilder(ctx=ctx, verbose=options.verbose)
        )
        done = execute(build_plan, evidence, builder, ctx.capabilities(), describe_build=describe_build)
        for line in quiet:
            if not line.startswith("  "):  # per-check lines are in the evidence; anything else is news
                ctx.log(line)
        built = list(done.built.values())
        llama_builds = sum(b.llama_built_now for b in built)
        logs = ctx.project.build_root / "<platform>" / "<gates>" / "conan-build.log"
        ctx.log(
            f"{len(built)} cell(s) built; llama.cpp built {llama_builds} time(s), reused "
            f"{len(built) - llama_builds} time(s); tool output in {logs}"
        )
        ctx.log(f"evidence: {done.summary()} in {evidence.evidence_dir}")
        if done.build_failures:
            cell, why = next(iter(done.build_failures.items()))
            raise BuildFailed(f"{cell}: {why}")
        if done.failed:
            raise ChecksFailed(
                f"{len(done.failed)} check(s) failed: "
                + "; ".join(f"{o.cell}/{o.check}: {o.reason[:300]}" for o in done.failed)
            )
        return built
