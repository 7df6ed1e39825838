"""Builds write only below build/: the repository root keeps its tracked entries."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from eliza.core.layout import REPO_ROOT

# sessions on this checkout: never beside another such test (tests/conftest.py)
pytestmark = pytest.mark.checkout

# What the tools of a checkout may create at the top level (all ignored by .gitignore).
EXPECTED_UNTRACKED = {"build", ".nox", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".benchmarks"}


def test_a_build_writes_nothing_at_the_repository_root(library_path: Path) -> None:
    assert library_path.is_file()  # the fixture built (or reused) a cell just now
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    tops = {name.split("/", 1)[0] for name in tracked}
    present = {p.name for p in REPO_ROOT.iterdir() if p.name != ".git"}
    strays = sorted(
        n for n in present - tops - EXPECTED_UNTRACKED if not n.endswith(".egg-info") and n != "__pycache__"
    )
    assert strays == [], f"written at the repository root: {strays}"
