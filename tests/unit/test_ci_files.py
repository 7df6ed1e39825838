"""The CI workflow is generated from the matrix and checked in without drift."""

from __future__ import annotations

from pathlib import Path

import yaml

from eliza.app.ci_files import templates_dir, workflows_dir, write_or_check
from eliza.core.ci_jobs import job_id
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import Matrix
from eliza.formats.ci_workflow import MARKER
from eliza.formats.ci_workflow import render_workflow as render_with
from eliza.formats.matrix_yaml import load_matrix, parse_matrix

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")


def render_workflow(matrix: Matrix) -> dict[str, str]:
    return render_with(matrix, templates_dir(REPO_ROOT))


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
    assert (workflows_dir(REPO_ROOT) / "matrix.yml").read_text().startswith(MARKER)


def test_drift_is_detected(tmp_path: Path) -> None:
    (tmp_path / "matrix.yml").write_text(
        render_workflow(MATRIX)["matrix.yml"].replace("ubuntu-24.04", "ubuntu-22.04")
    )
    assert write_or_check(check=True, out_dir=tmp_path) == 1
    assert write_or_check(check=False, out_dir=tmp_path) == 0
    assert write_or_check(check=True, out_dir=tmp_path) == 0


def test_the_jobs_follow_the_cells() -> None:
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    dropped = MATRIX.cells[-1]
    data["cells"]["exclude"] = [{"platform": dropped.platform.id, "gates": [g.id for g in dropped.gates]}]
    smaller = parse_matrix(yaml.safe_dump(data), "m.yaml")
    assert [c.id for c in smaller.cells] == [c.id for c in MATRIX.cells[:-1]]
    jobs = yaml.safe_load(render_workflow(smaller)["matrix.yml"])["jobs"]
    assert len(jobs) == len(smaller.cells) + 1
    assert job_id(dropped.id) not in jobs
