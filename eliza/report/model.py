"""The verifiability report as a pure evaluation of evidence against the matrix.

Nothing here reads files, the environment or the clock: the caller supplies the matrix,
the loaded evidence, the current fingerprint of every (cell, check), what this host can
build and run, a way to check artifact hashes, and the header facts. The result is a
frozen `Report` that the renderers turn into HTML, Markdown and JSON.

The report claims nothing without evidence: a grid entry is VERIFIED only from a record
that passed, ran something, passed everything it ran, is fresh for the current inputs,
and whose artifacts present here still hash as recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any

from eliza.evidence import (
    SCHEMA_VERSION as EVIDENCE_SCHEMA_VERSION,
)
from eliza.evidence import (
    Artifact,
    Counts,
    EvidenceRecord,
    HostInfo,
    InputFingerprint,
    LoadedRecord,
    Status,
)
from eliza.matrix.model import Cell, Check, CheckKind, DeviceGatedItem, Matrix, Platform, Requirement

REPORT_SCHEMA_VERSION = 1

# Run requirements that no CI runner or dev box here provides by default; a platform that
# needs one of them to run is what the device-gated table is about.
DEVICE_REQUIREMENTS: frozenset[Requirement] = frozenset(
    {Requirement.NVIDIA_GPU, Requirement.ANDROID_DEVICE, Requirement.APPLE_SILICON, Requirement.IOS_DEVICE}
)

_LINUX_X64_ARCHES = frozenset({"x86_64", "amd64", "x64"})


class GridState(StrEnum):
    VERIFIED = "verified"
    FAILED = "failed"
    STALE = "stale"
    NOT_RUN = "not-run"
    NOT_BUILDABLE_HERE = "not-buildable-here"
    NOT_RUNNABLE_HERE = "not-runnable-here"
    DEVICE_GATED = "device-gated"
    INVALID = "invalid"
    NOT_APPLICABLE = "n/a"

    @property
    def label(self) -> str:
        return _STATE_TEXT[self][0]

    @property
    def short(self) -> str:
        """A word or two for narrow places (Markdown table cells)."""
        return _STATE_TEXT[self][1]

    @property
    def meaning(self) -> str:
        return _STATE_TEXT[self][2]

    @property
    def css(self) -> str:
        return "st-" + re.sub(r"[^a-z-]", "", self.value)


_STATE_TEXT: dict[GridState, tuple[str, str, str]] = {
    GridState.VERIFIED: (
        "VERIFIED",
        "verified",
        "fresh passing evidence: ran > 0, all passed, inputs unchanged",
    ),
    GridState.FAILED: ("FAILED", "FAILED", "fresh evidence of a failure or an error"),
    GridState.STALE: ("STALE", "stale", "evidence exists but the inputs changed since; re-run"),
    GridState.NOT_RUN: ("NOT RUN", "not run", "no usable evidence: never ran, skipped, or ran nothing"),
    GridState.NOT_BUILDABLE_HERE: (
        "NOT BUILDABLE HERE",
        "no build here",
        "this host lacks a toolchain the platform needs to build",
    ),
    GridState.NOT_RUNNABLE_HERE: (
        "NOT RUNNABLE HERE",
        "no run here",
        "builds here, but running it needs hardware this host lacks",
    ),
    GridState.DEVICE_GATED: (
        "DEVICE-GATED",
        "device-gated",
        "needs a device; scoped to a later milestone, not claimed",
    ),
    GridState.INVALID: (
        "INVALID",
        "INVALID",
        "evidence is malformed, self-contradictory, or its artifacts no longer match",
    ),
    GridState.NOT_APPLICABLE: ("n/a", "n/a", "the check does not apply to this cell"),
}


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True, kw_only=True)
class PlatformCapability:
    """What the host probe decided for one platform, with the reasons shown to readers."""

    can_build: bool
    build_reason: str
    can_run: bool
    run_reason: str


UNPROBED = PlatformCapability(
    can_build=False,
    build_reason="host capability was not probed for this platform",
    can_run=False,
    run_reason="host capability was not probed for this platform",
)


@dataclass(frozen=True, kw_only=True)
class HeaderFacts:
    commit: str
    dirty: bool
    generated_at: str  # ISO 8601 UTC
    host: str  # where the report was generated, in words


# The current fingerprint of a (cell, check): the full fingerprint (lets the report say
# which parts changed), just its key, or None when it cannot be computed here.
CurrentFingerprint = InputFingerprint | str | None
FingerprintSource = (
    Callable[[Cell, Check], CurrentFingerprint] | Mapping[tuple[str, str], InputFingerprint | str]
)
# True: the file here hashes as recorded; False: it does not; None: not present here.
ArtifactVerifier = Callable[[Artifact], bool | None]


# --------------------------------------------------------------------------- model


class ArtifactState(StrEnum):
    MATCH = "match"
    MISMATCH = "mismatch"
    ABSENT = "absent"  # not on this host, so not verified either way


@dataclass(frozen=True, kw_only=True)
class ArtifactResult:
    path: str
    sha256: str
    state: ArtifactState


@dataclass(frozen=True, kw_only=True)
class Fact:
    name: str
    value: str
    multiline: bool


@dataclass(frozen=True, kw_only=True)
class EvidenceView:
    """The chosen record of a grid entry, flattened for display."""

    path: str
    status: Status
    reason: str
    counts: Counts
    commit: str
    dirty: bool
    host: HostInfo
    started_at: str
    finished_at: str
    duration_s: float
    fingerprint_key: str
    fresh: bool
    differing_parts: tuple[str, ...]
    artifacts: tuple[ArtifactResult, ...]
    metrics: tuple[Fact, ...]
    highlights: tuple[Fact, ...]  # well-known details of the check kind (first divergence, ABI diff)
    details: tuple[Fact, ...]  # every other details entry
    log_tail: str


@dataclass(frozen=True, kw_only=True)
class Superseded:
    path: str
    status: Status
    finished_at: str
    fresh: bool


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One cell and check of the grid."""

    cell: str
    check: str
    kind: CheckKind
    state: GridState
    reason: str
    anchor: str
    evidence: EvidenceView | None = None
    superseded: tuple[Superseded, ...] = ()
    gated_by: tuple[DeviceGatedItem, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Column:
    id: str
    kind: CheckKind
    description: str
    pass_rule: str
    needs_run: bool
    gated_cells_only: bool


@dataclass(frozen=True, kw_only=True)
class Row:
    cell: str
    platform: str
    platform_description: str
    gate_key: str
    anchor: str
    entries: tuple[Entry, ...]  # one per column, in column order


@dataclass(frozen=True, kw_only=True)
class EntryRef:
    cell: str
    check: str
    state: GridState
    anchor: str


@dataclass(frozen=True, kw_only=True)
class ChecklistBox:
    number: int
    text: str  # the box as the seam doc words it (backticks mark code)
    needs: str  # which evidence ticks it, in words
    ticked: bool
    evidence: tuple[EntryRef, ...]
    missing: tuple[str, ...]  # empty exactly when ticked


@dataclass(frozen=True, kw_only=True)
class DeviceGatedRow:
    id: str
    title: str
    needs: str
    milestone: str
    evidence: str  # what would count as evidence
    platforms: tuple[str, ...]
    cells: tuple[str, ...]  # grid entries ("cell · check") shown as DEVICE-GATED by it
    claimed: bool = False  # never claimed from this report; kept explicit for readers of the JSON


@dataclass(frozen=True, kw_only=True)
class LoadProblem:
    path: str
    message: str


@dataclass(frozen=True, kw_only=True)
class StateCount:
    state: GridState
    count: int


@dataclass(frozen=True, kw_only=True)
class ReportHeader:
    commit: str
    dirty: bool
    generated_at: str
    host: str
    matrix_source: str
    matrix_sha256: str
    verified: int
    declared: int  # applicable (cell, check) entries
    by_state: tuple[StateCount, ...]


@dataclass(frozen=True, kw_only=True)
class Report:
    header: ReportHeader
    legend: tuple[GridState, ...]
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    checklist: tuple[ChecklistBox, ...]
    device_gated: tuple[DeviceGatedRow, ...]
    problems: tuple[LoadProblem, ...]

    def entry(self, cell: str, check: str) -> Entry:
        for row in self.rows:
            if row.cell == cell:
                for entry in row.entries:
                    if entry.check == check:
                        return entry
        raise KeyError((cell, check))

    def entries(self) -> Iterable[Entry]:
        for row in self.rows:
            yield from row.entries


# --------------------------------------------------------------------------- anchors


def _anchor_part(text: str) -> str:
    # Injective, so two ids never share an anchor; keeps anchors valid in URLs and CSS.
    return re.sub(r"[^A-Za-z0-9.-]", lambda m: f"_{ord(m.group()):02x}", text)


def cell_anchor(cell: str) -> str:
    return f"cell-{_anchor_part(cell)}"


def entry_anchor(cell: str, check: str) -> str:
    return f"ev-{_anchor_part(cell)}--{_anchor_part(check)}"


# --------------------------------------------------------------------------- evaluation


def applies(cell: Cell, check: Check) -> str | None:
    """None when the check applies to the cell, else why not."""
    if check.gated_cells_only and not cell.gates:
        return "applies to cells with at least one gate only"
    if check.id not in {c.id for c in cell.checks}:
        return "not declared for this cell in the matrix"
    return None


def _current(source: FingerprintSource, cell: Cell, check: Check) -> CurrentFingerprint:
    if isinstance(source, Mapping):
        return source.get((cell.id, check.id))
    return source(cell, check)


def _current_key(current: CurrentFingerprint) -> str | None:
    if current is None:
        return None
    return current if isinstance(current, str) else current.key


def _counts_text(counts: Counts) -> str:
    return f"{counts.passed}/{counts.ran} passed, {counts.failed} failed"


def _fact(name: str, value: Any) -> Fact:
    if value is None:
        text = "none"
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return Fact(name=name, value=text, multiline="\n" in text or len(text) > 120)


_HIGHLIGHT_KEYS: dict[CheckKind, tuple[str, ...]] = {
    CheckKind.BUILD: ("llama_source", "llama_commit", "isa"),
    CheckKind.BYTE_IDENTITY_REFERENCE: ("first_divergence",),
    CheckKind.BYTE_IDENTITY_GATES: ("first_divergence",),
    CheckKind.BYTE_IDENTITY_BASELINE: ("first_divergence",),
    CheckKind.ABI: ("abi_diff", "exports"),
}


def _view(
    loaded: LoadedRecord,
    record: EvidenceRecord,
    kind: CheckKind,
    current: CurrentFingerprint,
    artifacts: tuple[ArtifactResult, ...],
) -> EvidenceView:
    key = _current_key(current)
    differing = record.fingerprint.differing_parts(current) if isinstance(current, InputFingerprint) else ()
    highlight_keys = _HIGHLIGHT_KEYS.get(kind, ())
    highlights = tuple(_fact(k, record.details[k]) for k in highlight_keys if k in record.details)
    rest = tuple(_fact(k, v) for k, v in sorted(record.details.items()) if k not in highlight_keys)
    return EvidenceView(
        path=str(loaded.path),
        status=record.status,
        reason=record.reason,
        counts=record.counts,
        commit=record.commit,
        dirty=record.dirty,
        host=record.host,
        started_at=record.started_at,
        finished_at=record.finished_at,
        duration_s=record.duration_s,
        fingerprint_key=record.fingerprint.key,
        fresh=key is not None and key == record.fingerprint.key,
        differing_parts=differing,
        artifacts=artifacts,
        metrics=tuple(_fact(k, v) for k, v in sorted(record.metrics.items())),
        highlights=highlights,
        details=rest,
        log_tail=record.log_tail,
    )


def check_artifacts(record: EvidenceRecord, verify: ArtifactVerifier) -> tuple[ArtifactResult, ...]:
    results = []
    for artifact in record.artifacts:
        verdict = verify(artifact)
        state = (
            ArtifactState.ABSENT
            if verdict is None
            else (ArtifactState.MATCH if verdict else ArtifactState.MISMATCH)
        )
        results.append(ArtifactResult(path=artifact.path, sha256=artifact.sha256, state=state))
    return tuple(results)


def judge_record(
    record: EvidenceRecord,
    current: CurrentFingerprint,
    artifacts: Sequence[ArtifactResult],
) -> tuple[GridState, str]:
    """The state one record earns, and why. Freshness comes first: a stale failure says
    nothing about the current tree, and a stale record's artifacts are expected to differ."""
    key = _current_key(current)
    if key is None:
        return GridState.STALE, (
            "the current inputs of this check could not be fingerprinted here, so freshness "
            f"cannot be established (last result: {record.status.value})"
        )
    if record.fingerprint.key != key:
        if isinstance(current, InputFingerprint):
            changed = ", ".join(record.fingerprint.differing_parts(current))
            what = f"inputs changed since this evidence: {changed}"
        else:
            what = "inputs changed since this evidence (fingerprint key differs; current parts not supplied)"
        return GridState.STALE, f"{what}; last result: {record.status.value}"
    mismatched = [a.path for a in artifacts if a.state is ArtifactState.MISMATCH]
    if mismatched:
        return GridState.INVALID, ("artifact sha256 no longer matches the evidence: " + ", ".join(mismatched))
    counts = record.counts
    if record.status in (Status.FAILED, Status.ERROR):
        return GridState.FAILED, (
            f"{record.status.value}: {record.reason or 'no reason recorded'} ({_counts_text(counts)})"
        )
    if record.status is Status.SKIPPED:
        return GridState.NOT_RUN, f"skipped: {record.reason or 'no reason recorded'}"
    if counts.ran == 0:
        return GridState.NOT_RUN, (
            "ran nothing: status is passed but counts.ran == 0, "
            "and a run that executes nothing is never a pass"
        )
    if counts.passed != counts.ran or counts.failed:
        return GridState.INVALID, f"status is passed but the counts contradict it ({_counts_text(counts)})"
    return GridState.VERIFIED, f"{counts.passed}/{counts.ran} passed on the current inputs"


def _is_device_only(platform: Platform) -> bool:
    return any(r in DEVICE_REQUIREMENTS for r in platform.run_requires)


def _no_evidence(
    cell: Cell,
    check: Check,
    capability: PlatformCapability,
    device_items: tuple[DeviceGatedItem, ...],
) -> tuple[GridState, str, tuple[DeviceGatedItem, ...], tuple[str, ...]]:
    # Device-gated wins over "not buildable here" for checks that run the artefact: even
    # with the toolchain, the run needs hardware owned by a later milestone.
    gated_by = tuple(item for item in device_items if cell.platform.id in item.platforms)
    if check.needs_run and not capability.can_run and _is_device_only(cell.platform) and gated_by:
        reason = "; ".join(f"{item.milestone}: needs {item.needs} ({item.title})" for item in gated_by)
        notes: tuple[str, ...] = ()
        if not capability.can_build:
            notes = (f"also not buildable here: {capability.build_reason}",)
        return GridState.DEVICE_GATED, reason, gated_by, notes
    if not capability.can_build:
        return GridState.NOT_BUILDABLE_HERE, capability.build_reason, (), ()
    if check.needs_run and not capability.can_run:
        return GridState.NOT_RUNNABLE_HERE, capability.run_reason, (), ()
    return GridState.NOT_RUN, "no evidence found", (), ()


def _evaluate(
    cell: Cell,
    check: Check,
    candidates: Sequence[LoadedRecord],
    broken: Sequence[LoadedRecord],
    current_source: FingerprintSource,
    capability: PlatformCapability,
    device_items: tuple[DeviceGatedItem, ...],
    verify: ArtifactVerifier,
) -> Entry:
    anchor = entry_anchor(cell.id, check.id)
    broken_notes = tuple(f"ignored malformed evidence: {b.problem}" for b in broken)
    if not candidates:
        if broken:
            return Entry(
                cell=cell.id,
                check=check.id,
                kind=check.kind,
                state=GridState.INVALID,
                reason=f"evidence file is malformed: {broken[0].problem}",
                anchor=anchor,
                notes=broken_notes[1:],
            )
        state, reason, gated_by, notes = _no_evidence(cell, check, capability, device_items)
        return Entry(
            cell=cell.id,
            check=check.id,
            kind=check.kind,
            state=state,
            reason=reason,
            anchor=anchor,
            gated_by=gated_by,
            notes=notes,
        )

    current = _current(current_source, cell, check)
    key = _current_key(current)

    def order(item: LoadedRecord) -> tuple[int, float, str]:
        assert item.record is not None
        fresh = key is not None and item.record.fingerprint.key == key
        return (0 if fresh else 1, -item.record.finished.timestamp(), str(item.path))

    ranked = sorted(candidates, key=order)
    chosen = ranked[0]
    record = chosen.record
    assert record is not None
    artifacts = check_artifacts(record, verify)
    state, reason = judge_record(record, current, artifacts)
    kept_notes = list(broken_notes)
    absent = [a.path for a in artifacts if a.state is ArtifactState.ABSENT]
    if absent and state is GridState.VERIFIED:
        kept_notes.append("not present on this host, hash not re-checked: " + ", ".join(absent))
    if record.dirty:
        kept_notes.append(f"produced from a tree with uncommitted changes (commit {record.commit})")
    superseded = tuple(
        Superseded(
            path=str(item.path),
            status=item.record.status,
            finished_at=item.record.finished_at,
            fresh=key is not None and item.record.fingerprint.key == key,
        )
        for item in ranked[1:]
        if item.record is not None
    )
    return Entry(
        cell=cell.id,
        check=check.id,
        kind=check.kind,
        state=state,
        reason=reason,
        anchor=anchor,
        evidence=_view(chosen, record, check.kind, current, artifacts),
        superseded=superseded,
        notes=tuple(kept_notes),
    )


# --------------------------------------------------------------------------- M3 exit checklist


@dataclass(frozen=True, kw_only=True)
class _BoxSpec:
    text: str
    kinds: tuple[CheckKind, ...]
    gated: bool | None  # False: no-gate cells, True: gated cells, None: both


_M3_BOXES: tuple[_BoxSpec, ...] = (
    _BoxSpec(
        text="`libelizainference` builds with the dispatch branches; default (no-gate) build is "
        "byte-for-byte the pre-M3 llama.cpp path on `e2e_loop_bench`.",
        kinds=(CheckKind.BUILD, CheckKind.BYTE_IDENTITY_REFERENCE, CheckKind.BYTE_IDENTITY_BASELINE),
        gated=False,
    ),
    _BoxSpec(
        text="The selector unit tests pass the full resolution table (env hard-select, rank ordering, "
        "the nullptr/`*out_error` tri-state).",
        kinds=(CheckKind.SELECTOR,),
        gated=None,
    ),
    _BoxSpec(
        text="`-DELIZA_ENABLE_LITERT=ON` and `-DELIZA_ENABLE_MLX=ON` builds compile, register, report "
        "`available() == false` on this host, and fall through to llama.cpp.",
        kinds=(CheckKind.BUILD, CheckKind.GATE_FALLTHROUGH),
        gated=True,
    ),
    _BoxSpec(
        text="No consumer (`ffi-bindings.ts`, JNI, Swift) changes — the FFI ABI is unchanged (the seam "
        "is entirely below the ABI surface).",
        kinds=(CheckKind.ABI,),
        gated=True,
    ),
)


def _is_linux_x64(platform: Platform) -> bool:
    return platform.os == "linux" and platform.arch in _LINUX_X64_ARCHES


def _scope_words(gated: bool | None) -> str:
    return {False: "no-gate", True: "gated", None: ""}[gated]


def _box(number: int, spec: _BoxSpec, matrix: Matrix, report_rows: Sequence[Row]) -> ChecklistBox:
    scope = _scope_words(spec.gated)
    cells_word = f"Linux x86_64 {scope} cells".replace("  ", " ")
    kinds_word = " + ".join(k.value for k in spec.kinds)
    needs = f"{kinds_word} VERIFIED on all {cells_word}"
    in_scope = {
        c.id
        for c in matrix.cells
        if _is_linux_x64(c.platform) and (spec.gated is None or bool(c.gates) == spec.gated)
    }
    missing: list[str] = []
    used: list[EntryRef] = []
    if not in_scope:
        missing.append(f"no {cells_word.removesuffix('s')} is declared in the matrix")
    for kind in spec.kinds:
        entries = [
            e
            for row in report_rows
            if row.cell in in_scope
            for e in row.entries
            if e.kind is kind and e.state is not GridState.NOT_APPLICABLE
        ]
        if in_scope and not entries:
            missing.append(f"no {kind.value} check applies to the {cells_word}")
        for e in entries:
            used.append(EntryRef(cell=e.cell, check=e.check, state=e.state, anchor=e.anchor))
            if e.state is not GridState.VERIFIED:
                missing.append(f"{e.cell} · {e.check}: {e.state.label} — {e.reason}")
    return ChecklistBox(
        number=number,
        text=spec.text,
        needs=needs,
        ticked=not missing,
        evidence=tuple(used),
        missing=tuple(missing),
    )


# --------------------------------------------------------------------------- assembly


def _problem(path: Path | str, message: str) -> LoadProblem:
    # Loader messages start with the path for standalone use; the report shows it apart.
    prefix = f"{path}: "
    return LoadProblem(path=str(path), message=message.removeprefix(prefix))


def build_report(
    matrix: Matrix,
    *,
    records: Sequence[LoadedRecord],
    current_fingerprint: FingerprintSource,
    capabilities: Mapping[str, PlatformCapability],
    artifact_matches: ArtifactVerifier,
    facts: HeaderFacts,
) -> Report:
    """Evaluate every declared (cell, check) against the evidence.

    `records` may come from many directories; duplicates of one (cell, check) are resolved
    by preferring evidence fresh for the current inputs, then the latest `finished_at`.
    `capabilities` is keyed by platform id; a platform missing from it is treated as not
    probed (neither buildable nor runnable here).
    """
    problems: list[LoadProblem] = []
    good: dict[tuple[str, str], list[LoadedRecord]] = {}
    broken: dict[tuple[str, str], list[LoadedRecord]] = {}
    cells = {c.id: c for c in matrix.cells}
    checks = {c.id: c for c in matrix.checks}

    for item in records:
        if item.problem is not None or item.record is None:
            problems.append(_problem(item.path, item.problem or "no record"))
            if item.cell is not None and item.check is not None:
                broken.setdefault((item.cell, item.check), []).append(item)
            continue
        record = item.record
        if record.cell not in cells:
            problems.append(_problem(item.path, f"ignored: the matrix declares no cell {record.cell!r}"))
            continue
        if record.check not in checks:
            problems.append(_problem(item.path, f"ignored: the matrix declares no check {record.check!r}"))
            continue
        why_not = applies(cells[record.cell], checks[record.check])
        if why_not is not None:
            problems.append(
                _problem(item.path, f"ignored: check {record.check!r} on {record.cell!r} {why_not}")
            )
            continue
        good.setdefault((record.cell, record.check), []).append(item)

    rows: list[Row] = []
    for cell in matrix.cells:
        capability = capabilities.get(cell.platform.id, UNPROBED)
        entries: list[Entry] = []
        for check in matrix.checks:
            why_not = applies(cell, check)
            anchor = entry_anchor(cell.id, check.id)
            if why_not is not None:
                entries.append(
                    Entry(
                        cell=cell.id,
                        check=check.id,
                        kind=check.kind,
                        state=GridState.NOT_APPLICABLE,
                        reason=why_not,
                        anchor=anchor,
                    )
                )
                continue
            entries.append(
                _evaluate(
                    cell,
                    check,
                    good.get((cell.id, check.id), []),
                    broken.get((cell.id, check.id), []),
                    current_fingerprint,
                    capability,
                    matrix.device_gated,
                    artifact_matches,
                )
            )
        rows.append(
            Row(
                cell=cell.id,
                platform=cell.platform.id,
                platform_description=cell.platform.description,
                gate_key=cell.gate_key,
                anchor=cell_anchor(cell.id),
                entries=tuple(entries),
            )
        )

    all_entries = [e for r in rows for e in r.entries]
    applicable = [e for e in all_entries if e.state is not GridState.NOT_APPLICABLE]
    header = ReportHeader(
        commit=facts.commit,
        dirty=facts.dirty,
        generated_at=facts.generated_at,
        host=facts.host,
        matrix_source=matrix.source,
        matrix_sha256=matrix.sha256,
        verified=sum(1 for e in applicable if e.state is GridState.VERIFIED),
        declared=len(applicable),
        by_state=tuple(
            StateCount(state=s, count=sum(1 for e in all_entries if e.state is s)) for s in GridState
        ),
    )
    device_rows = tuple(
        DeviceGatedRow(
            id=item.id,
            title=item.title,
            needs=item.needs,
            milestone=item.milestone,
            evidence=item.evidence,
            platforms=item.platforms,
            cells=tuple(
                f"{e.cell} · {e.check}"
                for e in all_entries
                if e.state is GridState.DEVICE_GATED and any(g.id == item.id for g in e.gated_by)
            ),
        )
        for item in matrix.device_gated
    )
    return Report(
        header=header,
        legend=tuple(GridState),
        columns=tuple(
            Column(
                id=c.id,
                kind=c.kind,
                description=c.description,
                pass_rule=c.pass_rule,
                needs_run=c.needs_run,
                gated_cells_only=c.gated_cells_only,
            )
            for c in matrix.checks
        ),
        rows=tuple(rows),
        checklist=tuple(_box(i, spec, matrix, rows) for i, spec in enumerate(_M3_BOXES, start=1)),
        device_gated=device_rows,
        problems=tuple(problems),
    )


# --------------------------------------------------------------------------- JSON form


def _jsonable(value: object) -> Any:
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report as plain JSON data; state values are the `GridState` values."""
    body: dict[str, Any] = _jsonable(report)
    body["legend"] = [{"state": s.value, "label": s.label, "meaning": s.meaning} for s in report.legend]
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "evidence_schema_version": EVIDENCE_SCHEMA_VERSION,
        **body,
    }
