"""The CI workflow is generated from the matrix and checked in without drift."""

from __future__ import annotations

from pathlib import Path

import yaml

from eliza.ci_files import MARKER, OUT_DIR, job_id, render_workflow, write_or_check
from eliza.matrix.loader import load_matrix, parse_matrix
from eliza.paths import REPO_ROOT

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")


def test_one_job_per_cell_plus_report() -> None:
    workflow = yaml.safe_load(render_workflow(MATRIX)["matrix.yml"])
    jobs = workflow["jobs"]
    assert set(jobs) == {job_id(c.id) for c in MATRIX.cells} | {"report"}
    for cell in MATRIX.cells:
        job = jobs[job_id(cell.id)]
        assert job["runs-on"] == list(cell.platform.ci_runner)
        assert f"nox -s verify -- --cell {cell.id}" in [s.get("run") for s in job["steps"]]
        assert ("if" in job) == cell.platform.slow_build
    assert set(jobs["report"]["needs"]) == {job_id(c.id) for c in MATRIX.cells}


def test_checked_in_workflow_matches_the_matrix() -> None:
    assert write_or_check(check=True) == 0, "run `nox -s ci-files`"
    assert (OUT_DIR / "matrix.yml").read_text().startswith(MARKER)


def test_drift_is_detected(tmp_path: Path) -> None:
    (tmp_path / "matrix.yml").write_text(
        render_workflow(MATRIX)["matrix.yml"].replace("ubuntu-24.04", "ubuntu-22.04")
    )
    assert write_or_check(check=True, out_dir=tmp_path) == 1
    assert write_or_check(check=False, out_dir=tmp_path) == 0
    assert write_or_check(check=True, out_dir=tmp_path) == 0


def test_a_new_cell_appears_as_a_job() -> None:
    text = (REPO_ROOT / "matrix.yaml").read_text()
    smaller = parse_matrix(text.replace("[[], [litert], [mlx], [litert, mlx]]", "[[], [litert]]"), "m.yaml")
    assert len(smaller.cells) < len(MATRIX.cells)
    jobs = yaml.safe_load(render_workflow(smaller)["matrix.yml"])["jobs"]
    assert len(jobs) == len(smaller.cells) + 1
