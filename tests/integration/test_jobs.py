"""`nox -s verify -- --jobs N` in a copy of the repository: two linux-cpu cells verified one
step at a time, then again (--rerun) with four at once; the evidence is the same (every
record's state and fingerprint) and so are the lines, in the same order; the timing table
gives the checks' wall time beside the steps' sum."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci.helpers import copy_tree, env_for, run_only
from tests.signing import predicate

# The slow tier (nox -s tests -- --tier slow): the executor's side-by-side path, the same
# evidence and lines at one job and at several, and wall-time steps alone, is
# test_jobs_run_side_by_side_with_the_same_evidence_and_lines_and_alone_steps_alone in
# tests/unit/test_executor.py, with fake runners; this runs it on real cells.
pytestmark = pytest.mark.slow

CELLS = ("linux-cpu.none", "linux-cpu.litert")


@pytest.fixture(scope="module", autouse=True)
def _can_build_linux_cpu() -> None:
    from eliza.app.project import capability, load_project_matrix

    can = capability(load_project_matrix().platform("linux-cpu"))
    if not can.can_build:
        pytest.skip(f"linux-cpu cannot be built on this host: {can.build_reason}")


def verify(repo: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    cells = [a for c in CELLS for a in ("--cell", c)]
    return subprocess.run(
        [sys.executable, "-m", "nox", "-s", "verify", "--", *cells, *extra],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )


def evidence(repo: Path) -> dict[tuple[str, str], tuple[str, str]]:
    out = {}
    for path in sorted((repo / "build" / "evidence").glob("*__*.json")):
        record = predicate(path)
        out[(record["cell"], record["check"])] = (record["status"], record["fingerprint"]["key"])
    return out


def check_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The per-step lines (cell, check, state), without the reasons' figures."""
    said = [line.removeprefix("nox > ") for line in done.stderr.splitlines()]
    return [" ".join(line.split()[:3]) for line in said if line.startswith("  linux-cpu.")]


def test_one_job_and_four_give_the_same_evidence_and_lines(tmp_path: Path) -> None:
    repo = copy_tree(tmp_path / "repo")
    run_only(repo, ["build", "selector", "consumer", "gate-fallthrough", "abi"])
    env = env_for(repo)  # the caller's Conan cache: llama.cpp is not rebuilt
    one = verify(repo, env, "--jobs", "1")
    assert one.returncode == 0, one.stderr[-3000:]
    first = evidence(repo)
    assert {check for _, check in first} >= {"build", "selector", "consumer", "gate-fallthrough", "abi"}
    four = verify(repo, env, "--jobs", "4", "--rerun")
    assert four.returncode == 0, four.stderr[-3000:]
    assert evidence(repo) == first
    assert check_lines(four) == check_lines(one) and check_lines(one)
    table = [line for line in four.stderr.splitlines() if "  checks " in line]
    assert table and "4 at once" in table[0], four.stderr[-2000:]
    assert "1 at once" in next(line for line in one.stderr.splitlines() if "  checks " in line)
