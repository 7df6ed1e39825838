"""`nox -s ci-rehearse`: the generated workflow, run here.

Every job of .github/workflows/matrix.yml that this host can run is run in the order its
`needs` give, each in its own fresh clone of the working tree with its own empty cache (so
its own empty Conan home and compiler cache). They share only what jobs share in CI: a
Conan remote (a local conan_server on 127.0.0.1) and the uploaded artifacts. The steps
are the workflow's own `run:` lines; `uses:` steps are played the way GitHub plays them
(checkout: the clone; upload/download-artifact: a shared folder), except the ones that
only prepare a runner (setup-python, the ccache cache, ci/setup.sh: this host is set up).
At the end: each job's wall time, how many times llama.cpp was compiled (the goal: once
per platform), and the merged report, optionally compared with another report's states.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import yaml

from eliza.adapters import git
from eliza.adapters.conan_server import SERVER_VARIABLE, LocalServer, ServerError, local_server, server_python
from eliza.adapters.consumers import node_modules_env
from eliza.adapters.signing_keys import KEY_ENV
from eliza.app.context import Context
from eliza.app.errors import CiFailed, UsageError
from eliza.app.options import Parser
from eliza.app.project import capability, load_project_matrix
from eliza.app.services.ci_files import templates_dir, write_or_check
from eliza.core.binary_remote import PASSWORD_VARIABLE, URL_VARIABLE, USER_VARIABLE
from eliza.core.ci_jobs import (
    REPORT_JOB,
    SETUP_COMMAND,
    SLOW_TIER_COMMAND,
    SLOW_TIER_JOB,
    Pipeline,
    PipelineError,
)
from eliza.core.matrix import Matrix
from eliza.formats.attestation import SigningKey
from eliza.formats.ci_workflow import WORKFLOW, RunnersError, pipeline_of
from eliza.formats.files import atomic_write_text

Log = Callable[[str], None]
_BUILT = re.compile(r"llama\.cpp built (\d+) time\(s\)")
# Variables of the caller that would make a job less fresh than a CI runner's.
_DROPPED = (
    "ELIZA_CACHE_DIR",
    "ELIZA_MATRIX",
    "ELIZA_TEST_CELL",
    "ELIZA_TEST_CELLS",
    "ELIZA_TEST_PLATFORM",
    "XDG_CACHE_HOME",
    "PYTHONPATH",
    "VIRTUAL_ENV",
)


@dataclass(kw_only=True)
class JobResult:
    job: str
    status: str  # passed | failed | skipped
    reason: str = ""
    seconds: float = 0.0
    llama_builds: int = 0
    cells_built: int = 0
    said_built: int = 0  # what its "llama.cpp built N time(s)" lines add up to
    log: Path | None = None
    steps: list[str] = field(default_factory=list)


def job_order(jobs: Mapping[str, Any]) -> list[str]:
    """Job ids in file order, each after every job it needs."""
    order: list[str] = []
    pending = list(jobs)
    while pending:
        ready = [j for j in pending if all(n in order for n in _needs(jobs[j]))]
        if not ready:
            raise UsageError(f"{WORKFLOW}: jobs {pending} need each other or an unknown job")
        order.append(ready[0])
        pending.remove(ready[0])
    return order


def _needs(job: Mapping[str, Any]) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


def runnable_here(pipeline: Pipeline, job: str, *, slow: bool) -> str | None:
    """Why this host does not run the job, or None when it does."""
    if job == REPORT_JOB:
        return None
    if pipeline.release is not None and job == pipeline.release.id:
        return "the release job runs only on a push of a version tag (here: nox -s release -- --version V)"
    if job == SLOW_TIER_JOB:
        return f"the slow test tier runs nightly or on a manual run with slow_tier ({SLOW_TIER_COMMAND})"
    build = next((b for b in pipeline.builds if b.id == job), None)
    check = next((c for c in pipeline.checks if c.id == job), None)
    platform_id = build.platform if build else check.platform if check else None
    if platform_id is None:
        return "not a job of the pipeline the matrix implies (run `nox -s ci-files`)"
    if (build.slow if build else check.slow if check else False) and not slow:
        return "a slow platform's job (runs on workflow_dispatch with slow; here with --slow)"
    can = capability(load_project_matrix().platform(platform_id))
    if not can.can_build:
        return f"{platform_id} cannot be built here: {can.build_reason}"
    if check is not None and not can.can_run:
        return f"{platform_id} cannot run here: {can.run_reason}"
    return None


def fresh_clone(repo: Path, dest: Path) -> Path:
    """A clone of the working tree: HEAD's history plus the tree as git sees it (tracked and
    untracked-but-not-ignored files), so uncommitted work is rehearsed too."""
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(repo), str(dest)], check=True)
    return git.copy_working_tree(repo, dest, remove_deleted=True)


def _copy_into(src: Path, dest: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=True)
    else:
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / src.name)


def _upload(step: Mapping[str, Any], clone: Path, store: Path) -> str | None:
    """actions/upload-artifact: `path` (a file or a folder's contents) under the name."""
    given = step.get("with", {})
    source = clone / str(given["path"])
    if not source.exists():
        if given.get("if-no-files-found", "warn") == "error":
            return f"upload {given['name']}: {given['path']} does not exist"
        return None
    _copy_into(source, store / str(given["name"]))
    return None


def _download(step: Mapping[str, Any], clone: Path, store: Path) -> str | None:
    """actions/download-artifact: by name into `path`, or by pattern into path/<name>
    (path itself with merge-multiple)."""
    given = step.get("with", {})
    target = clone / str(given.get("path", "."))
    if "name" in given:
        found = store / str(given["name"])
        if not found.is_dir():
            return f"download {given['name']}: no such artifact"
        _copy_into(found, target)
        return None
    names = sorted(p.name for p in store.iterdir() if fnmatch(p.name, str(given.get("pattern", "*"))))
    for name in names:
        _copy_into(store / name, target if given.get("merge-multiple") else target / name)
    return None


def run_job(
    job_id: str,
    job: Mapping[str, Any],
    *,
    repo: Path,
    work: Path,
    store: Path,
    env: Mapping[str, str],
    log: Log,
) -> JobResult:
    root = work / "jobs" / job_id
    root.mkdir(parents=True)
    clone = root / "repo"
    shutil.copytree(repo, clone, symlinks=True)  # a fresh clone of the rehearsal's snapshot
    cache = root / "cache"  # empty: its own Conan home and compiler cache
    cache.mkdir(parents=True)
    job_env = {
        **{k: v for k, v in env.items() if k not in _DROPPED},
        "ELIZA_CACHE_DIR": str(cache),
        "PYTHONPATH": str(clone),
        "GITHUB_STEP_SUMMARY": str(root / "summary.md"),
        "CI": "true",
    }
    result = JobResult(job=job_id, status="passed", log=root / "job.log")
    started = time.monotonic()
    failed = False
    with (root / "job.log").open("w") as out:
        for step in job.get("steps", []):
            condition = str(step.get("if", ""))
            if failed and "always()" not in condition:
                continue
            uses = str(step.get("uses", ""))
            command = str(step.get("run", ""))
            problem = None
            if uses.startswith("actions/checkout"):
                said = "checkout: a fresh clone of the working tree"
            elif uses.startswith(("actions/setup-python", "actions/cache")) or command == SETUP_COMMAND:
                said = (
                    f"{uses or command}: not played (this host is set up; jobs start with empty "
                    "caches and this host's Node consumer packages)"
                )
            elif uses.startswith("actions/upload-artifact"):
                problem = _upload(step, clone, store)
                said = f"upload-artifact {step['with']['name']}"
            elif uses.startswith("actions/download-artifact"):
                problem = _download(step, clone, store)
                said = f"download-artifact {step['with'].get('name') or step['with'].get('pattern')}"
            elif command:
                out.write(f"$ {command}\n")
                out.flush()
                done = subprocess.run(
                    ["bash", "-e", "-c", command],
                    cwd=clone,
                    env=job_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                out.write(done.stdout)
                result.said_built += sum(int(n) for n in _BUILT.findall(done.stdout))
                said = command
                if done.returncode != 0:
                    tail = done.stdout.strip().splitlines()[-1:] or [""]
                    problem = f"`{command}` exited {done.returncode}: {tail[0][:300]}"
            else:
                said = f"{uses}: not played"
            result.steps.append(said)
            out.write(f"# {said}\n")
            if problem:
                failed = True
                result.status, result.reason = "failed", problem
                out.write(f"# FAILED: {problem}\n")
    result.seconds = time.monotonic() - started
    # Counted from what is on disk, not from what the job says: each llama.cpp build folder
    # in its Conan home is one compilation, each CMake cache in its build/ one cell built.
    result.llama_builds = len(list((cache / "conan2" / "p" / "b").glob("llama*")))
    result.cells_built = len(list((clone / "build").glob("*/*/build/CMakeCache.txt")))
    log(
        f"{job_id}: {result.status} in {result.seconds:.0f}s; "
        f"llama.cpp compiled {result.llama_builds} time(s), "
        f"cells compiled {result.cells_built} (the job said: llama.cpp built {result.said_built} time(s))"
        + (f" ({result.reason})" if result.reason else "")
    )
    return result


def compare_states(ours: Path, theirs: Path, cells: set[str]) -> list[str]:
    """Differences of state between two report.json files, for every check of `cells`
    (the cells whose check jobs ran here)."""

    def states(path: Path) -> dict[tuple[str, str], str]:
        rows = json.loads(path.read_text())["rows"]
        return {(r["cell"], e["check"]): e["state"] for r in rows for e in r["entries"]}

    a, b = states(ours), states(theirs)
    missing = sorted(f"{cell}/{check}" for cell, check in set(a) - set(b) if cell in cells)
    if missing:
        return [f"{m}: not in the other report" for m in missing]
    return [
        f"{cell}/{check}: rehearsal {a[(cell, check)]}, other {b[(cell, check)]}"
        for cell, check in sorted(set(a) & set(b))
        if cell in cells and a[(cell, check)] != b[(cell, check)]
    ]


@dataclass(frozen=True, kw_only=True)
class RehearseOptions:
    workdir: Path | None
    slow: bool
    only_platform: tuple[str, ...]
    compare: Path | None


def parse_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> RehearseOptions:
    parser = Parser("nox -s ci-rehearse --")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="where the clones, the remote and the artifacts go "
        "(default: a new temporary folder outside the checkout)",
    )
    parser.add_argument("--slow", action="store_true", help="also the jobs of slow platforms")
    parser.add_argument(
        "--only-platform",
        action="append",
        default=[],
        metavar="ID",
        help="only the jobs of these platforms (and the report); repeatable",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="REPORT_JSON",
        help="a report.json (of `nox -s verify`, say) whose states the rehearsal's must equal",
    )
    args = parser.parse_args(list(argv))
    return RehearseOptions(
        workdir=args.workdir, slow=args.slow, only_platform=tuple(args.only_platform), compare=args.compare
    )


def run(options: RehearseOptions, ctx: Context) -> Path:
    matrix, log = ctx.matrix, ctx.log
    project = ctx.project
    if options.compare is not None and not options.compare.is_file():
        raise UsageError(
            f"--compare {options.compare}: no such file (a report.json, e.g. build/report/report.json)"
        )
    if write_or_check(check=True) != 0:
        raise UsageError(f"{WORKFLOW} is out of date with the matrix: run `nox -s ci-files` first")
    try:
        pipeline = pipeline_of(matrix, templates_dir(project.repo))
        python = server_python(project.env.get(SERVER_VARIABLE), project.cache)
    except (PipelineError, RunnersError, ServerError) as exc:
        raise UsageError(str(exc)) from None
    workflow = yaml.safe_load((project.repo / WORKFLOW).read_text())
    jobs: dict[str, Any] = workflow["jobs"]
    work = (options.workdir or Path(tempfile.mkdtemp(prefix="eliza-ci-rehearsal-"))).resolve()
    if work.exists() and any(work.iterdir()):
        raise UsageError(f"--workdir {work} is not empty: every rehearsal starts from nothing")
    store = work / "artifacts"
    store.mkdir(parents=True)
    # One state of the tree for every job, whatever happens to the checkout meanwhile.
    source = fresh_clone(project.repo, work / "source")
    # CI signs with its secret key, which the policy names: the rehearsal's jobs sign with
    # a key of their own, named in the snapshot's policy, so the --release report counts them.
    ci_key = SigningKey.generate()
    trust_in_policy(source / "matrix.yaml", ci_key, "the CI rehearsal's key")
    log(f"rehearsing {WORKFLOW} of a snapshot of {project.repo} in {work}")
    results: dict[str, JobResult] = {}
    with local_server(work / "remote", python) as server:
        log(f"Conan remote: conan_server at {server.url} (storage {server.storage})")
        # the jobs' setup step is not played and their caches start empty: what it would
        # have installed comes from this host's cache
        tools = node_modules_env(project.cache, os.environ)
        env = {**os.environ, **_workflow_env(workflow, server, ci_key), **tools}
        for job_id in job_order(jobs):
            job = jobs[job_id]
            why = runnable_here(pipeline, job_id, slow=options.slow)
            platform = _platform_of(pipeline, job_id)
            if (
                why is None
                and options.only_platform
                and platform is not None
                and platform not in options.only_platform
            ):
                why = "not among --only-platform"
            blocked = [n for n in _needs(job) if results.get(n) is None or results[n].status != "passed"]
            if why is None and blocked and "always()" not in str(job.get("if", "")):
                why = f"needs {', '.join(blocked)}, which did not pass here"
            if why is not None:
                results[job_id] = JobResult(job=job_id, status="skipped", reason=why)
                log(f"{job_id}: skipped ({why})")
                continue
            log(f"{job_id}: running")
            results[job_id] = run_job(job_id, job, repo=source, work=work, store=store, env=env, log=log)
    _summary(results, log)
    report = store / "report" / "report.json"
    if options.compare is not None and report.is_file():
        checked = {
            c.cell
            for c in pipeline.checks
            if results.get(c.id, JobResult(job="", status="")).status != "skipped"
        }
        differences = compare_states(report, options.compare, checked)
        for d in differences:
            log(f"  differs: {d}")
        if differences:
            raise CiFailed(
                f"the rehearsal's report disagrees with {options.compare} on {len(differences)} check(s)"
            )
        log(f"the rehearsal's report agrees with {options.compare} on every check of {len(checked)} cell(s)")
    failed = [r.job for r in results.values() if r.status == "failed"]
    if failed:
        raise CiFailed(f"{len(failed)} job(s) failed: {', '.join(failed)} (logs under {work / 'jobs'})")
    return work


def _platform_of(pipeline: Pipeline, job_id: str) -> str | None:
    for b in pipeline.builds:
        if b.id == job_id:
            return b.platform
    for c in pipeline.checks:
        if c.id == job_id:
            return c.platform
    return None


def trust_in_policy(matrix_file: Path, key: SigningKey, label: str) -> None:
    """Adds `key` to the trust policy of a matrix file, for every platform and check."""
    entry = (
        f"  - id: {key.id}\n    label: {label}\n    public_key: {key.public_b64}\n"
        "    scope: {platforms: all, checks: all}\n"
    )
    text = matrix_file.read_text(encoding="utf-8")
    for section in ("\ntrust:\n  keys: []\n", "\ntrust:\n  keys:\n"):
        if section in text:
            text = text.replace(section, "\ntrust:\n  keys:\n" + entry, 1)
            break
    else:
        text += "\ntrust:\n  keys:\n" + entry
    atomic_write_text(matrix_file, text)


def _workflow_env(workflow: Mapping[str, Any], server: LocalServer, key: SigningKey) -> dict[str, str]:
    """The workflow's `env:` with the secrets a repository would hold: the local server's,
    and the signing key."""
    secrets = {
        URL_VARIABLE: server.url,
        USER_VARIABLE: server.user,
        PASSWORD_VARIABLE: server.password,
        KEY_ENV: key.private_pem().decode("ascii"),
    }
    env: dict[str, str] = {}
    for key, value in (workflow.get("env") or {}).items():
        text = str(value)
        found = re.fullmatch(r"\$\{\{\s*secrets\.([A-Za-z0-9_]+)\s*\}\}", text)
        env[str(key)] = secrets.get(found.group(1), "") if found else text
    return env


def _summary(results: Mapping[str, JobResult], log: Log) -> None:
    ran = [r for r in results.values() if r.status != "skipped"]
    log("job                          status    wall s  llama.cpp compiled  cells compiled")
    for r in results.values():
        if r.status == "skipped":
            log(f"{r.job:<28} skipped        -                   -               -")
            continue
        log(f"{r.job:<28} {r.status:<8} {r.seconds:6.0f}  {r.llama_builds:>18}  {r.cells_built:>14}")
    total = sum(r.llama_builds for r in ran)
    log(
        f"{len(ran)} job(s) ran, {len(results) - len(ran)} skipped; "
        f"llama.cpp compiled {total} time(s) in all; wall time {sum(r.seconds for r in ran):.0f}s"
    )
