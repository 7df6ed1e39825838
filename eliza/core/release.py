"""What a release may ship (pure): which cells are candidates, the verdict on each from the
report and the library's bytes, the names of what a release writes, and its notes.

A cell ships only when every check of its default bundle is VERIFIED, no other check of
it says it is broken, and the library to package is byte for byte the one every record of
the cell names. Anything else refuses the cell, with one line per reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from eliza.core.evidence import SubjectRole
from eliza.core.matrix import Cell, Check, Matrix
from eliza.core.report.compare import Since
from eliza.core.report.model import Entry, Report, ShipView
from eliza.core.report.states import GridState

# Semantic versions without build metadata: the Conan reference's version and the archive names.
_VERSION = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$")
PACKAGE = "elizainference"
SUMS_FILE = "SHA256SUMS"
NOTES_FILE = "RELEASE-NOTES.md"
MANIFEST_FILE = "release.json"
# A check of another bundle than the default one may be short of VERIFIED only for want of
# hardware or of a host that can run it (the matrix says so: a real model is not decoded
# under an emulator); the release notes name each such entry.
_NOT_HERE_STATES = frozenset({GridState.NOT_RUNNABLE_HERE, GridState.DEVICE_GATED})


def version_problem(version: str, abi_version: int) -> str:
    """Why `version` cannot name a release of a library of this ABI version ("" when it can)."""
    found = _VERSION.match(version)
    if found is None:
        return (
            f"{version!r} is not a semantic version MAJOR.MINOR.PATCH[-PRERELEASE] (e.g. {abi_version}.0.0)"
        )
    if int(found.group(1)) != abi_version:
        return (
            f"{version}: the major version of a release is the library's ABI version, {abi_version} "
            f"(ELIZA_INFERENCE_ABI_VERSION); use {abi_version}.x.y, or bump the ABI first"
        )
    return ""


def archive_name(version: str, cell_id: str) -> str:
    return f"{PACKAGE}-{version}-{cell_id}.tar.gz"


def sbom_name(archive: str) -> str:
    return f"{archive}.cdx.json"


def provenance_name(archive: str) -> str:
    return f"{archive}.intoto.jsonl"


def candidates(matrix: Matrix, named: Sequence[str]) -> tuple[Cell, ...]:
    """The cells a release considers: those named, else every cell of the default build
    variant (a sanitizer build is a check's tool, never shipped). ValueError naming a cell
    that is unknown or of a build variant."""
    shippable = [c for c in matrix.cells if c.variant is None]
    if not named:
        return tuple(shippable)
    known = {c.id: c for c in matrix.cells}
    picked: list[Cell] = []
    for cell_id in named:
        cell = known.get(cell_id)
        if cell is None:
            raise ValueError(f"--cell {cell_id!r}: not a cell of {matrix.source}")
        if cell.variant is not None:
            raise ValueError(
                f"--cell {cell_id!r}: a {cell.variant.id} build is never shipped; "
                "name a cell of the default variant"
            )
        if cell not in picked:
            picked.append(cell)
    return tuple(picked)


class Verdict(StrEnum):
    SHIP = "ship"
    REFUSED = "refused"
    NOT_HERE = "not here"  # not built on this host and not buildable here: not a candidate here


@dataclass(frozen=True, kw_only=True)
class LibraryBytes:
    """The library a release would package: its path as shown, and its sha256 (None: absent)."""

    path: str
    sha256: str | None


@dataclass(frozen=True, kw_only=True)
class CellVerdict:
    cell: str
    verdict: Verdict
    reasons: tuple[str, ...] = ()  # why it is refused (or not here), one line each
    library: LibraryBytes | None = None
    verified_checks: tuple[str, ...] = ()
    # Checks of another bundle that are not VERIFIED for want of a host or device: "id: STATE (why)".
    not_verified: tuple[str, ...] = ()

    @property
    def library_sha256(self) -> str:
        """The sha256 of the library judged ("" when there was none)."""
        return self.library.sha256 if self.library and self.library.sha256 else ""

    def line(self) -> str:
        if self.verdict is Verdict.SHIP:
            sha = self.library_sha256
            extra = f"; not verified here: {'; '.join(self.not_verified)}" if self.not_verified else ""
            return (
                f"{self.cell}: ships ({len(self.verified_checks)} checks VERIFIED, "
                f"library sha256 {sha[:16]}…){extra}"
            )
        return f"{self.cell}: {self.verdict.value}: {'; '.join(self.reasons)}"


def ship_view(verdict: CellVerdict) -> ShipView:
    """The verdict as the report shows it: the same words the release prints."""
    return ShipView(
        cell=verdict.cell, verdict=verdict.verdict.value, line=verdict.line(), reasons=verdict.reasons
    )


def not_here_lines(verdicts: Sequence[CellVerdict], matrix: Matrix) -> list[str]:
    """One line per platform whose cells are not candidates on this host, with why."""
    by_platform: dict[str, list[CellVerdict]] = {}
    for verdict in verdicts:
        if verdict.verdict is Verdict.NOT_HERE:
            by_platform.setdefault(matrix.cell(verdict.cell).platform.id, []).append(verdict)
    return [
        f"not here: {platform} ({len(found)} cell(s)): {found[0].reasons[0]}"
        for platform, found in by_platform.items()
    ]


def _entry_text(entry: Entry) -> str:
    reason = f" ({entry.reason})" if entry.reason else ""
    return f"{entry.check}: {entry.state.label}{reason}"


def _named_hashes(entries: Iterable[Entry], cell_id: str) -> dict[str, list[str]]:
    """sha256 -> the checks whose record names it as this cell's library."""
    named: dict[str, list[str]] = {}
    for entry in entries:
        if entry.evidence is None:
            continue
        for subject in entry.evidence.subjects:
            if subject.role is SubjectRole.LIBRARY and subject.cell in ("", cell_id):
                named.setdefault(subject.sha256, []).append(entry.check)
    return named


def judge_cell(
    report: Report,
    cell: Cell,
    library: LibraryBytes,
    *,
    default_bundle: str,
    can_build: bool,
    build_reason: str,
    named: bool,
) -> CellVerdict:
    """The verdict on one cell. `named`: the user asked for it (--cell), so a cell without a
    library here is refused rather than left out when this host cannot build it, or when its
    platform's build is a slow one verify does not start."""
    if library.sha256 is None and not can_build:
        why = f"not built here, and this host cannot build it: {build_reason}"
        return CellVerdict(
            cell=cell.id, verdict=Verdict.REFUSED if named else Verdict.NOT_HERE, reasons=(why,)
        )
    if library.sha256 is None and cell.platform.slow_build and not named:
        build = f"nox -s build-{cell.platform.id}"
        why = f"not built here: a slow build verify does not start ({build}, then verify)"
        return CellVerdict(cell=cell.id, verdict=Verdict.NOT_HERE, reasons=(why,))
    if library.sha256 is None:
        why = (
            f"its library {library.path} does not exist: "
            f"build and verify it (nox -s verify -- --cell {cell.id})"
        )
        return CellVerdict(cell=cell.id, verdict=Verdict.REFUSED, reasons=(why,), library=library)
    row = next((r for r in report.rows if r.cell == cell.id), None)
    if row is None:
        return CellVerdict(cell=cell.id, verdict=Verdict.REFUSED, reasons=("the report has no row for it",))
    entries = [e for e in row.entries if e.state is not GridState.NOT_APPLICABLE]
    reasons: list[str] = []
    # The bytes first: a record that judged other bytes says nothing about these.
    for sha, checks in sorted(_named_hashes(entries, cell.id).items()):
        if sha != library.sha256:
            reasons.append(
                f"{library.path} has sha256 {library.sha256}, but the evidence of "
                f"{', '.join(sorted(set(checks)))} names {sha}"
            )
    verified: list[str] = []
    not_verified: list[str] = []
    for entry in entries:
        check = cell_check(cell, entry.check)
        if entry.state is GridState.VERIFIED:
            verified.append(entry.check)
        elif check is not None and check.bundle != default_bundle and entry.state in _NOT_HERE_STATES:
            not_verified.append(_entry_text(entry))
        else:
            reasons.append(_entry_text(entry))
    if not verified:
        reasons.append("no check of it is VERIFIED")
    if reasons:
        return CellVerdict(cell=cell.id, verdict=Verdict.REFUSED, reasons=tuple(reasons), library=library)
    return CellVerdict(
        cell=cell.id,
        verdict=Verdict.SHIP,
        library=library,
        verified_checks=tuple(verified),
        not_verified=tuple(not_verified),
    )


def cell_check(cell: Cell, check_id: str) -> Check | None:
    return next((c for c in cell.checks if c.id == check_id), None)


def sha256sums(files: Mapping[str, str]) -> str:
    """The SHA256SUMS text (sha256sum's format, `sha256sum -c` reads it), sorted by name."""
    return "".join(f"{sha}  {name}\n" for name, sha in sorted(files.items()))


@dataclass(frozen=True, kw_only=True)
class ShippedCell:
    cell: str
    archive: str
    archive_sha256: str
    archive_bytes: int
    library_sha256: str
    package_ref: str  # elizainference/V#rrev:package_id#prev
    not_verified: tuple[str, ...] = ()
    # `conan install --requires=<recipe ref>` plus these (the options that differ from the
    # defaults) gets this package on a host profile with `settings`
    install_arguments: tuple[str, ...] = ()
    settings: tuple[tuple[str, str], ...] = ()  # what selects the binary besides the options
    licenses: tuple[str, ...] = ()  # the package's own, as its SBOM's root component declares them

    @property
    def recipe_ref(self) -> str:
        return self.package_ref.split(":", 1)[0]

    @property
    def reference(self) -> str:
        """elizainference/V, without revisions: what a consumer asks for."""
        return self.recipe_ref.split("#", 1)[0]

    def install_command(self) -> str:
        return " ".join(
            ["conan install", f"--requires={self.reference}", *map(_quoted, self.install_arguments)]
        )

    def settings_text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.settings)


