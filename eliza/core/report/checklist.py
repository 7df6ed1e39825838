"""Judging from the grid what a set of checks shows on a scope of cells: the exit checklist
of matrix.yaml, the seam doc's "verifiable here" table and the claims of device-gated items.

A box is ticked only when every check it names is VERIFIED on every cell of its scope. When
the only entries short of VERIFIED are waiting for hardware this host lacks, the box is
ticked *here* and says which part waits for which device: never a tick for it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from eliza.core.matrix import (
    Baseline,
    CheckKind,
    ChecklistScope,
    DeviceGatedItem,
    ExitBox,
    Matrix,
    VerifiableItem,
)
from eliza.core.report.model import (
    ChecklistBox,
    DeviceGatedRow,
    Entry,
    EntryRef,
    Row,
    VerifiableRow,
)
from eliza.core.report.states import GridState

# States that say "this host lacks the hardware": what such an entry needs is a device run.
_WAITING = (GridState.NOT_RUNNABLE_HERE, GridState.DEVICE_GATED)


@dataclass(frozen=True, kw_only=True)
class ScopeVerdict:
    evidence: tuple[EntryRef, ...]
    missing: tuple[str, ...]  # entries short of VERIFIED for a reason this host could act on
    waits: tuple[str, ...]  # entries that wait for hardware this host lacks
    notes: tuple[str, ...]

    @property
    def ticked(self) -> bool:
        return not self.missing and not self.waits

    verified_per_check: tuple[int, ...] = ()

    @property
    def ticked_here(self) -> bool:
        """Nothing missing but device runs, and every check VERIFIED somewhere here: a scope
        whose entries all wait for a device shows nothing verified, so nothing is ticked."""
        return not self.missing and bool(self.waits) and all(self.verified_per_check)


def _fact(entry: Entry, name: str) -> str | None:
    if entry.evidence is None:
        return None
    facts = (*entry.evidence.highlights, *entry.evidence.details)
    return next((f.value for f in facts if f.name == name), None)


def _baseline_notes(entry: Entry, declared: Baseline | None) -> tuple[str | None, str | None]:
    """(note, problem) of a byte-identity-baseline entry: the commit it was checked against,
    and whether that is the matrix's declared baseline."""
    commit = _fact(entry, "baseline_commit")
    if commit is None:
        if declared is None:
            return None, None
        return None, f"{entry.cell} · {entry.check}: the evidence names no baseline commit"
    if declared is None:
        return f"{entry.cell}: checked against {commit[:12]}", None
    if commit != declared.ref:
        return None, (
            f"{entry.cell} · {entry.check}: checked against {commit[:12]}, not the declared baseline "
            f"{declared.ref[:12]} ({declared.label})"
        )
    return f"checked against the declared baseline {declared.ref[:12]} ({declared.label})", None


def judge_scope(
    checks: Sequence[str], scope: ChecklistScope, matrix: Matrix, rows: Sequence[Row]
) -> ScopeVerdict:
    cells_word = scope.describe()
    in_scope = {c.id for c in matrix.cells if scope.contains(c)}
    missing: list[str] = []
    waits: list[str] = []
    notes: list[str] = []
    used: list[EntryRef] = []
    verified_per_check: list[int] = []
    if not in_scope:
        missing.append(f"no {cells_word.removesuffix('s')} is declared in the matrix")
    for check in checks:
        entries = [
            e
            for row in rows
            if row.cell in in_scope
            for e in row.entries
            if e.check == check and e.state is not GridState.NOT_APPLICABLE
        ]
        if in_scope and not entries:
            missing.append(f"no {check} check applies to the {cells_word}")
        verified_per_check.append(sum(1 for e in entries if e.state is GridState.VERIFIED))
        for e in entries:
            used.append(EntryRef(cell=e.cell, check=e.check, state=e.state, anchor=e.anchor))
            if e.state is GridState.VERIFIED and e.kind is CheckKind.BYTE_IDENTITY_BASELINE:
                note, problem = _baseline_notes(e, matrix.baseline)
                if problem is not None:
                    missing.append(problem)
                elif note is not None and note not in notes:
                    notes.append(note)
            elif e.state in _WAITING:
                waits.append(f"{e.cell} · {e.check}: {e.state.label} — {e.reason}")
            elif e.state is not GridState.VERIFIED:
                missing.append(f"{e.cell} · {e.check}: {e.state.label} — {e.reason}")
    return ScopeVerdict(
        evidence=tuple(used),
        missing=tuple(missing),
        waits=tuple(waits),
        notes=tuple(notes),
        verified_per_check=tuple(verified_per_check),
    )


