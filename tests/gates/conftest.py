from __future__ import annotations

import os
from pathlib import Path

import pytest

from eliza.app.project import load_project_matrix

# ELIZA_TEST_PLATFORM picks the platform whose gate cells are tested (default linux-cpu).
PLATFORM = os.environ.get("ELIZA_TEST_PLATFORM", "linux-cpu")
CELLS = tuple(c.id for c in load_project_matrix().cells_of(PLATFORM))
NO_GATE_CELL = next(c.id for c in load_project_matrix().cells_of(PLATFORM) if not c.gates)
GATED_CELLS = tuple(c for c in CELLS if c != NO_GATE_CELL)


def cell_id(cell: str) -> str:
    """Test ids name the cell as cell=<id> so results can be attributed to cells."""
    return f"cell={cell}"


@pytest.fixture(scope="session")
def gate_libraries() -> dict[str, Path]:
    """Every gate cell of the platform, built (llama.cpp reused from the Conan cache)."""
    from eliza.app.build import build_cells

    matrix = load_project_matrix()
    built = build_cells(matrix.cells_of(PLATFORM), matrix, echo=False)
    return {b.cell_id: b.library for b in built}


@pytest.fixture(scope="session")
def bundle_with_foreign_artifacts(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny bundle plus fake LiteRT-LM and CoreML artifacts beside its GGUF."""
    bundle = tmp_path_factory.mktemp("foreign") / "bundle"
    (bundle / "text").mkdir(parents=True)
    model = next((tiny_bundle / "text").glob("*.gguf"))
    (bundle / "text" / model.name).symlink_to(model)
    (bundle / "text" / "x.litertlm").write_bytes(b"not a real litertlm")
    (bundle / "text" / "x.mlpackage").mkdir()
    return bundle
