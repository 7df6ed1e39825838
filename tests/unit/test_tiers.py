"""Every test declares its tier (tests/conftest.py): a test in a folder without a tier and
without its own marker stops the collection, naming it; --tier chooses what runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from eliza.core.layout import REPO_ROOT

TEST = "def test_{name}() -> None:\n    assert {name!r}.isidentifier()\n"


def suite(root: Path, files: dict[str, str]) -> Path:
    """A scratch suite under the project's own conftest."""
    shutil.copy2(REPO_ROOT / "tests" / "conftest.py", root / "conftest.py")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    argv = [sys.executable, "-m", "pytest", str(root), "-q", "-p", "no:cacheprovider", "--rootdir", str(root)]
    return subprocess.run(
        [*argv, *args], cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_a_test_without_a_tier_fails_the_collection(tmp_path: Path) -> None:
    root = suite(
        tmp_path, {"unit/test_a.py": TEST.format(name="a"), "elsewhere/test_b.py": TEST.format(name="b")}
    )
    done = pytest(root)
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert "declare no tier" in done.stderr and "elsewhere/test_b.py::test_b" in done.stderr


def test_a_module_marker_declares_the_tier_and_tier_chooses(tmp_path: Path) -> None:
    root = suite(
        tmp_path,
        {
            "unit/test_a.py": TEST.format(name="a"),
            "elsewhere/test_b.py": "import pytest\n\npytestmark = pytest.mark.slow\n\n"
            + TEST.format(name="b"),
        },
    )
    default = pytest(root)
    assert default.returncode == 0 and "1 passed, 1 deselected" in default.stdout, default.stdout
    slow = pytest(root, "--tier", "slow")
    assert slow.returncode == 0 and "1 passed, 1 deselected" in slow.stdout, slow.stdout
    both = pytest(root, "--tier", "all")
    assert both.returncode == 0 and "2 passed" in both.stdout, both.stdout


def test_two_tiers_on_one_test_fail_the_collection(tmp_path: Path) -> None:
    root = suite(
        tmp_path,
        {"unit/test_a.py": "import pytest\n\npytestmark = pytest.mark.e2e\n\n" + TEST.format(name="a")},
    )
    assert pytest(root).returncode == 0  # its own marker wins over the folder's
    twice = "import pytest\n\npytestmark = [pytest.mark.e2e, pytest.mark.slow]\n\n" + TEST.format(name="a")
    (root / "unit" / "test_a.py").write_text(twice)
    done = pytest(root)
    assert done.returncode == 4 and "several" in done.stderr, done.stderr


def test_parallel_processes_take_whole_groups_and_the_checkout_tests_share_one(tmp_path: Path) -> None:
    checkout = "import pytest\n\npytestmark = pytest.mark.checkout\n\n"
    root = suite(
        tmp_path,
        {
            "unit/test_a.py": TEST.format(name="a") + "\n\n" + TEST.format(name="a2"),
            "unit/test_b.py": checkout + TEST.format(name="b"),
            "integration/test_c.py": checkout + TEST.format(name="c"),
        },
    )
    done = pytest(root, "-n", "2", "--dist", "loadgroup", "-vv")  # -q of pytest() cancels one -v
    assert done.returncode == 0, done.stdout + done.stderr
    ran = {}
    for line in done.stdout.splitlines():
        if " PASSED " in line and line.startswith("[gw"):
            ran[line.split(" PASSED ", 1)[1].strip()] = line.split("]", 1)[0]
    assert set(ran) == {
        "unit/test_a.py::test_a@unit/test_a.py",
        "unit/test_a.py::test_a2@unit/test_a.py",
        "unit/test_b.py::test_b@checkout",
        "integration/test_c.py::test_c@checkout",
    }, done.stdout
    assert ran["unit/test_b.py::test_b@checkout"] == ran["integration/test_c.py::test_c@checkout"]
    assert ran["unit/test_a.py::test_a@unit/test_a.py"] == ran["unit/test_a.py::test_a2@unit/test_a.py"]


def test_the_groups_go_out_heaviest_tier_first_and_larger_groups_first(tmp_path: Path) -> None:
    root = suite(
        tmp_path,
        {
            "unit/test_a.py": TEST.format(name="a"),
            "native/test_n.py": TEST.format(name="n") + "\n\n" + TEST.format(name="n2"),
            "integration/test_one.py": TEST.format(name="one"),
            "integration/test_two.py": TEST.format(name="two") + "\n\n" + TEST.format(name="two2"),
            "unit/test_z.py": TEST.format(name="z") + "\n\n" + TEST.format(name="z2"),
        },
    )
    done = pytest(root, "--collect-only")
    assert done.returncode == 0, done.stdout + done.stderr
    order = [line.split("::")[-1] for line in done.stdout.splitlines() if "::" in line]
    # e2e (larger group first), then the cell tier, then unit (larger group first); a
    # group's tests in their own order.
    assert order == ["test_two", "test_two2", "test_one", "test_n", "test_n2", "test_z", "test_z2", "test_a"]
