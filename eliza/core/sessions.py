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
        gate_sets = ", ".join(c.key for c in cells)
        slow = " (slow: a cold llama.cpp build takes long)" if platform.slow_build else ""
        specs.append(
            SessionSpec(
                name=build_session_name(platform),
                description=(
                    f"Build all {len(cells)} cells of {platform.id} ({gate_sets}){slow}: "
                    f"{platform.description}"
                ),
                kind=SessionKind.BUILD_PLATFORM,
                platform=platform.id,
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
                )
            )
    return tuple(specs)
