"""The abi check: a cell exports exactly the header's functions, and neither its export
list nor abidiff (types of the public header) differ from the platform's no-gate cell."""

from __future__ import annotations

from pathlib import Path

from eliza.adapters.abi_tools import AbiToolMissing, abidiff, exported_symbols
from eliza.app.checks.common import Stopwatch
from eliza.core.c_abi import header_functions
from eliza.core.layout import public_header, public_headers_dir
from eliza.core.matrix import Cell
from eliza.core.outcome import CheckOutcome, SubCheck, from_subchecks, outcome


def abi_outcome(cell: Cell, check_id: str, library: Path, reference: Path | None, repo: Path) -> CheckOutcome:
    """Exports of this cell = the header's functions; abidiff against the no-gate cell."""
    watch = Stopwatch()
    symbols = exported_symbols(library)
    expected = header_functions(public_header(repo).read_text())
    subs = [
        SubCheck(
            name="exports equal the header's functions",
            ok=set(symbols) == expected,
            detail=f"extra: {sorted(set(symbols) - expected)}; missing: {sorted(expected - set(symbols))}",
        )
    ]
    details: dict[str, object] = {"exports": symbols}
    if reference is not None and reference != library:
        try:
            diff = abidiff(reference, library, public_headers_dir(repo))
        except AbiToolMissing as exc:
            return outcome(cell.id, check_id, ran=0, passed=0, span=watch.span(), reason=str(exc), error=True)
        subs.append(
            SubCheck(
                name="abidiff vs the no-gate cell reports no change",
                ok=diff.exit_code == 0,
                detail=f"abidiff exit {diff.exit_code}",
            )
        )
        subs.append(
            SubCheck(
                name="export list equals the no-gate cell's",
                ok=symbols == exported_symbols(reference),
                detail=str(reference),
            )
        )
        details["abi_diff"] = diff.report or "(no differences)"
        details["abidiff_exit"] = diff.exit_code
    return from_subchecks(cell.id, check_id, subs, watch.span(), artifacts=(library,), details=details)
