"""Every command the README shows in a code block runs here as written (the quick start
included), except the one that is this suite itself, which must at least exist."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from eliza.core.layout import REPO_ROOT

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
