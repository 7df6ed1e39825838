"""A CI build job whose gated cell does not compile: the job fails naming it, its artifact
still holds the no-gate cell (which a check job verifies) and why the gated one did not
build, and the gated cell's check job fails with that build error as its checks' ERROR:
evidence, not a crash that leaves none."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.ci.helpers import copy_tree, env_for, run_only
from tests.ci.helpers import nox as run_nox
from tests.signing import predicate

PLANTED = "#error planted: the module of this gate does not compile\n"


def nox(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_nox(root, "-s", *args, env=env_for(root))


# The slow tier (26 s: a copy compiles a cell and checks another from the artifact): the
# policy it ends in is held by the default tier's tests/unit/test_ci_build_job.py (a failed
# cell in the artifact's manifest, the job's exit status) and tests/unit/test_executor.py (a
# build failure becomes error evidence of exactly its steps).
@pytest.mark.slow
def test_the_cells_that_built_are_checked_and_the_one_that_did_not_reports_why(tmp_path: Path) -> None:
    repo = copy_tree(tmp_path / "repo")
    run_only(repo, ("build", "selector"))
    module = repo / "native" / "src" / "backends" / "mlx" / "common.cpp"
    module.write_text(PLANTED + module.read_text())
    cells = ("--cell", "linux-cpu.none", "--cell", "linux-cpu.mlx")
    built = nox(repo, "ci-build", "--", "--platform", "linux-cpu", *cells, "--out", "build/ci")
    assert built.returncode != 0
    assert "1 of 2 cell(s) of linux-cpu failed to build: linux-cpu.mlx." in built.stderr, built.stderr[-3000:]
    assert (repo / "build" / "ci" / "cells-linux-cpu.tar.gz").is_file()

    # each check job in a checkout of its own, as CI runs them
    for cell, passes in (("linux-cpu.none", True), ("linux-cpu.mlx", False)):
        job = copy_tree(tmp_path / cell)
        run_only(job, ("build", "selector"))
        (job / "build" / "ci").mkdir(parents=True)
        (job / "build" / "ci" / "cells-linux-cpu.tar.gz").write_bytes(
            (repo / "build" / "ci" / "cells-linux-cpu.tar.gz").read_bytes()
        )
        check = nox(job, "ci-check", "--", "--cell", cell, "--artifacts", "build/ci")
        assert (check.returncode == 0) == passes, check.stderr[-3000:]
        assert "llama.cpp built 0 time(s) in this job" in check.stderr or not passes
        records = {
            data["check"]: data
            for data in (predicate(p) for p in (job / "build" / "evidence").glob("*__*.json"))
            if data["cell"] == cell
        }
        assert set(records) == {"build", "selector"}, records
        for data in records.values():
            if passes:
                assert data["status"] == "passed", data["reason"]
            else:
                assert data["status"] == "error", data
                said = "could not build it" if data["check"] == "build" else "failed to build"
                assert said in data["reason"] and "planted" in data["reason"], data["reason"]
        report = json.loads((job / "build" / "report" / "report.json").read_text())
        states = {
            e["state"]
            for row in report["rows"]
            for e in row["entries"]
            if e["cell"] == cell and e["check"] in records
        }
        assert states == ({"verified"} if passes else {"failed"}), states  # an error is FAILED there
