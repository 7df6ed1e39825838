"""The nox session table, derived from the matrix: pure, so `nox -l` and the tests agree
on every name and description without building anything."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from eliza.core.matrix import Cell, Matrix, Platform


class SessionKind(StrEnum):
    BUILD_PLATFORM = "build-platform"
    BUILD_CELL = "build-cell"
    BENCH_PLATFORM = "bench-platform"


@dataclass(frozen=True, kw_only=True)
class SessionSpec:
    name: str
    description: str
    kind: SessionKind
    platform: str
    cell: str | None = None
    cells: tuple[str, ...] = ()  # what the session builds: its one cell, or the platform's


def platform_build_cells(matrix: Matrix, platform: Platform) -> tuple[Cell, ...]:
    """The cells `build-<platform>` builds: all but those of a slow-build variant (an ASan
    llama.cpp takes a quarter of an hour cold), which only their own cell session builds."""
    return tuple(c for c in matrix.cells_of(platform.id) if c.variant is None or not c.variant.slow_build)


def build_session_name(platform: Platform) -> str:
    return f"build-{platform.id}"


def cell_session_name(cell: Cell) -> str:
    return f"build-{cell.id}"


def bench_session_name(platform: Platform) -> str:
    return f"bench-{platform.id}"


def _gates_words(cell: Cell) -> str:
    return " + ".join(g.id for g in cell.gates) if cell.gates else "no gates"


def matrix_sessions(matrix: Matrix) -> tuple[SessionSpec, ...]:
    specs: list[SessionSpec] = []
    for platform in matrix.platforms:
        cells = matrix.cells_of(platform.id)
        if not cells:
            continue
        built = platform_build_cells(matrix, platform)
        gate_sets = ", ".join(c.key for c in built)
        slow = " (slow: a cold llama.cpp build takes long)" if platform.slow_build else ""
        apart = [c for c in cells if c not in built]
        alone = f"; {', '.join(cell_session_name(c) for c in apart)} builds its variant" if apart else ""
        specs.append(
            SessionSpec(
                name=build_session_name(platform),
                description=(
                    f"Build the {len(built)} cells of {platform.id} ({gate_sets}){slow}{alone}: "
                    f"{platform.description}"
                ),
                kind=SessionKind.BUILD_PLATFORM,
                platform=platform.id,
                cells=tuple(c.id for c in built),
            )
        )
        specs.append(
            SessionSpec(
                name=bench_session_name(platform),
                description=(
                    f"Byte-identity bench diffs and seam-overhead benchmark for every {platform.id} cell"
                    + (
                        f" (under {platform.emulator.program} on a host that cannot run "
                        f"{platform.arch}: no seam-overhead timing there)"
                        if platform.emulator
                        else ""
                    )
                ),
                kind=SessionKind.BENCH_PLATFORM,
                platform=platform.id,
            )
        )
        for cell in cells:
            specs.append(
                SessionSpec(
                    name=cell_session_name(cell),
                    description=f"Build the {platform.id} cell with {_gates_words(cell)} only"
                    + (f", {cell.variant.id} variant: {cell.variant.description}" if cell.variant else ""),
                    kind=SessionKind.BUILD_CELL,
                    platform=platform.id,
                    cell=cell.id,
                    cells=(cell.id,),
                )
            )
    return tuple(specs)
