"""`nox -s abi-baseline`: regenerates native/abi, the released ABI's baseline, from the
no-gate build, after a deliberate bump of ELIZA_INFERENCE_ABI_VERSION."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from eliza.app.context import Context
from eliza.app.errors import NotHere
from eliza.app.options import Parser
from eliza.app.services.abi_files import AbiBaseline, write_baseline
from eliza.app.services.build import build_cells, describe_build
from eliza.core.matrix import Matrix

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class AbiBaselineOptions:
    force: bool = False


def parse_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> AbiBaselineOptions:
    parser = Parser("nox -s abi-baseline --")
    parser.add_argument(
        "--force", action="store_true", help="rewrite the baseline of an ABI version that was not bumped"
    )
    args = parser.parse_args(list(argv))
    return AbiBaselineOptions(force=args.force)


def run(options: AbiBaselineOptions, ctx: Context) -> AbiBaseline:
    """`nox -s abi-baseline`: builds the no-gate cell of the first platform buildable here
    and writes native/abi from it."""
    matrix, log = ctx.matrix, ctx.log
    cell = next(
        (
            c
            for p in matrix.platforms
            if p.os == "linux" and ctx.capability(p).can_build and not p.slow_build
            for c in matrix.cells_of(p.id)
            if c.is_reference
        ),
        None,
    )
    if cell is None:
        raise NotHere(
            "no fast Linux platform with a no-gate cell can be built here to take the ABI baseline from"
        )
    [built] = build_cells((cell,), matrix, echo=False, on_built=lambda b: log(describe_build(b)))
    target, changed = write_baseline(ctx.project.repo, built.library, force=options.force)
    what = "written" if changed else "unchanged"
    log(f"ABI {target.version} baseline from {cell.id} {what}: {', '.join(str(p) for p in target.files)}")
    return target
