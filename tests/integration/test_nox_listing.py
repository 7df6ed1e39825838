"""`nox -l` lists the sessions of the matrix it is pointed at, and shows the matrix's
warnings and errors on every invocation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from eliza.core.layout import REPO_ROOT

# sessions on this checkout: never beside another such test (tests/conftest.py)
pytestmark = pytest.mark.checkout


def nox_list(matrix: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nox", "-l"],
        cwd=REPO_ROOT,
        env={
            "ELIZA_MATRIX": str(matrix),
            "PATH": str(Path(sys.executable).parent),
            "HOME": str(matrix.parent),
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_a_matrix_warning_is_shown_by_nox_l(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    platform = data["platforms"][-1]["id"]
    foreign = next(
        g["id"] for g in data["gates"] if g["id"] not in data["platforms"][-1].get("allowed_gates", [])
    )
    data["cells"]["exclude"] = [{"platform": platform, "gates": [foreign]}]
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    done = nox_list(matrix)
    assert done.returncode == 0, done.stderr
    assert f"warning: {matrix}:" in done.stderr and "exclude matches no cell" in done.stderr
    assert f"build-{platform}" in done.stdout


def test_a_broken_matrix_stops_nox_l_with_file_line_and_key(tmp_path: Path) -> None:
    text = (REPO_ROOT / "matrix.yaml").read_text().replace("llama_backend: cpu", "llama_backend: cpuu", 1)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(text)
    done = nox_list(matrix)
    assert done.returncode != 0
    line = next(i for i, t in enumerate(text.splitlines(), start=1) if "cpuu" in t)
    assert f"{matrix}:{line}: platforms[0].llama_backend" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_no_op_build_prints_a_few_lines() -> None:
    """The first platform's no-gate cell: the platform's session would also build its
    sanitizer variant, a cold llama.cpp build under ASan that this test does not need."""
    platform = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())["platforms"][0]["id"]
    command = [sys.executable, "-m", "nox", "-s", f"build-{platform}.none"]
    subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=1800, check=True)
    again = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=True)
    lines = (again.stdout + again.stderr).splitlines()
    assert len(lines) < 15, "\n".join(lines)
    assert any("llama.cpp built 0 time(s)" in line for line in lines)
    assert not any("uv binary" in line for line in lines)
