from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from eliza.core.matrix import Gate
from tests.selection import MATRIX, test_cells, test_platform

# ELIZA_TEST_PLATFORM picks the platform whose gate cells are tested (default: the first).
PLATFORM = test_platform()
NO_GATE_CELL = next(c.id for c in MATRIX.cells_of(PLATFORM) if not c.gates)
# ELIZA_TEST_CELLS (comma-separated cell ids) restricts the tested cells, e.g. to the one a
# change is about; tests that compare with the no-gate cell still build it as the reference.
_ONLY = test_cells(PLATFORM)
# Cells of the default build variant: a sanitizer variant's library loads only with its
# runtime preloaded, which its own native-suite check does.
CELLS = tuple(c.id for c in MATRIX.cells_of(PLATFORM) if c.variant is None and (not _ONLY or c.id in _ONLY))
GATED_CELLS = tuple(c for c in CELLS if c != NO_GATE_CELL)
GATES = MATRIX.gates


def cell_id(cell: str) -> str:
    """Test ids name the cell as cell=<id> so results can be attributed to cells."""
    return f"cell={cell}"


def gate_id(gate: Gate) -> str:
    return f"gate={gate.id}"


def gates_of(cell: str) -> tuple[Gate, ...]:
    return MATRIX.cell(cell).gates


# --- bundles from the matrix's artifact patterns ------------------------------------------


def _split(pattern: str) -> tuple[str, str]:
    """(kind, path) of a matrix artifact pattern: ("suffix", "text/*.ext"),
    ("dir", "text/name"), ("file", "text/name"); the forms native/cmake/gates.cmake allows."""
    if "*" not in pattern:
        return ("dir", pattern[:-1]) if pattern.endswith("/") else ("file", pattern)
    parent, _, leaf = pattern.rpartition("/")
    if leaf.startswith("*") and len(leaf) > 1 and "*" not in leaf[1:] + parent:
        return "suffix", pattern
    raise ValueError(f"matrix.yaml artifact {pattern!r} is not a supported form")


def place_artifact(bundle: Path, pattern: str) -> Path:
    """Creates what `pattern` names under `bundle`: a file for text/*.ext (named
    artifact.ext) and text/name, a directory for text/name/."""
    kind, path = _split(pattern)
    target = bundle / (path.replace("*", "artifact") if kind == "suffix" else path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if kind == "dir":
        target.mkdir(exist_ok=True)
    elif not target.exists():
        target.write_bytes(b"not a real model")
    return target


def place_near_miss(bundle: Path, pattern: str) -> Path:
    """Creates what `pattern` must NOT match: an entry named just .ext for text/*.ext (the
    name must be longer than the suffix), a file for text/name/, a directory for text/name."""
    kind, path = _split(pattern)
    target = bundle / path.replace("*", "")
    target.parent.mkdir(parents=True, exist_ok=True)
    if kind == "file":
        target.mkdir()
    else:
        target.write_bytes(b"not a real model")
    return target


def gguf_only_bundle(root: Path) -> Path:
    bundle = root / "gguf-only"
    (bundle / "text").mkdir(parents=True)
    (bundle / "text" / "model.gguf").write_bytes(b"GGUF")
    return bundle


# --- built cells ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def built_libraries() -> dict[str, Path]:
    """Cell id -> library, for every cell built so far in this session."""
    return {}


@pytest.fixture(scope="session")
def cell_library(built_libraries: dict[str, Path]) -> Callable[[str], Path]:
    """Builds one cell on first use (llama.cpp reused from the Conan cache)."""
    from eliza.app.services.build import build_cells

    def library(cell: str) -> Path:
        if cell not in built_libraries:
            built = build_cells((MATRIX.cell(cell),), MATRIX, echo=False)
            built_libraries[cell] = built[0].library
        return built_libraries[cell]

    return library


@pytest.fixture(scope="session")
def without_runtime(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Path]:
    """A copy of a library in a folder of its own, without the gate modules its build put
    beside it: the same gate-ON build on a host without the gates' runtimes. The gate suite
    judges that fall-through path; a runtime that is present is judged by
    backend-agreement and tests/backends. (A copy, not ELIZA_BACKEND_MODULE_DIR: a library
    looks for its modules once per process, and another suite may share this process.)"""
    root = tmp_path_factory.mktemp("without-runtimes")
    copies: dict[Path, Path] = {}

    def copy(library: Path) -> Path:
        if library not in copies:
            folder = root / str(len(copies))
            folder.mkdir()
            copies[library] = Path(shutil.copy2(library.resolve(), folder / library.name))
        return copies[library]

    return copy


@pytest.fixture(scope="session")
def gate_libraries(built_libraries: dict[str, Path]) -> dict[str, Path]:
    """The tested cells of the platform and the no-gate cell, built in one go."""
    from eliza.app.services.build import build_cells

    wanted = (NO_GATE_CELL, *GATED_CELLS)
    todo = tuple(MATRIX.cell(c) for c in wanted if c not in built_libraries)
    if todo:
        built_libraries.update({b.cell_id: b.library for b in build_cells(todo, MATRIX, echo=False)})
    return {c: built_libraries[c] for c in wanted}


@pytest.fixture(scope="session")
def bundle_with_foreign_artifacts(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny bundle plus a fake of every artifact pattern of every matrix gate beside its
    GGUF: each gate's factory could serve it if its runtime were present."""
    bundle = tmp_path_factory.mktemp("foreign") / "bundle"
    (bundle / "text").mkdir(parents=True)
    model = next((tiny_bundle / "text").glob("*.gguf"))
    (bundle / "text" / model.name).symlink_to(model)
    for gate in GATES:
        for pattern in gate.artifacts:
            place_artifact(bundle, pattern)
    return bundle
