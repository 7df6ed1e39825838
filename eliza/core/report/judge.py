"""Judging evidence: the state one (cell, check) earns from its records, its freshness,
its artifacts and what this host can build and run."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eliza.core.evidence import (
    Counts,
    EvidenceRecord,
    InputFingerprint,
    LoadedRecord,
    Status,
)
from eliza.core.matrix import Cell, Check, CheckKind, DeviceGatedItem, Platform, Requirement
from eliza.core.report.model import (
    ArtifactResult,
    ArtifactState,
    ArtifactVerifier,
    CurrentFingerprint,
    Entry,
    EvidenceView,
    Fact,
    FingerprintSource,
    PlatformCapability,
    Superseded,
    entry_anchor,
)
from eliza.core.report.states import GridState
from eliza.core.trust import Signer, TrustPolicy, judge_signature

# Run requirements that no CI runner or dev box here provides by default; a platform that
# needs one of them to run is what the device-gated table is about.
DEVICE_REQUIREMENTS: frozenset[Requirement] = frozenset(
    {Requirement.NVIDIA_GPU, Requirement.ANDROID_DEVICE, Requirement.APPLE_SILICON, Requirement.IOS_DEVICE}
)


# --------------------------------------------------------------------------- evaluation


def applies(cell: Cell, check: Check) -> str | None:
    """None when the check applies to the cell, else why not."""
    if check.gated_cells_only and not cell.gates:
        return "applies to cells with at least one gate only"
    if check.runtime_cells_only and not any(g.runtime_for(cell.platform.id) for g in cell.gates):
        return f"applies to cells with a gate whose runtime exists on {cell.platform.id} only"
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
    CheckKind.BYTE_IDENTITY_DRAFTER: ("drafters", "speedup"),
    CheckKind.ABI: ("pre_m3_surface", "released_abi_diff", "abi_diff", "exports"),
    CheckKind.CONSUMER: ("node", "jni"),
}


def _view(
    loaded: LoadedRecord,
    record: EvidenceRecord,
    kind: CheckKind,
    current: CurrentFingerprint,
    artifacts: tuple[ArtifactResult, ...],
    signer: Signer | None = None,
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
        signer=signer,
        subjects=record.subjects,
    )


@dataclass(frozen=True, kw_only=True)
class BuildStanding:
    """A cell's build as the checks that run its library are judged against: the library
    its current VERIFIED build evidence names, or why there is none."""

    state: GridState | None  # None: the cell declares no build check
    library_sha256: str = ""  # of a VERIFIED build record's library subject
    library: str = ""
    reason: str = ""

    @classmethod
    def of(cls, cell: Cell, entry: Entry | None, record: EvidenceRecord | None) -> BuildStanding:
        if entry is None:
            return cls(state=None)
        if entry.state is GridState.VERIFIED and record is not None:
            subject = record.library(cell.id)
            if subject is not None:
                return cls(state=entry.state, library_sha256=subject.sha256, library=subject.name)
            return cls(state=entry.state, reason="its build evidence names no library subject")
        return cls(state=entry.state, reason=f"its build is {entry.state.label}: {entry.reason}")


def bind_to_build(
    record: EvidenceRecord, cell: Cell, build: BuildStanding | None
) -> tuple[GridState, str] | None:
    """None when the record ran against the library of the cell's VERIFIED build; else the
    state it gets instead (NOT RUN without build evidence, INVALID for another library)."""
    if build is None or build.state is None:
        return None
    ran = record.library(cell.id)
    if build.state is not GridState.VERIFIED or not build.library_sha256:
        if build.state in (GridState.NOT_RUN, GridState.NOT_BUILDABLE_HERE, GridState.DEVICE_GATED):
            return (
                GridState.NOT_RUN,
                f"the cell's build has no evidence here ({build.reason}); passes do not count",
            )
        return GridState.NOT_RUN, f"not counted: {build.reason}"
    if ran is None:
        return GridState.INVALID, (
            f"the evidence names no library of {cell.id} it ran against; the cell's verified build "
            f"is {build.library} (sha256 {build.library_sha256})"
        )
    if ran.sha256 != build.library_sha256:
        return GridState.INVALID, (
            f"ran against another library: {ran.name} sha256 {ran.sha256}, but the cell's verified build "
            f"is {build.library} sha256 {build.library_sha256}"
        )
    return None


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
    if record.status is Status.INCONCLUSIVE:
        return GridState.INCONCLUSIVE, f"inconclusive: {record.reason or 'no reason recorded'}"
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
    # Items that name the checks claiming them are judged by those checks' own entries,
    # which say where they wait (NOT RUNNABLE HERE and the hardware), so they gate nothing.
    gated_by = tuple(item for item in device_items if cell.platform.id in item.platforms and not item.checks)
    runnable = capability.can_run_check(check)
    if check.needs_run and not runnable and _is_device_only(cell.platform) and gated_by:
        reason = "; ".join(f"{item.milestone}: needs {item.needs} ({item.title})" for item in gated_by)
        notes: tuple[str, ...] = ()
        if not capability.can_build:
            notes = (f"also not buildable here: {capability.build_reason}",)
        return GridState.DEVICE_GATED, reason, gated_by, notes
    if not capability.can_build:
        return GridState.NOT_BUILDABLE_HERE, capability.build_reason, (), ()
    if check.needs_run and runnable and check.id in capability.check_blockers:
        return GridState.NOT_RUNNABLE_HERE, capability.check_blockers[check.id], (), ()
    if check.needs_run and not runnable:
        claims = [i.id for i in device_items if check.id in i.checks and cell.platform.id in i.platforms]
        closes = f"; its evidence from such a host claims {', '.join(claims)}" if claims else ""
        return GridState.NOT_RUNNABLE_HERE, capability.run_reason + closes, (), ()
    return GridState.NOT_RUN, "no evidence found", (), ()


def unavailable_state(
    cell: Cell, check: Check, capability: PlatformCapability, device_items: tuple[DeviceGatedItem, ...]
) -> tuple[GridState, str]:
    """The state and reason of a check this host will not run, as the report will judge it
    without evidence: DEVICE-GATED, NOT BUILDABLE HERE, NOT RUNNABLE HERE or NOT RUN."""
    state, reason, _, _ = _no_evidence(cell, check, capability, device_items)
    return state, reason


def evaluate(
    cell: Cell,
    check: Check,
    candidates: Sequence[LoadedRecord],
    broken: Sequence[LoadedRecord],
    current_source: FingerprintSource,
    capability: PlatformCapability,
    device_items: tuple[DeviceGatedItem, ...],
    verify: ArtifactVerifier,
    policy: TrustPolicy,
    build: BuildStanding | None = None,
) -> Entry:
    """`policy`: the keys the report trusts, each for its scope. `build`: the cell's build,
    which a check that runs its library is bound to (None: the build itself is judged)."""
    anchor = entry_anchor(cell.id, check.id)
    broken_notes = tuple(f"ignored malformed evidence: {b.problem}" for b in broken)
    if not candidates:
        distrusted = [b for b in broken if b.untrusted]
        if distrusted:
            return Entry(
                cell=cell.id,
                check=check.id,
                kind=check.kind,
                state=GridState.UNTRUSTED,
                reason=f"not trusted: {distrusted[0].problem}",
                anchor=anchor,
                notes=tuple(f"ignored evidence: {b.problem}" for b in broken if b is not distrusted[0]),
            )
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
    signers = {
        id(item): judge_signature(item.signature, policy, cell.platform.id, check.id) for item in candidates
    }

    def order(item: LoadedRecord) -> tuple[int, int, float, str]:
        assert item.record is not None
        # Evidence a trusted key signed comes first: a dropped-in file never hides it.
        trusted = signers[id(item)][0] is not None
        fresh = key is not None and item.record.fingerprint.key == key
        return (0 if trusted else 1, 0 if fresh else 1, -item.record.finished.timestamp(), str(item.path))

    ranked = sorted(candidates, key=order)
    chosen = ranked[0]
    record = chosen.record
    assert record is not None
    artifacts = check_artifacts(record, verify)
    signer, distrust = signers[id(chosen)]
    if signer is None:
        state, reason = GridState.UNTRUSTED, f"not trusted: {distrust}"
    else:
        state, reason = judge_record(record, current, artifacts)
        bound = (
            bind_to_build(record, cell, build) if check.needs_run and state is GridState.VERIFIED else None
        )
        if bound is not None:
            state, reason = bound
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
        evidence=_view(chosen, record, check.kind, current, artifacts, signer),
        superseded=superseded,
        notes=tuple(kept_notes),
    )
