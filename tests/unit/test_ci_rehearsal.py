"""The rehearsal hands the generated pipelines to real runners: which jobs a run takes,
the runners' command lines (host mode, offline, the stand-ins, secrets by name), what is
read back from their logs, and the GitLab pipeline made from the same job graph (checked by
gitlab-ci-local itself when ci/setup.sh installed it)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from eliza.adapters import ci_runners
from eliza.app.errors import CiFailed, UsageError
from eliza.app.project import current
from eliza.app.sessions.ci_rehearsal import (
    PER_JOB,
    SHARED,
    RehearseOptions,
    builds_said,
    check_jobs_that_compiled,
    compare_states,
    conan_remote,
    parse_options,
    selected_jobs,
    trust_in_policy,
)
from eliza.core.ci_jobs import REPORT_JOB
from eliza.core.layout import REPO_ROOT
from eliza.formats.attestation import SigningKey
from eliza.formats.ci_workflow import GITLAB_CI, WORKFLOW, pipeline_of
from eliza.formats.matrix_yaml import load_matrix

WORKFLOW_DATA = yaml.safe_load((REPO_ROOT / WORKFLOW).read_text())
GITLAB_DATA = yaml.safe_load((REPO_ROOT / GITLAB_CI).read_text())
PIPELINE = pipeline_of(load_matrix(REPO_ROOT / "matrix.yaml"), REPO_ROOT / "templates" / "ci")


def options(*platforms: str, slow: bool = False) -> RehearseOptions:
    return RehearseOptions(
        runner="act", workdir=None, slow=slow, only_platform=platforms, compare=None, remote_from=None
    )


def test_one_platform_is_its_build_job_its_check_jobs_and_the_report() -> None:
    jobs = selected_jobs(PIPELINE, options("linux-cpu"))
    cpu_checks = [c.id for c in PIPELINE.checks if c.platform == "linux-cpu"]
    assert jobs == ["build-linux-cpu", *cpu_checks, REPORT_JOB]
    everything = selected_jobs(PIPELINE, options())
    slow = {j.id for j in PIPELINE.builds if j.slow} | {j.id for j in PIPELINE.checks if j.slow}
    assert slow and not slow & set(everything)
    assert slow <= set(selected_jobs(PIPELINE, options(slow=True)))


def test_a_part_of_the_workflow_keeps_only_the_needs_it_has() -> None:
    keep = selected_jobs(PIPELINE, options("linux-cpu"))
    part = ci_runners.subset_workflow(WORKFLOW_DATA, keep)
    assert list(part["jobs"]) == keep
    assert part["jobs"][REPORT_JOB]["needs"] == keep[:-1]
    assert part["jobs"]["linux-cpu_none"]["steps"] == WORKFLOW_DATA["jobs"]["linux-cpu_none"]["steps"]
    with pytest.raises(ValueError, match="no job nope"):
        ci_runners.subset_workflow(WORKFLOW_DATA, ["nope"])


def test_act_runs_in_host_mode_offline_with_the_stand_ins_and_secrets_by_name(tmp_path: Path) -> None:
    argv = ci_runners.act_command(
        act="act",
        repo=tmp_path / "repo",
        workflow=tmp_path / "w.yml",
        event="push",
        labels=["ubuntu-24.04", "cuda-toolkit"],
        stand_ins=tmp_path / "stand-ins",
        state=tmp_path / "state",
        run_id="7",
        secret_names=["ELIZA_SIGNING_KEY"],
        inputs={},
    )
    pairs = list(itertools.pairwise(argv))
    assert ("-P", "ubuntu-24.04=-self-hosted") in pairs and ("-P", "cuda-toolkit=-self-hosted") in pairs
    assert "--action-offline-mode" in argv
    assert ("--artifact-server-addr", "127.0.0.1") in pairs and ("--cache-server-addr", "127.0.0.1") in pairs
    mapped = {b for a, b in pairs if a == "--local-repository"}
    assert mapped == {
        f"{action}={tmp_path / 'stand-ins' / folder}" for action, folder in ci_runners.STAND_INS.items()
    }
    # every marketplace action of the workflow has a stand-in; checkout is act's own
    used = {
        str(step["uses"])
        for job in WORKFLOW_DATA["jobs"].values()
        for step in job["steps"]
        if "uses" in step and not str(step["uses"]).startswith("actions/checkout@")
    }
    assert used == set(ci_runners.STAND_INS)
    assert ("-s", "ELIZA_SIGNING_KEY") in pairs  # the value comes from act's environment, not argv


def test_act_s_json_lines_give_each_job_s_result_wall_time_and_output() -> None:
    def line(job: str, when: str, **more: object) -> str:
        return json.dumps({"job": f"matrix/{job} ", "jobID": job, "time": when, "msg": "", **more})

    lines = [
        line("build-linux-cpu", "2026-12-04T10:00:00Z", msg="⭐ Run Set up job"),
        line("build-linux-cpu", "2026-12-04T10:03:05Z", msg="llama.cpp built 1 time(s) in build\n"),
        "time=... level=warning msg=not json",
        line("build-linux-cpu", "2026-12-04T10:03:07Z", jobResult="success"),
        line("linux-cpu_none", "2026-12-04T10:03:08Z"),
        line("linux-cpu_none", "2026-12-04T10:04:08Z", jobResult="failure"),
    ]
    jobs = ci_runners.read_act_log(lines)
    assert (jobs["build-linux-cpu"].result, jobs["build-linux-cpu"].seconds) == ("success", 187.0)
    assert "llama.cpp built 1 time(s) in build" in jobs["build-linux-cpu"].lines
    assert (jobs["linux-cpu_none"].result, jobs["linux-cpu_none"].seconds) == ("failure", 60.0)


def test_gitlab_ci_local_s_lines_give_each_job_s_result_and_wall_time(tmp_path: Path) -> None:
    (tmp_path / "linux-cpu_none.log").write_text("$ nox -s ci-check\nlinux-cpu.none ok\n")
    (tmp_path / "build-linux-cpu.log").write_text("llama.cpp built 1 time(s) in build\n")
    text = "\n".join(
        [
            "[10:03:07  3 min 5 s] build-linux-cpu finished in 3 min 5 s",
            "[10:04:08 163 ms] linux-cpu_none finished in 163 ms  FAIL 1",
            " PASS  [ 3 min 5 s] build-linux-cpu",
            "[10:04:09 1.2 s] pipeline finished in 4 min 6 s",
        ]
    )
    jobs = ci_runners.read_gitlab_log(text, tmp_path)
    assert (jobs["build-linux-cpu"].result, jobs["build-linux-cpu"].seconds) == ("success", 185.0)
    assert (jobs["linux-cpu_none"].result, jobs["linux-cpu_none"].seconds) == ("failure", 0.163)
    assert jobs["linux-cpu_none"].lines == ["$ nox -s ci-check", "linux-cpu.none ok"]
    assert set(jobs) == {"build-linux-cpu", "linux-cpu_none"}  # not "pipeline"


def test_the_gitlab_pipeline_is_the_workflow_s_job_graph_script_only() -> None:
    jobs = {k: v for k, v in GITLAB_DATA.items() if k not in ("stages", "variables")}
    github = WORKFLOW_DATA["jobs"]
    assert set(jobs) == set(github) - {"release"}
    assert not any("image" in j or "services" in j for j in jobs.values()) and "include" not in GITLAB_DATA
    for check in PIPELINE.checks:
        job = jobs[check.id]
        assert [n["job"] for n in job["needs"]] == list(check.needs)
        assert job["rules"][-1] == {"when": "always"}  # never skipped: the report must not wait on it
        assert job["artifacts"]["when"] == "always" and job["artifacts"]["paths"] == ["build/evidence/"]
        assert f"nox -s ci-check -- --cell {check.cell} --artifacts build/ci" in job["script"]
    for build in PIPELINE.builds:  # the cells that built go on when another did not
        assert jobs[build.id]["artifacts"]["when"] == "always"
    report = jobs[REPORT_JOB]
    assert report["when"] == "always"
    assert [n["job"] for n in report["needs"]] == list(PIPELINE.report_needs)
    assert all(n["optional"] for n in report["needs"])


def test_gitlab_ci_local_reads_the_pipeline_and_one_platform_is_the_jobs_selected(tmp_path: Path) -> None:
    try:
        node, script = ci_runners.gitlab_ci_local(current().cache)
    except ci_runners.RunnerMissing as exc:
        pytest.skip(str(exc))
    listed = subprocess.run(
        [
            str(node),
            str(script),
            "--list-json",
            "--state-dir",
            os.path.relpath(tmp_path, REPO_ROOT),  # joined to the working folder even if absolute
            "--variable",
            "ELIZA_ONLY_PLATFORM=linux-cpu",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    jobs = [j["name"] for j in json.loads(listed.stdout) if j["when"] != "never"]
    assert jobs == selected_jobs(PIPELINE, options("linux-cpu"))


def test_the_rehearsal_s_key_is_trusted_by_its_snapshot_s_policy(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text((REPO_ROOT / "matrix.yaml").read_text())
    key = SigningKey.generate()
    trust_in_policy(matrix, key, "the CI rehearsal's key")
    [trusted] = load_matrix(matrix).trust.keys
    assert (trusted.id, trusted.public_key) == (key.id, key.public_raw)
    assert trusted.covers("linux-cpu", "selector") and trusted.covers("linux-cuda", "build")


def test_reports_are_compared_by_state_on_the_cells_that_ran(tmp_path: Path) -> None:
    def report(path: Path, states: dict[tuple[str, str], str]) -> Path:
        rows: dict[str, list[dict[str, str]]] = {}
        for (cell, check), state in states.items():
            rows.setdefault(cell, []).append({"check": check, "state": state})
        path.write_text(json.dumps({"rows": [{"cell": c, "entries": e} for c, e in rows.items()]}))
        return path

    ours = report(tmp_path / "a.json", {("c1", "build"): "verified", ("c2", "build"): "not-run"})
    theirs = report(tmp_path / "b.json", {("c1", "build"): "verified", ("c2", "build"): "not-buildable-here"})
    assert compare_states(ours, theirs, {"c1"}) == []
    assert compare_states(ours, theirs, {"c1", "c2"}) == [
        "c2/build: rehearsal not-run, other not-buildable-here"
    ]
    theirs = report(tmp_path / "c.json", {("c2", "build"): "not-run"})
    assert compare_states(ours, theirs, {"c1"}) == ["c1/build: not in the other report"]


def test_a_second_pipeline_starts_from_an_earlier_rehearsal_s_remote(tmp_path: Path) -> None:
    matrix = load_matrix(REPO_ROOT / "matrix.yaml")
    with pytest.raises(UsageError, match=r"--remote-from .*no Conan remote storage"):
        parse_options(["--remote-from", str(tmp_path)], {}, matrix)
    (tmp_path / "remote" / "data").mkdir(parents=True)
    given = parse_options(["--remote-from", str(tmp_path)], {}, matrix)
    assert given.remote_from == tmp_path.resolve() / "remote" / "data"


def test_each_job_can_start_with_an_empty_cache_of_its_own() -> None:
    matrix = load_matrix(REPO_ROOT / "matrix.yaml")
    assert parse_options([], {}, matrix).cache == SHARED
    assert parse_options(["--cache", PER_JOB], {}, matrix).cache == PER_JOB
    with pytest.raises(UsageError, match=r"--cache: invalid choice: 'none'"):
        parse_options(["--cache", "none"], {}, matrix)


def test_a_check_job_that_says_it_compiled_llama_cpp_is_named() -> None:
    build = PIPELINE.builds[0]
    check = next(c for c in PIPELINE.checks if c.platform == build.platform)
    other = next(c for c in PIPELINE.checks if c.platform == build.platform and c.id != check.id)
    line = "llama.cpp built {} time(s) in this job"
    jobs = {
        build.id: ci_runners.JobRun(job=build.id, lines=[line.format(1), "| " + line.format(1)]),
        check.id: ci_runners.JobRun(job=check.id, lines=[line.format(0)]),
        other.id: ci_runners.JobRun(job=other.id, lines=["noise", line.format(1), line.format(1)]),
        REPORT_JOB: ci_runners.JobRun(job=REPORT_JOB, lines=[]),
    }
    said = builds_said(jobs)
    assert said == {build.id: 1, check.id: 0, other.id: 1, REPORT_JOB: 0}
    assert check_jobs_that_compiled(said, PIPELINE) == [other.id]
    assert check_jobs_that_compiled({**said, other.id: 0}, PIPELINE) == []


def test_a_conan_server_that_cannot_start_is_one_line_naming_its_log(tmp_path: Path) -> None:
    python = tmp_path / "python"  # a conan_server environment whose Python cannot run it
    python.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'conans'\" >&2\nexit 1\n")
    python.chmod(0o755)
    with pytest.raises(CiFailed) as failed, conan_remote(tmp_path / "remote", python):
        pytest.fail("the remote started")
    said = str(failed.value)
    log = tmp_path / "remote" / "conan_server.log"
    assert said == f"the Conan remote could not start: conan_server exited (1); log: {log}"
    assert "No module named 'conans'" in log.read_text()
    assert failed.value.__cause__ is None and failed.value.__suppress_context__
