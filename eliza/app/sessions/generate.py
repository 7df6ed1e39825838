"""`nox -s generate -- [--cell ID] [--max-tokens N] [PROMPT...]`: greedy text from the real
model's bundle (matrix.yaml `bundles`: Gemma 3 270M), or --bundle, through the C ABI of a
built cell."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters.ffi import ElizaError, LibraryLoadError
from eliza.app.context import Context
from eliza.app.errors import Failed, NotHere, UsageError
from eliza.app.options import Parser, positive
from eliza.app.project import capability
from eliza.app.services.bench_options import check_bundle
from eliza.app.services.build import build_cells
from eliza.app.services.bundle import ensure_bundle, generate_text, sample_bundle
from eliza.core.matrix import Matrix
from eliza.core.matrix_rules import unknown_cell

Log = Callable[[str], None]
DEFAULT_PROMPT = "The capital of France is"


def default_cell(matrix: Matrix) -> str:
    """The first no-gate cell this host can build and run (the reference platform's)."""
    for cell in matrix.cells:
        can = capability(cell.platform)
        if not cell.gates and can.can_build and can.can_run:
            return cell.id
    raise NotHere(f"no no-gate cell of {matrix.source} can be built and run on this host")


@dataclass(frozen=True, kw_only=True)
class GenerateOptions:
    cell: str | None
    max_tokens: int
    bundle: Path | None
    prompt: str
    verbose: bool = False


def parse_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> GenerateOptions:
    parser = Parser("nox -s generate --", "greedy generation through the C ABI", skippable=True)
    parser.add_argument(
        "--cell", help="the cell whose library generates (default: the first no-gate cell that runs here)"
    )
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens to generate at most")
    parser.add_argument(
        "--bundle",
        type=Path,
        help=f"a bundle directory (default: the {sample_bundle(matrix).id} bundle, assembled in the cache)",
    )
    parser.add_argument("prompt", nargs="*", help=f"the prompt (default: {DEFAULT_PROMPT!r})")
    args = parser.parse_args(list(argv))
    positive("--max-tokens", args.max_tokens)
    if args.cell is not None and args.cell not in {c.id for c in matrix.cells}:
        raise UsageError(unknown_cell(matrix, args.cell, "--cell"))
    if args.bundle is not None:
        check_bundle(args.bundle)
    return GenerateOptions(
        cell=args.cell,
        max_tokens=args.max_tokens,
        bundle=args.bundle,
        prompt=" ".join(args.prompt) or DEFAULT_PROMPT,
        verbose=args.verbose,
    )


def run(options: GenerateOptions, ctx: Context) -> str:
    matrix, log = ctx.matrix, ctx.log
    cell = matrix.cell(options.cell or default_cell(matrix))
    can = capability(cell.platform)
    if not can.loads_in_process:
        # Generation loads the library into this process: a cross-built or device-only
        # library cannot be (its run-time checks go through `nox -s verify`).
        raise NotHere(f"generate: {cell.id}'s library cannot be loaded here: {can.in_process_reason()}")
    built = build_cells((cell,), matrix, echo=options.verbose, on_progress=None if options.verbose else log)[
        0
    ]
    bundle = options.bundle or ensure_bundle(matrix, sample_bundle(matrix))
    try:
        tokens, text = generate_text(built.library, bundle, options.prompt, options.max_tokens)
    except ElizaError as exc:  # the library refused this input (prompt, bundle, ELIZA_* variables)
        raise UsageError(f"generate: {exc.message}") from None
    except LibraryLoadError as exc:
        raise Failed(f"generate: {exc}") from None
    log(f"library: {built.library}")
    log(f"bundle: {bundle}")
    log(f"{len(tokens)} tokens generated (greedy)")
    return options.prompt + text.decode("utf-8", errors="replace")
