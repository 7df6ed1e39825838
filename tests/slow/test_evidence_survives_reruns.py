"""Evidence a later run cannot break, end to end in a copy of the repository: the gated
cells' gate-fallthrough records name the platform's junit file and the no-gate cell's
runs, which re-running the no-gate cell alone writes again. They stay VERIFIED through
`--rerun --cell linux-cpu.none`, then `--rerun --cell linux-cpu.mlx`, then a plain verify
(which runs nothing), and the artifact store holds exactly what the records name.

Slow tier: four verifies of real builds. The default tiers prove the same path in parts:
tests/unit/test_artifact_store.py (a shared output written again leaves the record's copy
as it was; copies no record names are collected) and tests/unit/test_verify_plan.py
(a record whose shared artifact was written again runs again rather than being kept)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eliza.core.evidence import RECORD_SUFFIX
from eliza.core.report.states import GridState
from eliza.formats.evidence_json import read_records
from tests.ci.helpers import copy_tree, env_for, nox, run_only

pytestmark = pytest.mark.slow

CELLS = ("linux-cpu.none", "linux-cpu.mlx")


def states(repo: Path) -> dict[tuple[str, str], str]:
    report = json.loads((repo / "build" / "report" / "report.json").read_text())
    return {
        (e["cell"], e["check"]): e["state"]
        for row in report["rows"]
        for e in row["entries"]
        if e["cell"] in CELLS and e["check"] in ("build", "gate-fallthrough")
    }


def store_and_names(repo: Path) -> tuple[set[str], set[str]]:
    """(the files in the artifact store, the artifact paths the records name)."""
    named = {
        a.path
        for item in read_records([repo / "build" / "evidence"], {})
        if item.record is not None
        for a in item.record.artifacts
    }
    store = repo / "build" / "artifacts"
    return {p.relative_to(repo).as_posix() for p in store.rglob("*") if p.is_file()}, named


def test_rerunning_one_cell_leaves_every_other_cells_evidence_as_it_was(tmp_path: Path) -> None:
    repo = copy_tree(tmp_path / "repo")
    run_only(repo, ["build", "gate-fallthrough"])
    env = env_for(repo)
    cells = [a for c in CELLS for a in ("--cell", c)]
    done = nox(repo, "-s", "verify", "--", *cells, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    first = states(repo)
    assert first and set(first.values()) == {GridState.VERIFIED.value}, first
    for argv in (["--rerun", "--cell", "linux-cpu.none"], ["--rerun", "--cell", "linux-cpu.mlx"], cells):
        done = nox(repo, "-s", "verify", "--", *argv, env=env)
        assert done.returncode == 0, done.stderr[-4000:]
        assert states(repo) == first, argv
        assert "INVALID" not in done.stderr, done.stderr[-4000:]
    stored, named = store_and_names(repo)
    assert stored and stored <= named, stored - named  # nothing the records do not name
    assert all(p.endswith(("xml", "jsonl", "json", RECORD_SUFFIX)) for p in stored), stored


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_verify_killed_part_way_then_run_again_ends_as_an_uninterrupted_one(
    tmp_path: Path, jobs: str
) -> None:
    """`kill -9` of the whole verify (its process group: nox, the builds, the suites) once the
    first record is written, then verify again: every state is the uninterrupted run's,
    and the store holds only what the records name."""
    repo = copy_tree(tmp_path / "repo")
    run_only(repo, ["build", "gate-fallthrough"])
    env = env_for(repo)
    cells = [a for c in CELLS for a in ("--cell", c)]
    child = subprocess.Popen(
        [sys.executable, "-m", "nox", "-s", "verify", "--", *cells, "--jobs", jobs],
        cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert child.stdout is not None
    for line in child.stdout:
        if line.rstrip().endswith(" ok") and any(c in line for c in CELLS):
            os.killpg(child.pid, signal.SIGKILL)
            break
    child.wait(timeout=600)
    assert child.returncode != 0, "the verify ended before it could be killed"
    done = nox(repo, "-s", "verify", "--", *cells, "--jobs", jobs, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert set(states(repo).values()) == {GridState.VERIFIED.value}, states(repo)
    stored, named = store_and_names(repo)
    assert stored <= named, stored - named