def checklist_box(number: int, spec: ExitBox, matrix: Matrix, report_rows: Sequence[Row]) -> ChecklistBox:
    verdict = judge_scope(spec.checks, spec.scope, matrix, report_rows)
    return ChecklistBox(
        number=number,
        text=spec.text,
        needs=f"{' + '.join(spec.checks)} VERIFIED on all {spec.scope.describe()}",
        ticked=verdict.ticked,
        ticked_here=verdict.ticked_here,
        evidence=verdict.evidence,
        missing=verdict.missing,
        waits=verdict.waits,
        notes=verdict.notes,
    )


def verifiable_row(spec: VerifiableItem, matrix: Matrix, report_rows: Sequence[Row]) -> VerifiableRow:
    verdict = judge_scope(spec.checks, spec.scope, matrix, report_rows)
    verified = sum(1 for e in verdict.evidence if e.state is GridState.VERIFIED)
    return VerifiableRow(
        item=spec.item,
        how=spec.how,
        checks=spec.checks,
        scope=spec.scope.describe(),
        bundles=tuple(dict.fromkeys(c.bundle for name in spec.checks for c in matrix.checks if c.id == name)),
        verified=verdict.ticked,
        verified_here=verdict.ticked_here,
        counts=f"{verified} of {len(verdict.evidence)} entries VERIFIED",
        evidence=verdict.evidence,
        missing=verdict.missing,
        waits=verdict.waits,
        notes=verdict.notes,
    )


def device_row(item: DeviceGatedItem, report_rows: Sequence[Row], gated: Iterable[Entry]) -> DeviceGatedRow:
    """An item is claimed by its checks' evidence: VERIFIED on every cell of its platforms
    where they apply, each record carrying the metrics the item names."""
    missing: list[str] = []
    used: list[EntryRef] = []
    if not item.checks:
        missing.append("no check of the matrix produces this evidence yet")
    for check in item.checks:
        entries = [
            e
            for row in report_rows
            if row.platform in item.platforms
            for e in row.entries
            if e.check == check and e.state is not GridState.NOT_APPLICABLE
        ]
        if not entries:
            missing.append(f"{check} applies to no cell of {', '.join(item.platforms)}")
        for e in entries:
            used.append(EntryRef(cell=e.cell, check=e.check, state=e.state, anchor=e.anchor))
            if e.state is not GridState.VERIFIED:
                missing.append(f"{e.cell} · {e.check}: {e.state.label} — {e.reason}")
                continue
            have = {m.name for m in e.evidence.metrics} if e.evidence is not None else set()
            lacking = [m for m in item.metrics if m not in have]
            if lacking:
                missing.append(f"{e.cell} · {e.check}: the evidence has no {', '.join(lacking)}")
            if e.qualifier:
                # A device item is about the device: a run on the CPU fallback does not claim it.
                missing.append(f"{e.cell} · {e.check}: ran on the {e.ran_on}, not on the device")
    return DeviceGatedRow(
        id=item.id,
        title=item.title,
        needs=item.needs,
        milestone=item.milestone,
        evidence=item.evidence,
        platforms=item.platforms,
        cells=tuple(
            f"{e.cell} · {e.check}"
            for e in gated
            if e.state is GridState.DEVICE_GATED and any(g.id == item.id for g in e.gated_by)
        ),
        checks=item.checks,
        metrics=item.metrics,
        claimed=not missing,
        claim_evidence=tuple(used),
        missing=tuple(missing),
    )
