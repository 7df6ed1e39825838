"""How a check runs the library with a gate's runtime present or absent."""

from __future__ import annotations

from eliza.app.services.run import Run
from eliza.core.matrix import Cell, Gate


def backends_of(cell: Cell) -> tuple[Gate, ...]:
    """The cell's gates whose runtime its platform has: what backend-agreement, backend perf
    and the consumers' second pass drive, hard-selected."""
    return tuple(g for g in cell.gates if g.runtime_for(cell.platform.id))


def runtime_hidden(evidence: Run) -> dict[str, str]:
    """The environment in which a gate's runtime is absent, as on a host without it: the
    library looks for its gate modules in an empty folder (ELIZA_BACKEND_MODULE_DIR), so
    every compiled-in gate reports available() false and the cases judge the fall-through."""
    empty = evidence.project.build_root / "no-backend-modules"
    empty.mkdir(parents=True, exist_ok=True)
    return {"ELIZA_BACKEND_MODULE_DIR": str(empty)}