def _quoted(word: str) -> str:
    return f"'{word}'" if any(c in word for c in "*&;, ") else word


def manifest(
    *, version: str, commit: str, trust: str, shipped: Sequence[ShippedCell], refused: Sequence[CellVerdict]
) -> dict[str, object]:
    """release.json: what the release holds, for tools (the consumer test, CI)."""
    return {
        "version": version,
        "commit": commit,
        "trust": trust,
        "cells": [
            {
                "cell": s.cell,
                "archive": s.archive,
                "archive_sha256": s.archive_sha256,
                "library_sha256": s.library_sha256,
                "conan_package": s.package_ref,
                "conan_install": [f"--requires={s.reference}", *s.install_arguments],
                "conan_settings": dict(s.settings),
                "licenses": list(s.licenses),
                "not_verified_here": list(s.not_verified),
            }
            for s in shipped
        ],
        "refused": [{"cell": v.cell, "reasons": list(v.reasons)} for v in refused],
    }


def release_notes(
    *,
    version: str,
    commit: str,
    trust: str,
    shipped: Sequence[ShippedCell],
    refused: Sequence[CellVerdict],
    since: Since | None,
) -> str:
    """RELEASE-NOTES.md: regressions since the previous release first, then what ships
    (each archive and the library's sha256), what was refused and why, and what changed."""
    lines = [f"# {PACKAGE} {version}", "", f"Built from commit `{commit}`. Evidence trusted: {trust}.", ""]
    if since is not None:
        lines += [f"## Since {since.old} (commit `{since.old_commit[:12]}`)", "", since.summary(), ""]
        if since.regressions:
            lines += ["### Regressions", ""] + [f"- {c.describe()}" for c in since.regressions] + [""]
    else:
        lines += ["No previous release's report to compare with (`--compare OLD/report.json`).", ""]
    lines += ["## Shipped", ""]
    if shipped:
        lines += ["| cell | archive | library sha256 | archive bytes |", "|---|---|---|---|"]
        lines += [f"| {s.cell} | `{s.archive}` | `{s.library_sha256}` | {s.archive_bytes} |" for s in shipped]
        lines.append("")
        for s in shipped:
            lines += [f"- {s.cell}: not verified here: {item}" for item in s.not_verified]
        licenses = sorted({lic for s in shipped for lic in s.licenses})
        if licenses:
            lines += [
                "",
                f"License: {', '.join(licenses)} (`LICENSE` in every archive and package; the "
                "licenses of what each one carries under `licenses/`).",
            ]
        lines += [
            "",
            "A consumer gets a cell's package from the Conan remote with its own default "
            "profile on a host of the cell's settings (`-g CMakeDeps` or `-g PkgConfigDeps` for its build):",
            "",
        ]
        lines += [f"- {s.cell} ({s.settings_text() or 'any host'}): `{s.install_command()}`" for s in shipped]
    else:
        lines += ["Nothing."]
    lines.append("")
    if refused:
        lines += ["## Refused", ""] + [f"- {v.cell}: {'; '.join(v.reasons)}" for v in refused] + [""]
    if since is not None and (since.newly_verified or since.other or since.metrics):
        lines += ["## Other changes", ""]
        lines += [f"- {c.describe()}" for c in (*since.newly_verified, *since.other)]
        lines += [f"- {m.describe()}" for m in since.metrics]
        lines.append("")
    return "\n".join(lines)
