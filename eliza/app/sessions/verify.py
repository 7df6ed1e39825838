"""`nox -s verify`: every check this host can run, then the report (eliza.app.verification);
`-- --dry-run` prints the plan instead and touches nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from eliza.app.context import Context
from eliza.app.options import strict_requested
from eliza.app.services.lab import lab_from
from eliza.app.verification import VerifyOptions, VerifyResult, parser, verify
from eliza.core.cell_id import CellId, CellIdError
from eliza.core.matrix import Matrix
from eliza.core.matrix_rules import unknown_cell
from eliza.core.sessions import platform_build_cells


def parse_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> VerifyOptions:
    """The options of `argv` (and ELIZA_STRICT), checked against the matrix; UsageError
    names the mistake."""
    p = parser()
    args = p.parse_args(list(argv))
    known = {c.id for c in matrix.cells}
    unknown = [c for c in args.cell if c not in known]
    if unknown:
        p.error(unknown_cell(matrix, unknown[0], "--cell"))
    if args.json and not args.dry_run:
        p.error("--json goes with --dry-run (the plan as JSON)")
    if args.rounds is not None and not 3 <= args.rounds <= 50:
        p.error(f"--rounds {args.rounds}: must be between 3 and 50")
    if args.jobs is not None and not 1 <= args.jobs <= 256:
        p.error(f"--jobs {args.jobs}: must be between 1 and 256")
    platforms = {pl.id for pl in matrix.platforms}
    for pid in args.platform:
        if pid not in platforms:
            p.error(
                f"--platform {pid}: not a platform of the matrix (one of: {', '.join(sorted(platforms))})"
            )
    try:
        cells = tuple(CellId.parse(c) for c in args.cell)
    except CellIdError as exc:
        p.error(f"--cell {exc}")
    cells += tuple(c.ref for pid in args.platform for c in platform_build_cells(matrix, matrix.platform(pid)))
    return VerifyOptions(
        cells=cells,
        rerun=args.rerun,
        baseline=args.baseline,
        bench=not args.no_bench,
        dry_run=args.dry_run,
        json=args.json,
        strict=strict_requested(argv, env),
        verbose=args.verbose,
        lab=lab_from(args.devices, env, matrix),
        rounds=args.rounds,
        perf_reference=args.perf_reference,
        jobs=args.jobs,
    )


def run(options: VerifyOptions, ctx: Context) -> VerifyResult:
    return verify(options, ctx)
