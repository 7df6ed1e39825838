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
    named = {
        a.path
        for item in read_records([repo / "build" / "evidence"], {})
        if item.record is not None
        for a in item.record.artifacts
    }
    stored = {
        p.relative_to(repo).as_posix() for p in (repo / "build" / "artifacts").rglob("*") if p.is_file()
    }
    assert stored and stored <= named, stored - named  # nothing the records do not name
    assert all(p.endswith(("xml", "jsonl", "json", RECORD_SUFFIX)) for p in stored), stored
