"""`--dry-run` prints the plan and touches nothing: in a fresh copy of the working tree it
creates no build/ folder, and its JSON form lists every step of every declared check.
The same flag works for ci-check and bench-<platform>."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from eliza.formats.matrix_yaml import load_matrix
from tests.ci.helpers import env_for, history_clone
from tests.ci.helpers import nox as run_nox

# sessions on this checkout: never beside another such test (tests/conftest.py)
pytestmark = pytest.mark.checkout


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return history_clone(tmp_path_factory.mktemp("dry") / "repo")


def nox(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_nox(root, "-s", *args, env=env_for(root), timeout=300)


def test_verify_dry_run_plans_every_check_and_writes_nothing(fresh: Path) -> None:
    done = nox(fresh, "verify", "--", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (fresh / "build").exists(), "a dry run created build/"
    plan = json.loads(done.stdout)
    matrix = load_matrix(fresh / "matrix.yaml")
    declared = {(c.id, k.id) for c in matrix.cells for k in c.checks}
    planned = {(s["cell"], s["check"]) for s in plan["steps"] if s["step"] != "build"}
    assert planned == declared
    assert plan["counts"]["keep"] == 0  # nothing was ever verified in this copy
    runs = [s for s in plan["steps"] if s["step"] == "run"]
    assert runs and all(s["reason"] for s in runs)
    assert {s["role"] for s in plan["steps"] if s["step"] == "build"} >= {"subject", "baseline"}


def test_verify_dry_run_text_groups_steps_by_cell(fresh: Path) -> None:
    done = nox(fresh, "verify", "--", "--dry-run", "--cell", "linux-cpu.mlx")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "linux-cpu.mlx:" in lines and "linux-cpu.none:" in lines  # the reference cell, as a build
    at = lines.index("linux-cpu.none:")
    assert lines[at + 1].startswith("  build  linux-cpu.none as reference")
    assert lines[-1].startswith("plan: ")
    assert not (fresh / "build").exists()


def test_bench_and_ci_check_take_dry_run_too(fresh: Path) -> None:
    bench = nox(fresh, "bench-linux-cpu", "--", "--dry-run", "--json")
    assert bench.returncode == 0, bench.stderr[-2000:]
    steps = json.loads(bench.stdout)["steps"]
    assert {s["check"] for s in steps if s["step"] == "run"} == {
        "byte-identity-reference",
        "byte-identity-gates",
        "byte-identity-baseline",
        "byte-identity-drafter",
    }
    check = nox(fresh, "ci-check", "--", "--cell", "linux-cpu.litert", "--artifacts", "nowhere", "--dry-run")
    assert check.returncode == 0, check.stderr[-2000:]
    assert "linux-cpu.litert:" in check.stdout.splitlines()
    assert not (fresh / "build").exists()


def test_json_without_dry_run_is_a_usage_error(fresh: Path) -> None:
    done = nox(fresh, "verify", "--", "--json")
    assert done.returncode == 2
    assert "--json goes with --dry-run" in done.stderr
