"""The abi check: a cell exports exactly the header's functions, its SONAME carries the
header's ABI version, its exported surface (symbols, the types they reach, the header's
constants) equals the released baseline of that version in native/abi, and equals the
platform's no-gate cell."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters.abi_tools import AbiToolMissing, abidiff, abidiff_surfaces, exported_symbols
from eliza.adapters.errors import ToolError
from eliza.app.checks.job import Job
from eliza.app.services.abi_files import baseline_of, constants_text, surface_of, versions_present
from eliza.app.services.baseline import baseline_root
from eliza.app.services.clock import Stopwatch
from eliza.app.services.run import Run
from eliza.core.c_abi import abi_declarations, abi_version, header_functions
from eliza.core.layout import public_header, public_headers_dir
from eliza.core.matrix import Cell
from eliza.core.outcome import CheckOutcome, SubCheck, from_subchecks, outcome
from eliza.core.target import abidiff_reads, library_file
from eliza.formats.abi_xml import AbiXmlError, architecture_of, soname_of
from eliza.formats.files import atomic_write_text

_REGENERATE = (
    "bump ELIZA_INFERENCE_ABI_VERSION in the public header and regenerate the baseline (nox -s abi-baseline)"
)


class AbiToolFailed(ToolError):
    """abidiff itself failed (a corrupt baseline, a crash): an error, not an ABI verdict."""


def _unified(old: Path, new_text: str, new_name: str, context: int) -> str:
    return "".join(
        difflib.unified_diff(
            old.read_text(encoding="utf-8").splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            old.name,
            new_name,
            n=context,
        )
    )


def _released(
    library: Path, surface: Path, repo: Path, version: str, header_text: str
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
    surface_text = surface.read_text(encoding="utf-8")
    released_arch = architecture_of(baseline.surface.read_text(encoding="utf-8"))
    arch = architecture_of(surface_text)
    if arch != released_arch:
        # One released baseline, taken on the host's architecture: another architecture's
        # types differ in size by nature, so that comparison would say nothing of the ABI.
        return [], {"released_abi": f"not compared: the baseline is of {released_arch}, this build {arch}"}
    symbols = exported_symbols(library)
    released = baseline.exports.read_text(encoding="utf-8").split()
    added = sorted(set(symbols) - set(released))
    removed = sorted(set(released) - set(symbols))
    diff = abidiff_surfaces(baseline.surface, surface)
    if diff.tool_failed:
        raise AbiToolFailed(
            f"abidiff {baseline.surface} {surface} failed ({diff.exit_code}): {diff.report[-1500:]}"
        )
    # abidiff calls some changes harmless (an enumerator added, a typedef renamed) and exits
    # 0; the surface is deterministic, so any textual difference is a difference too.
    text_diff = _unified(baseline.surface, surface_text, "this build", 2)
    constants_diff = _unified(baseline.constants, constants_text(header_text), "the header", 0)
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
        SubCheck(
            name=f"the public surface equals the released ABI {version} byte for byte",
            ok=not text_diff,
            detail=f"differs; {_REGENERATE}" if text_diff else "identical",
        ),
        SubCheck(
            name=f"the header's ELIZA_* constants equal the released ABI {version}",
            ok=not constants_diff,
            detail=f"{' '.join(constants_diff.split())}; {_REGENERATE}" if constants_diff else "identical",
        ),
    ]
    details: dict[str, object] = {
        "released_abi": version,
        "released_abi_diff": diff.report or text_diff or constants_diff or "(no differences)",
    }
    return subs, details


@dataclass(frozen=True, kw_only=True)
class PreM3:
    """The declared baseline's build, for the comparison M3's "no consumer changes" asks
    for: `library` None when it did not build."""

    commit: str
    library: Path | None
    header: Path


def _pre_m3(library: Path, pre: PreM3, header_text: str) -> tuple[list[SubCheck], dict[str, object]]:
    """The cell's exports, the header's declarations and its status constants against the
    pre-M3 library's and header's. The seam doc puts the seam entirely below the ABI
    surface, so it allows no difference at all. (The pre-M3 library carries no debug
    information, so its types are compared through the header that declared them.)"""
    label = f"the pre-M3 library (baseline {pre.commit[:12]})"
    if pre.library is None or not pre.library.is_file():
        detail = f"baseline {pre.commit[:12]} did not build (see this run's log)"
        return [SubCheck(name=f"{label} was built to compare with", ok=False, detail=detail)], {}
    if not pre.header.is_file():
        detail = f"no header at {pre.header}"
        return [SubCheck(name=f"{label}'s header is here to compare with", ok=False, detail=detail)], {}
    mine, old = exported_symbols(library), exported_symbols(pre.library)
    added, removed = sorted(set(mine) - set(old)), sorted(set(old) - set(mine))
    old_header = pre.header.read_text(encoding="utf-8")
    declared = "".join(
        difflib.unified_diff(
            [f"{d}\n" for d in abi_declarations(old_header)],
            [f"{d}\n" for d in abi_declarations(header_text)],
            "pre-M3 header",
            "the header",
            n=1,
        )
    )
    constants = "".join(
        difflib.unified_diff(
            constants_text(old_header).splitlines(keepends=True),
            constants_text(header_text).splitlines(keepends=True),
            "pre-M3 header",
            "the header",
            n=0,
        )
    )
    subs = [
        SubCheck(
            name=f"exports equal {label}'s",
            ok=not (added or removed),
            detail=f"added: {added}; removed: {removed}",
        ),
        SubCheck(
            name="the header declares what the pre-M3 header declared (functions, types, constants)",
            ok=not declared,
            detail=f"{len(abi_declarations(header_text))} declarations identical"
            if not declared
            else "differs",
        ),
        SubCheck(
            name="the header's ELIZA_* constants equal the pre-M3 header's",
            ok=not constants,
            detail=" ".join(constants.split()) if constants else "identical",
        ),
    ]
    details: dict[str, object] = {
        "baseline_commit": pre.commit,
        "pre_m3_surface": {
            "baseline": pre.commit,
            "library": str(pre.library),
            "identical": all(s.ok for s in subs),
            "exports_added": added,
            "exports_removed": removed,
            "declarations_diff": declared or "(identical)",
            "constants_diff": constants or "(identical)",
        },
    }
    return subs, details


def abi_outcome(
    cell: Cell, check_id: str, library: Path, reference: Path | None, repo: Path, pre_m3: PreM3 | None = None
) -> CheckOutcome:
    watch = Stopwatch()
    header_text = public_header(repo).read_text(encoding="utf-8")
    version = abi_version(header_text)
    symbols = exported_symbols(library, cell.platform)
    expected = header_functions(header_text)
    subs = [
        SubCheck(
            name="exports equal the header's functions",
            ok=set(symbols) == expected,
            detail=f"extra: {sorted(set(symbols) - expected)}; missing: {sorted(expected - set(symbols))}",
        )
    ]
    details: dict[str, object] = {"exports": symbols, "abi_version": version}
    if not abidiff_reads(cell.platform):
        details["abidiff"] = f"not run: abidiff reads ELF only, and {cell.platform.id} builds Mach-O"
        return from_subchecks(cell.id, check_id, subs, watch.span(), artifacts=(library,), details=details)
    try:
        surface = library.parent / "abi-surface.xml"
        text = surface_of(library)
        atomic_write_text(surface, text)
        soname = soname_of(text)
        want = f"{library_file(cell.platform)}.{version}"
        subs.append(
            SubCheck(
                name=f"SONAME carries ABI {version}",
                ok=soname == want,
                detail=f"SONAME {soname!r}, want {want!r}",
            )
        )
        released_subs, released_details = _released(library, surface, repo, version, header_text)
        subs += released_subs
        details |= released_details
        if pre_m3 is not None:
            pre_subs, pre_details = _pre_m3(library, pre_m3, header_text)
            subs += pre_subs
            details |= pre_details
        details["compared_with_no_gate"] = reference is not None and reference != library
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
                    ok=symbols == exported_symbols(reference, cell.platform),
                    detail=str(reference),
                )
            )
            details["abi_diff"] = diff.report or "(no differences)"
            details["abidiff_exit"] = diff.exit_code
    except (AbiToolMissing, AbiToolFailed, AbiXmlError) as exc:
        return outcome(cell.id, check_id, ran=0, passed=0, span=watch.span(), reason=str(exc), error=True)
    return from_subchecks(cell.id, check_id, subs, watch.span(), artifacts=(library,), details=details)


def run(job: Job, evidence: Run) -> list[CheckOutcome]:
    """Each cell against the released ABI, a gated cell against its platform's no-gate
    cell (the step's reference), and an x86-64 release cell against the pre-M3 library."""
    return [
        abi_outcome(
            cell,
            check.id,
            job.library(cell),
            job.libraries.get(step.needs[0]) if step.needs else None,
            evidence.project.repo,
            PreM3(
                commit=step.baseline_commit,
                library=job.baselines.get(step.baseline_commit),
                header=public_header(baseline_root(step.baseline_commit) / "src"),
            )
            if step.baseline_commit
            else None,
        )
        for step, (cell, check) in zip(job.steps, job.pairs(), strict=True)
    ]
