"""The layering of eliza/ is enforced: `lint-imports` (run by `nox -s lint`) passes on the
tree and fails, naming the import, when a module breaks a contract."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eliza.core.layout import REPO_ROOT

LINT_IMPORTS = shutil.which("lint-imports")
pytestmark = pytest.mark.skipif(LINT_IMPORTS is None, reason="import-linter is not installed (ci/setup.sh)")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    assert LINT_IMPORTS is not None
    return subprocess.run(
        [LINT_IMPORTS, "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": str(Path(sys.executable).parent)},
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture()
def scratch(tmp_path: Path) -> Path:
    shutil.copytree(REPO_ROOT / "eliza", tmp_path / "eliza", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_every_contract(scratch: Path) -> None:
    done = lint_imports(scratch)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract", "chain"),
    [
        ("eliza/core/clock.py", "import time\n", "core is pure", "eliza.core.clock -> time"),
        (
            "eliza/core/shortcut.py",
            "from eliza.app import project\n",
            "eliza layers",
            "eliza.core.shortcut -> eliza.app.project",
        ),
        (
            "eliza/formats/runner.py",
            "import subprocess\n",
            "formats read and write files but run nothing",
            "eliza.formats.runner -> subprocess",
        ),
    ],
)
def test_a_forbidden_import_breaks_the_lint(
    scratch: Path, module: str, line: str, contract: str, chain: str
) -> None:
    (scratch / module).write_text(f'"""A module that breaks the layering."""\n\n{line}')
    done = lint_imports(scratch)
    assert done.returncode != 0
    assert f"{contract}" in done.stdout and "BROKEN" in done.stdout
    assert chain in done.stdout, done.stdout


def test_a_session_importing_another_breaks_the_lint(scratch: Path) -> None:
    module = scratch / "eliza" / "app" / "sessions" / "shortcut.py"
    module.write_text('"""A session that calls another."""\n\nfrom eliza.app.sessions import verify\n')
    done = lint_imports(scratch)
    assert done.returncode != 0
    assert "sessions are independent" in done.stdout and "BROKEN" in done.stdout
    assert "eliza.app.sessions.shortcut -> eliza.app.sessions.verify" in done.stdout, done.stdout


def test_a_cycle_through_an_import_inside_a_function_breaks_the_lint(scratch: Path) -> None:
    # matrix imports cell_id at the top; cell_id importing matrix inside a function closes a
    # circle a reader of cell_id would not see.
    module = scratch / "eliza" / "core" / "cell_id.py"
    module.write_text(
        module.read_text()
        + "\n\ndef _matrix_of() -> object:\n    from eliza.core import matrix\n\n    return matrix\n"
    )
    done = lint_imports(scratch)
    assert done.returncode != 0
    assert "no import cycles" in done.stdout and "BROKEN" in done.stdout
    assert "No cycles are allowed in eliza.core" in done.stdout, done.stdout
    assert ".matrix -> .cell_id" in done.stdout, done.stdout
