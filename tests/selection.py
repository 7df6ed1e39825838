"""What the environment asks the suites to test (ELIZA_TEST_CELL, ELIZA_TEST_PLATFORM,
ELIZA_TEST_CELLS), checked against the matrix: a mistyped value stops the run with one
line naming it and the valid ones, never a traceback."""

from __future__ import annotations

import os
import sys

from eliza.app.project import load_project_matrix
from eliza.core.matrix import Matrix
from eliza.core.matrix_rules import did_you_mean, unknown_cell, valid_words

MATRIX: Matrix = load_project_matrix()


def _stop(message: str) -> None:
    # Called while conftest files load: SystemExit passes through pytest's loader, so the
    # user sees this one line instead of a conftest traceback.
    sys.stderr.write(f"error: {message}\n")
    raise SystemExit(2)


def test_cell() -> str:
    """ELIZA_TEST_CELL, default: the first no-gate cell of the matrix."""
    default = next((c.id for c in MATRIX.cells if not c.gates), MATRIX.cells[0].id)
    cell = os.environ.get("ELIZA_TEST_CELL", "").strip() or default
    if cell not in {c.id for c in MATRIX.cells}:
        _stop(unknown_cell(MATRIX, cell, "ELIZA_TEST_CELL"))
    return cell


def test_platform() -> str:
    """ELIZA_TEST_PLATFORM, default: the first platform; it must have a no-gate cell."""
    platform = os.environ.get("ELIZA_TEST_PLATFORM", "").strip() or MATRIX.platforms[0].id
    ids = [p.id for p in MATRIX.platforms]
    if platform not in ids:
        _stop(
            f"ELIZA_TEST_PLATFORM {platform!r} is not a platform of {MATRIX.source}"
            f"{did_you_mean(platform, ids)} ({valid_words(ids, 'platforms')})"
        )
    if not any(not c.gates for c in MATRIX.cells_of(platform)):
        _stop(f"ELIZA_TEST_PLATFORM {platform!r}: the matrix forms no no-gate cell for it to compare with")
    return platform


def test_cells(platform: str) -> frozenset[str]:
    """ELIZA_TEST_CELLS (comma-separated), cells of `platform`; empty: all of them."""
    wanted = frozenset(c.strip() for c in os.environ.get("ELIZA_TEST_CELLS", "").split(",") if c.strip())
    known = {c.id for c in MATRIX.cells_of(platform)}
    for cell in sorted(wanted - known):
        _stop(unknown_cell(MATRIX, cell, f"ELIZA_TEST_CELLS (platform {platform})"))
    return wanted


test_cell.__test__ = False  # type: ignore[attr-defined]
test_platform.__test__ = False  # type: ignore[attr-defined]
test_cells.__test__ = False  # type: ignore[attr-defined]
