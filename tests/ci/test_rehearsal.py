"""The generated pipelines for linux-cpu, run by real CI runners (act on the GitHub
workflow, gitlab-ci-local on the GitLab pipeline) from a snapshot with empty caches: the
build job compiles llama.cpp once per build variant (release, ASan+UBSan), the check jobs
compile nothing, and the report job's report agrees with `nox -s verify` on this host.
Then two planted failures, each in a second pipeline whose Conan remote holds the first's
packages and whose every job starts with an empty cache of its own (`--cache per-job`: no
job compiles llama.cpp, so each took it from the remote):
- a case planted to fail in the gated cells only: the runner exits non-zero, the gated
  cells' check jobs fail, the no-gate cell's passes, and the report still comes out with
  the gated cells FAILED;
- a gate's module that does not compile: the build job fails, the cells without that gate
  are still checked and pass, and the cells with it are FAILED with the build error.

Slow (cold llama.cpp builds in the jobs' empty Conan home, then every check of five cells,
per runner): `nox -s tests -- --tier slow` runs it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eliza.adapters.ci_runners import RUNNERS
from eliza.app.project import load_project_matrix
from eliza.core.ci_jobs import job_id
from tests.ci.helpers import env_for, git_copy, nox

pytestmark = pytest.mark.slow

PLATFORM = "linux-cpu"
CELLS = [c for c in load_project_matrix().cells_of(PLATFORM)]
SLOW_VARIANT_CELLS = [c.id for c in CELLS if c.variant is not None and c.variant.slow_build]
GATED = [c.id for c in CELLS if c.variant is None and c.key != "none"]
# runner -> the --workdir of its first rehearsal, whose remote a second pipeline starts with
FIRST_RUN: dict[str, Path] = {}
PLANTED_CASE = "no-env-generates-as-the-no-gate-build | gguf | - | generates | generates"
BROKEN_GATE = "mlx"


def states(report: Path) -> dict[tuple[str, str], str]:
    rows = json.loads(report.read_text())["rows"]
    return {
        (e["cell"], e["check"]): e["state"]
        for row in rows
        for e in row["entries"]
        if e["cell"].startswith(PLATFORM)
    }


def report_of(said: str) -> Path:
    """The report job's report.json, as the rehearsal names it (a runner's state folder
    keeps each job's checkout, so a search of the workdir could find another)."""
    mark = "the report job's report: "
    lines = [line.split(mark, 1)[1].strip() for line in said.splitlines() if mark in line]
    assert lines, f"the rehearsal named no report: {said[-4000:]}"
    return Path(lines[-1])


def results(said: str) -> dict[str, str]:
    """Job -> result, from the rehearsal's table ("<job> <result> <wall s> <said>")."""
    rows = (line.split("nox > ", 1)[-1].split() for line in said.splitlines())
    return {row[0]: row[1] for row in rows if len(row) == 4 and row[1] in ("success", "failure")}


def rehearse(repo: Path, work: Path, runner: str, *more: str) -> tuple[int, str]:
    done = nox(
        repo, "-s", "ci-rehearse", "--", "--runner", runner, "--workdir", str(work),
        "--only-platform", PLATFORM, *more, env=env_for(repo), timeout=5400,
    )  # fmt: skip
    return done.returncode, done.stderr


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A verify of the linux-cpu cells on this host (the sanitizer cell named: verify runs a
    slow-build variant only then), its report.json."""
    host = git_copy(tmp_path_factory.mktemp("verify"))
    cells = [a for c in CELLS for a in ("--cell", c.id)]
    done = nox(host, "-s", "verify", "--", *cells, env=env_for(host), timeout=5400)
    assert done.returncode == 0, done.stderr[-4000:]
    return host / "build" / "report" / "report.json"


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_runner_compiles_llama_once_and_agrees_with_verify(
    tmp_path: Path, runner: str, verified: Path
) -> None:
    repo = git_copy(tmp_path / "repo")
    FIRST_RUN[runner] = tmp_path / "work"
    status, said = rehearse(repo, tmp_path / "work", runner, "--compare", str(verified))
    assert status == 0, said[-6000:]
    assert f"llama.cpp compiled {1 + len(SLOW_VARIANT_CELLS)} time(s) in all" in said
    assert "agrees with" in said


def second_pipeline(repo: Path, work: Path, runner: str) -> tuple[int, str, dict[str, str]]:
    """A rehearsal of `repo` with the first one's remote and a cache per job: (status, what
    it said, job -> result)."""
    first = FIRST_RUN.get(runner)
    seeded = ["--remote-from", str(first)] if first else []
    status, said = rehearse(repo, work, runner, "--cache", "per-job", *seeded)
    if first:  # the remote had every llama.cpp binary: no job compiled one
        assert "llama.cpp compiled 0 time(s) in all" in said, said[-6000:]
    return status, said, results(said)


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_case_planted_to_fail_in_the_gated_cells_fails_their_jobs_only(tmp_path: Path, runner: str) -> None:
    repo = git_copy(tmp_path / "repo")
    cases = repo / "native" / "cases" / "gate-fallthrough.cases"
    text = cases.read_text()
    assert PLANTED_CASE in text
    cases.write_text(
        text.replace(
            PLANTED_CASE, PLANTED_CASE.replace("| generates | generates", "| open-error planted | generates")
        )
    )
    status, said, ran = second_pipeline(repo, tmp_path / "work", runner)
    assert status != 0, said[-6000:]
    for cell in GATED:
        assert ran[job_id(cell)] == "failure", ran
    assert ran["linux-cpu_none"] == "success", ran
    found = states(report_of(said))
    for cell in GATED:
        assert found[(cell, "gate-fallthrough")] == "failed", (cell, found)
    assert found[("linux-cpu.none", "gate-fallthrough")] in ("verified", "n/a")
    assert "verified" not in {found[(c, "gate-fallthrough")] for c in GATED}


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_gate_that_does_not_compile_fails_its_cells_and_the_others_are_still_checked(
    tmp_path: Path, runner: str
) -> None:
    repo = git_copy(tmp_path / "repo")
    module = repo / "native" / "src" / "backends" / BROKEN_GATE / "common.cpp"
    module.write_text("#error planted: the module of this gate does not compile\n" + module.read_text())
    status, said, ran = second_pipeline(repo, tmp_path / "work", runner)
    assert status != 0, said[-6000:]
    assert ran[f"build-{PLATFORM}"] == "failure", ran
    broken = [c.id for c in CELLS if BROKEN_GATE in {g.id for g in c.gates}]
    assert broken, "the matrix has cells with the gate"
    found = states(report_of(said))
    for cell in CELLS:
        job = job_id(cell.id)
        if cell.id in broken:
            assert ran[job] == "failure", (job, ran)
            assert found[(cell.id, "build")] == "failed", (cell.id, found)
        else:
            assert ran[job] == "success", (job, ran)
            assert found[(cell.id, "build")] == "verified", (cell.id, found)
