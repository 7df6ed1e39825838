"""The abi check: a cell exports exactly the header's functions, its SONAME carries the
header's ABI version, its exported surface (symbols and the types they reach) equals the
released baseline of that version in native/abi, and equals the platform's no-gate cell."""

from __future__ import annotations

from pathlib import Path

from eliza.adapters.abi_tools import AbiToolMissing, abidiff, abidiff_surfaces, exported_symbols
from eliza.app.abi_baseline import baseline_of, surface_of, versions_present
from eliza.app.checks.common import Stopwatch
from eliza.core.c_abi import abi_version, header_functions
from eliza.core.layout import LIBRARY_NAME, public_header, public_headers_dir
from eliza.core.matrix import Cell
from eliza.core.outcome import CheckOutcome, SubCheck, from_subchecks, outcome
from eliza.formats.abi_xml import soname_of
from eliza.formats.files import atomic_write_text

_REGENERATE = (
    "bump ELIZA_INFERENCE_ABI_VERSION in the public header and regenerate the baseline (nox -s abi-baseline)"
)


def _released(
    library: Path, surface: Path, repo: Path, version: str
) -> tuple[list[SubCheck], dict[str, object]]:
    """The library against the released ABI of the header's version."""
    baseline = baseline_of(repo, version)
    if not baseline.present:
        have = ", ".join(f"abi-{v}" for v in versions_present(repo)) or "nothing"
        detail = (
            f"native/abi holds no baseline of ABI {version} (it holds {have}): after a deliberate "
            "version bump, regenerate it with nox -s abi-baseline"
        )
        return [SubCheck(name=f"released ABI {version} baseline exists", ok=False, detail=detail)], {}
    symbols = exported_symbols(library)
    released = baseline.exports.read_text(encoding="utf-8").split()
    added = sorted(set(symbols) - set(released))
    removed = sorted(set(released) - set(symbols))
    diff = abidiff_surfaces(baseline.surface, surface)
    changed = bool(added or removed) or diff.exit_code != 0
    subs = [
        SubCheck(
            name=f"exports equal the released ABI {version}",
            ok=not (added or removed),
            detail=f"added: {added}; removed: {removed}" + (f"; {_REGENERATE}" if added or removed else ""),
        ),
        SubCheck(
            name=f"abidiff against the released ABI {version} reports no change",
            ok=diff.exit_code == 0,
            detail=f"abidiff exit {diff.exit_code}" + (f"; {_REGENERATE}" if diff.exit_code else ""),
        ),
    ]
    details: dict[str, object] = {
        "released_abi": version,
        "released_abi_diff": diff.report or "(no differences)",
        "released_abi_changed": changed,
    }
    return subs, details


def abi_outcome(cell: Cell, check_id: str, library: Path, reference: Path | None, repo: Path) -> CheckOutcome:
    watch = Stopwatch()
    header_text = public_header(repo).read_text(encoding="utf-8")
    version = abi_version(header_text)
    symbols = exported_symbols(library)
    expected = header_functions(header_text)
    subs = [
        SubCheck(
            name="exports equal the header's functions",
            ok=set(symbols) == expected,
            detail=f"extra: {sorted(set(symbols) - expected)}; missing: {sorted(expected - set(symbols))}",
        )
    ]
    details: dict[str, object] = {"exports": symbols, "abi_version": version}
    try:
        surface = library.parent / "abi-surface.xml"
        text = surface_of(library)
        atomic_write_text(surface, text)
        soname = soname_of(text)
        want = f"{LIBRARY_NAME}.{version}"
        subs.append(
            SubCheck(
                name=f"SONAME carries ABI {version}",
                ok=soname == want,
                detail=f"SONAME {soname!r}, want {want!r}",
            )
        )
        released_subs, released_details = _released(library, surface, repo, version)
        subs += released_subs
        details |= released_details
        if reference is not None and reference != library:
            diff = abidiff(reference, library, public_headers_dir(repo))
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
    except AbiToolMissing as exc:
        return outcome(cell.id, check_id, ran=0, passed=0, span=watch.span(), reason=str(exc), error=True)
    return from_subchecks(cell.id, check_id, subs, watch.span(), artifacts=(library,), details=details)
