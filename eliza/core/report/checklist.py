"""The exit checklist of matrix.yaml, judged from the grid: a box is ticked only when
every check it names is VERIFIED on every cell of its scope."""

from __future__ import annotations

from collections.abc import Sequence

from eliza.core.matrix import ExitBox, Matrix
from eliza.core.report.model import ChecklistBox, EntryRef, Row
from eliza.core.report.states import GridState


def checklist_box(number: int, spec: ExitBox, matrix: Matrix, report_rows: Sequence[Row]) -> ChecklistBox:
    """A box is ticked when each of its checks is VERIFIED on every cell of its scope."""
    cells_word = spec.scope.describe()
    needs = f"{' + '.join(spec.checks)} VERIFIED on all {cells_word}"
    in_scope = {c.id for c in matrix.cells if spec.scope.contains(c)}
    missing: list[str] = []
    used: list[EntryRef] = []
    if not in_scope:
        missing.append(f"no {cells_word.removesuffix('s')} is declared in the matrix")
    for check in spec.checks:
        entries = [
            e
            for row in report_rows
            if row.cell in in_scope
            for e in row.entries
            if e.check == check and e.state is not GridState.NOT_APPLICABLE
        ]
        if in_scope and not entries:
            missing.append(f"no {check} check applies to the {cells_word}")
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
