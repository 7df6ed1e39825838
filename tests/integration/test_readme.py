"""Every command the README shows in a code block runs here as written (the quick start
included), except the one that is this suite itself, which must at least exist."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from eliza.app.project import capability, load_project_matrix
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import CheckKind

# sessions on this checkout: never beside another such test (tests/conftest.py)
pytestmark = pytest.mark.checkout


README = REPO_ROOT / "README.md"
# The test suite cannot run itself from inside itself; it is checked to exist instead.
SELF = "nox -s tests"


def readme_commands() -> list[str]:
    blocks = re.findall(r"```(?:bash|sh)\n(.*?)```", README.read_text(), flags=re.S)
    commands: list[str] = []
    for block in blocks:
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                commands += [part.strip() for part in line.split("&&")]
    return commands


def test_the_readme_shows_commands() -> None:
    assert SELF in readme_commands() and len(readme_commands()) >= 3


@pytest.mark.parametrize("command", [c for c in readme_commands() if c != SELF])
def test_a_readme_command_runs_as_written(command: str) -> None:
    done = subprocess.run(
        shlex.split(command), cwd=REPO_ROOT, capture_output=True, text=True, timeout=1800, check=False
    )
    assert done.returncode == 0, f"{command}\n{(done.stdout + done.stderr)[-4000:]}"
    assert "Traceback" not in done.stdout + done.stderr
    if command.endswith("nox -s verify"):
        assert_verified_what_this_host_builds(done.stdout + done.stderr)


def assert_verified_what_this_host_builds(output: str) -> None:
    """What the README promises of verify: every platform this host builds (and is not a
    slow build) has every cell built and VERIFIED, and where the host runs it, its selector
    too; an exit status 0 alone would pass with a platform silently left out."""
    matrix = load_project_matrix()
    report = json.loads((REPO_ROOT / "build" / "report" / "report.json").read_text())
    states = {(e["cell"], e["check"]): e["state"] for row in report["rows"] for e in row["entries"]}
    checked = 0
    for platform in matrix.platforms:
        can = capability(platform)
        if not can.can_build or platform.slow_build:
            continue
        for cell in matrix.cells_of(platform.id):
            if cell.variant is not None and cell.variant.slow_build:
                continue  # built once asked for (README: the sanitizer cell)
            assert states[(cell.id, "build")] == "verified", (cell.id, states[(cell.id, "build")])
            checked += 1
            if can.can_run and cell.check_of(CheckKind.SELECTOR) is not None:
                assert states[(cell.id, "selector")] == "verified", cell.id
    assert checked >= 8, "the linux-cpu and linux-arm64 cells"
    assert re.search(r"\d+ of \d+ checks verified", output)


def test_the_suite_session_exists() -> None:
    listed = subprocess.run(
        ["nox", "-l"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert re.search(rf"^[*-] {re.escape(SELF.split()[-1])} ->", listed, flags=re.M), listed


def test_paths_the_readme_names_exist() -> None:
    named = set(
        re.findall(r"`((?:docs|eliza|native|tests|ci|templates|conan)/[\w./-]*)`", README.read_text())
    )
    missing = sorted(p for p in named if "<" not in p and not (REPO_ROOT / p).exists())
    assert not missing, f"the README names paths that do not exist: {missing}"
    assert Path(REPO_ROOT / ".ci" / "run").is_file()
