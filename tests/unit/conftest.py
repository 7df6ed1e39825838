"""Fixtures of the unit tests: no compiler, no build."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import Matrix
from eliza.formats.matrix_yaml import load_matrix


@pytest.fixture()
def matrix(tmp_path: Path) -> Matrix:
    """The project's matrix, written into tmp_path (a test may change its copy)."""
    path = tmp_path / "matrix.yaml"
    shutil.copy2(REPO_ROOT / "matrix.yaml", path)
    return load_matrix(path)
