"""`nox -s verify`: every check this host can run, for every cell it can build."""

from __future__ import annotations

from typing import Protocol

from eliza import workflow
from eliza.matrix.model import Matrix


class SessionLike(Protocol):
    def log(self, *args: object) -> None: ...


def run_verify(session: SessionLike, matrix: Matrix) -> None:
    buildable = [p for p in matrix.platforms if workflow.capability(p).can_build and not p.slow_build]
    for platform in matrix.platforms:
        if platform not in buildable:
            can = workflow.capability(platform)
            why = can.build_reason if not can.can_build else "slow build: run its build session explicitly"
            session.log(f"{platform.id}: not built here ({why})")
    cells = tuple(c for p in buildable for c in matrix.cells_of(p.id))
    built = workflow.build_cells(cells, matrix, on_built=lambda b: session.log(workflow.describe_build(b)))
    reference = next(b for b in built if b.cell_id == "linux-cpu.none")
    bundle = workflow.ensure_tiny_bundle()
    prompt = "Once upon a time there was"
    _, text = workflow.generate_text(reference.library, bundle, prompt)
    print(f"{prompt}{text.decode('utf-8', errors='replace')}")
    print(f"library: {reference.library}")
