"""No false greens: a CI job whose platform its runner cannot build or run fails, with
the reason, whatever its options say; `verify` under ELIZA_STRICT does too."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from eliza.app.project import capability, load_project_matrix
from eliza.core.layout import REPO_ROOT
from tests.ci.helpers import copy_tree, env_for, nox

# sessions on this checkout: never beside another such test (tests/conftest.py)
pytestmark = pytest.mark.checkout


PLATFORM = "macos-arm64"


@pytest.fixture(scope="module", autouse=True)
def _not_buildable_here() -> None:
    can = capability(load_project_matrix().platform(PLATFORM))
    if can.can_build and can.can_run:
        pytest.skip(f"{PLATFORM} can be built and run here: nothing to refuse")


def test_a_build_job_for_a_platform_its_runner_cannot_build_fails(tmp_path: Path) -> None:
    done = nox(
        REPO_ROOT,
        "-s",
        "ci-build",
        "--",
        "--platform",
        PLATFORM,
        "--out",
        str(tmp_path),
        env=env_for(REPO_ROOT),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{PLATFORM} cannot be built on this runner: needs Xcode" in done.stderr
    assert not list(tmp_path.iterdir()), "nothing was packed"


def test_a_check_job_for_a_cell_its_runner_cannot_run_fails(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / f"cells-{PLATFORM}.tar.gz", "w:gz"):
        pass  # an (empty) artifact: the job gets as far as its checks
    done = nox(
        REPO_ROOT,
        "-s",
        "ci-check",
        "--",
        "--cell",
        f"{PLATFORM}.none",
        "--artifacts",
        str(tmp_path),
        env=env_for(REPO_ROOT),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{PLATFORM}.none: {PLATFORM}: needs Xcode" in done.stderr
    assert "Session ci-check aborted" in done.stderr


def test_a_check_job_without_its_artifact_is_a_one_line_mistake(tmp_path: Path) -> None:
    done = nox(
        REPO_ROOT,
        "-s",
        "ci-check",
        "--",
        "--cell",
        "linux-cpu.none",
        "--artifacts",
        str(tmp_path),
        env=env_for(REPO_ROOT),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--artifacts {tmp_path}: no cells-*.tar.gz there" in done.stderr


def test_verify_under_eliza_strict_fails_where_it_used_to_pass() -> None:
    # What the old per-cell CI jobs ran: without ELIZA_STRICT this logs "not buildable
    # here" and exits 0; the workflow now sets ELIZA_STRICT for every job.
    argv = ("-s", "verify", "--", "--cell", f"{PLATFORM}.none")
    strict = nox(REPO_ROOT, *argv, env=env_for(REPO_ROOT, ELIZA_STRICT="1"))
    assert strict.returncode == 3, strict.stderr[-2000:]  # "cannot run here", under --strict
    assert "needs Xcode" in strict.stderr


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in done.stderr.splitlines() if line.startswith("nox > error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr[-3000:]
    return errors[0]


def test_a_malformed_remote_url_is_one_line_before_any_build(tmp_path: Path) -> None:
    done = nox(
        REPO_ROOT,
        "-s",
        "ci-build",
        "--",
        "--platform",
        "linux-cpu",
        "--out",
        str(tmp_path),
        env=env_for(REPO_ROOT, ELIZA_CONAN_REMOTE_URL="127.0.0.1:9300"),
    )
    said = one_line_error(done)
    assert "ELIZA_CONAN_REMOTE_URL='127.0.0.1:9300' is not an http(s) URL" in said
    assert "conan" not in done.stderr.replace(said, "").lower(), "nothing was built"


def test_a_rehearsal_without_conan_server_is_one_line_naming_the_fix() -> None:
    done = nox(
        REPO_ROOT, "-s", "ci-rehearse", env=env_for(REPO_ROOT, ELIZA_CONAN_SERVER="/nowhere/conan_server")
    )
    said = one_line_error(done)
    assert "ELIZA_CONAN_SERVER='/nowhere/conan_server' names no conan_server" in said
    assert "bash ci/setup.sh" in said


def test_the_report_says_which_platforms_the_pipeline_leaves_out(tmp_path: Path) -> None:
    repo = copy_tree(tmp_path / "repo")
    (tmp_path / "cells").mkdir()
    done = nox(
        repo,
        "-s",
        "ci-report",
        "--",
        "--evidence",
        str(tmp_path / "evidence"),
        "--artifacts",
        str(tmp_path / "cells"),
        env=env_for(repo),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((repo / "build" / "report" / "report.json").read_text())["rows"]
    entries = {(r["cell"], e["check"]): e for r in rows for e in r["entries"]}
    android = entries[("android-arm64.none", "build")]
    assert android["state"] == "not-run", android
    assert (
        "not in the CI pipeline: android-arm64: no jobs in CI: no declared runner can build it"
        in android["reason"]
    )
    # Apple targets: the macOS runner offers no xcode until the project can build them.
    ios = entries[("ios-arm64.none", "selector")]
    assert "ios-arm64: no jobs in CI: no declared runner can build it" in ios["reason"], ios
