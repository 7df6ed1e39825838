"""`nox -s ci-rehearse -- --runner act|gitlab-ci-local`: the generated pipeline, run here by
a real CI runner (docs/ci-runners.md).

A snapshot of the working tree (a clone with the uncommitted work committed) is the
repository the runner checks out. Its jobs share what the jobs of one CI host share: an
empty cache of the rehearsal's own (ELIZA_CACHE_DIR: one Conan home, one compiler cache;
with `--cache per-job`, one empty cache in each job's own checkout, as on hosted runners),
a Conan remote (a local conan_server on 127.0.0.1) given to them as the secrets the
pipeline names, and the runner's artifacts. act runs .github/workflows/matrix.yml in host
mode, with stand-ins for the marketplace actions it cannot fetch offline; gitlab-ci-local
runs .gitlab-ci.yml with the shell executor, each job in its own folder.

What the runner did is read from its own output and artifacts: each job's result and wall
time, how many times llama.cpp was compiled (the goal: once per build variant of a
platform, by its build job), and the merged report of the report job, optionally compared
with another report's states.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from eliza.adapters import ci_runners, conan, git
from eliza.adapters.ci_runners import ACT, GITLAB_CI_LOCAL, RUNNERS, JobRun, RunnerMissing
from eliza.adapters.conan_server import (
    SERVER_VARIABLE,
    LocalServer,
    ServerError,
    local_server,
    server_python,
    storage_of,
)
from eliza.adapters.signing_keys import KEY_ENV
from eliza.app.context import Context
from eliza.app.errors import CiFailed, UsageError
from eliza.app.options import Parser
from eliza.app.services.ci_files import templates_dir, write_or_check
from eliza.core.binary_remote import PASSWORD_VARIABLE, URL_VARIABLE, USER_VARIABLE
from eliza.core.ci_jobs import REPORT_JOB, Pipeline, PipelineError
from eliza.core.matrix import Matrix
from eliza.formats.attestation import SigningKey
from eliza.formats.ci_workflow import GITLAB_CI, WORKFLOW, RunnersError, pipeline_of
from eliza.formats.files import atomic_write_text

Log = Callable[[str], None]
SHARED, PER_JOB = "shared", "per-job"
# With --cache per-job: relative, so each job's cache is a folder of its own checkout
# (eliza.core.layout.cache_dir); ignored by git.
JOB_CACHE = ".eliza-cache"
_BUILT = re.compile(r"llama\.cpp built (\d+) time\(s\)")
# Variables of the caller that would make the jobs less fresh than a CI host's.
_DROPPED = (
    "ELIZA_CACHE_DIR",
    "ELIZA_MATRIX",
    "ELIZA_TEST_CELL",
    "ELIZA_TEST_CELLS",
    "ELIZA_TEST_PLATFORM",
    "XDG_CACHE_HOME",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    KEY_ENV,
    URL_VARIABLE,
    USER_VARIABLE,
    PASSWORD_VARIABLE,
)
_GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "ci-rehearse",
    "GIT_AUTHOR_EMAIL": "ci-rehearse@localhost",
    "GIT_COMMITTER_NAME": "ci-rehearse",
    "GIT_COMMITTER_EMAIL": "ci-rehearse@localhost",
}


@dataclass(frozen=True, kw_only=True)
class RehearseOptions:
    runner: str
    workdir: Path | None
    slow: bool
    only_platform: tuple[str, ...]
    compare: Path | None
    remote_from: Path | None  # an earlier rehearsal's Conan remote storage, checked
    cache: str = SHARED  # SHARED: one cache for every job; PER_JOB: each job its own


def parse_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> RehearseOptions:
    parser = Parser("nox -s ci-rehearse --")
    parser.add_argument(
        "--runner",
        choices=RUNNERS,
        default=ACT,
        help=f"act runs {WORKFLOW}, gitlab-ci-local runs {GITLAB_CI} (default: act)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="where the snapshot, the cache, the remote and the runner's state go "
        "(default: a new temporary folder outside the checkout)",
    )
    parser.add_argument("--slow", action="store_true", help="also the jobs of slow platforms")
    parser.add_argument(
        "--only-platform",
        action="append",
        default=[],
        metavar="ID",
        help="only the build and check jobs of this platform, and the report",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="REPORT_JSON",
        help="a report.json (of `nox -s verify`, say) whose states the rehearsal's must equal",
    )
    parser.add_argument(
        "--remote-from",
        type=Path,
        metavar="WORKDIR",
        help="start the Conan remote with the packages an earlier rehearsal's jobs uploaded "
        "(its --workdir): a second pipeline, whose build job fetches llama.cpp instead of compiling it",
    )
    parser.add_argument(
        "--cache",
        choices=(SHARED, PER_JOB),
        default=SHARED,
        help=f"{SHARED}: every job uses one empty cache, as on one self-hosted runner (default); "
        f"{PER_JOB}: each job starts with an empty cache of its own, as on hosted runners, so "
        "whatever a job does not compile it must take from the artifacts or the Conan remote",
    )
    args = parser.parse_args(list(argv))
    platforms = {p.id for p in matrix.platforms}
    for given in args.only_platform:
        if given not in platforms:
            raise UsageError(
                f"--only-platform {given}: no such platform in the matrix ({', '.join(sorted(platforms))})"
            )
    if args.runner == GITLAB_CI_LOCAL and len(args.only_platform) > 1:
        raise UsageError(
            "--only-platform: gitlab-ci-local takes one platform (ELIZA_ONLY_PLATFORM); give it once"
        )
    return RehearseOptions(
        runner=args.runner,
        workdir=args.workdir,
        slow=args.slow,
        only_platform=tuple(args.only_platform),
        compare=args.compare,
        remote_from=None if args.remote_from is None else _remote_storage(args.remote_from),
        cache=args.cache,
    )


@dataclass(frozen=True, kw_only=True)
class Rehearsal:
    """What every runner's run is given."""

    work: Path
    source: Path  # the snapshot the runner checks out
    env: dict[str, str]  # the runner's environment (the jobs inherit it)
    secrets: dict[str, str]
    pipeline: Pipeline
    options: RehearseOptions


def run(options: RehearseOptions, ctx: Context) -> Path:
    project, log = ctx.project, ctx.log
    if options.compare is not None and not options.compare.is_file():
        raise UsageError(
            f"--compare {options.compare}: no such file (a report.json, e.g. build/report/report.json)"
        )
    if write_or_check(check=True) != 0:
        raise UsageError(
            f"{WORKFLOW} or {GITLAB_CI} is out of date with the matrix: run `nox -s ci-files` first"
        )
    try:
        pipeline = pipeline_of(ctx.matrix, templates_dir(project.repo))
        python = server_python(project.env.get(SERVER_VARIABLE), project.cache)
    except (PipelineError, RunnersError, ServerError) as exc:
        raise UsageError(str(exc)) from None
    work = (options.workdir or Path(tempfile.mkdtemp(prefix="eliza-ci-rehearsal-"))).resolve()
    if work.exists() and any(work.iterdir()):
        raise UsageError(f"--workdir {work} is not empty: every rehearsal starts from nothing")
    work.mkdir(parents=True, exist_ok=True)
    source = snapshot(project.repo, work / "source")
    # CI signs with its secret key, which the policy names: the rehearsal's jobs sign with
    # a key of their own, named in the snapshot's policy, so the --release report counts them.
    ci_key = SigningKey.generate()
    trust_in_policy(source / "matrix.yaml", ci_key, "the CI rehearsal's key")
    _commit(source, "the rehearsal's snapshot: its key in the trust policy")
    cache = work / "cache"
    if options.cache == SHARED:
        cache.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    env.update(
        ELIZA_CACHE_DIR=str(cache) if options.cache == SHARED else JOB_CACHE,
        ACT_DISABLE_VERSION_CHECK="1",
        CI="true",
    )
    log(
        f"rehearsing with {options.runner}: a snapshot of {project.repo} in {work}; "
        + (
            f"one cache for every job ({cache})"
            if options.cache == SHARED
            else f"each job's own cache ({JOB_CACHE} in its checkout)"
        )
    )
    remote = work / "remote"
    if options.remote_from is not None:
        shutil.copytree(options.remote_from, storage_of(remote), symlinks=True)
        log(f"Conan remote: starts with the packages of {options.remote_from}")
    with conan_remote(remote, python) as server:
        log(f"Conan remote: conan_server at {server.url} (storage {server.storage})")
        rehearsal = Rehearsal(
            work=work,
            source=source,
            env=env,
            secrets=_secrets(server, ci_key),
            pipeline=pipeline,
            options=options,
        )
        started = time.monotonic()
        try:
            status, jobs, report = (_run_act if options.runner == ACT else _run_gitlab)(rehearsal, ctx)
        except RunnerMissing as exc:
            raise UsageError(str(exc)) from None
        wall = time.monotonic() - started
    said = builds_said(jobs)
    if options.cache == SHARED:
        compiled, how = conan.llama_build_folders(cache), "build folders in the jobs' Conan home"
    else:
        # act removes a job's folder, its cache with it, when the job ends: each job counted
        # in its own Conan home (the build job Conan's "Build" binaries, a check job its new
        # build folders), and said so
        compiled, how = sum(said.values()), "as each job counted them in its own Conan home"
    _summary(jobs, said, compiled, how, wall, log)
    if report is None:
        raise CiFailed(
            f"{options.runner} exited {status} and the report job left no report.json (logs in {work})"
        )
    log(f"the report job's report: {report}")
    if options.compare is not None:
        checked = {c.cell for c in pipeline.checks if c.id in jobs}
        differences = compare_states(report, options.compare, checked)
        for d in differences:
            log(f"  differs: {d}")
        if differences:
            raise CiFailed(
                f"the rehearsal's report disagrees with {options.compare} on {len(differences)} check(s)"
            )
        log(f"the rehearsal's report agrees with {options.compare} on every check of {len(checked)} cell(s)")
    compiling = check_jobs_that_compiled(said, pipeline)
    if compiling:
        raise CiFailed(
            f"check job(s) compiled llama.cpp, which only a build job may: {', '.join(compiling)} "
            f"(logs in {work})"
        )
    failed = sorted(j.job for j in jobs.values() if j.result != "success")
    if status != 0 or failed:
        named = ", ".join(failed) or "none named"
        raise CiFailed(f"{options.runner} exited {status}; failed job(s): {named} (logs in {work})")
    return work


@contextmanager
def conan_remote(root: Path, python: Path) -> Iterator[LocalServer]:
    """The rehearsal's Conan remote (a local conan_server under `root`), stopped after. One
    that cannot start (it exits, or does not answer) is the one line every failure is, naming
    its log, never a traceback."""
    with ExitStack() as stack:
        try:
            server = stack.enter_context(local_server(root, python))
        except ServerError as exc:
            raise CiFailed(f"the Conan remote could not start: {exc}") from None
        yield server


def _remote_storage(workdir: Path) -> Path:
    storage = storage_of(workdir.resolve() / "remote")
    if not storage.is_dir():
        raise UsageError(
            f"--remote-from {workdir}: no Conan remote storage at {storage} "
            "(give the --workdir of an earlier rehearsal)"
        )
    return storage


def snapshot(repo: Path, dest: Path) -> Path:
    """A clone of the working tree (HEAD's history plus the tree as git sees it) with the
    uncommitted work committed: both runners check out commits (gitlab-ci-local copies
    tracked files only)."""
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(repo), str(dest)], check=True)
    git.copy_working_tree(repo, dest, remove_deleted=True)
    _commit(dest, "the working tree's uncommitted changes")
    return dest


def _commit(repo: Path, message: str) -> None:
    env = {**os.environ, **_GIT_IDENTITY}
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
    staged = subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=repo, env=env)
    if staged.returncode != 0:
        subprocess.run(
            ["git", "commit", "--quiet", "--no-verify", "-m", message], cwd=repo, check=True, env=env
        )


def _secrets(server: LocalServer, key: SigningKey) -> dict[str, str]:
    """The secrets the pipeline names, as a repository would hold them: the local server's
    and the rehearsal's signing key."""
    return {
        URL_VARIABLE: server.url,
        USER_VARIABLE: server.user,
        PASSWORD_VARIABLE: server.password,
        KEY_ENV: key.private_pem().decode("ascii"),
    }


def selected_jobs(pipeline: Pipeline, options: RehearseOptions) -> list[str]:
    """The build and check jobs of the chosen platforms (every platform without
    --only-platform; a slow one's with --slow only), then the report."""

    def chosen(platform: str, slow: bool) -> bool:
        return (not options.only_platform or platform in options.only_platform) and (options.slow or not slow)

    builds = [b.id for b in pipeline.builds if chosen(b.platform, b.slow)]
    checks = [c.id for c in pipeline.checks if chosen(c.platform, c.slow) and set(c.needs) <= set(builds)]
    return [*builds, *checks, REPORT_JOB]


def _run_act(r: Rehearsal, ctx: Context) -> tuple[int, dict[str, JobRun], Path | None]:
    act = shutil.which("act", path=r.env.get("PATH"))
    stand_ins = ctx.project.cache / "tools" / "act-actions"
    if act is None or not all(
        (stand_ins / f / "action.yml").is_file() for f in ci_runners.STAND_INS.values()
    ):
        raise RunnerMissing(
            f"act or its stand-in actions ({stand_ins}) are not installed: run `bash ci/setup.sh`"
        )
    workflow = yaml.safe_load((r.source / WORKFLOW).read_text())
    if True in workflow:  # YAML 1.1 reads the key `on` as true
        workflow["on"] = workflow.pop(True)
    keep = selected_jobs(r.pipeline, r.options)
    part = r.work / "workflow.yml"  # outside the snapshot: the checkout stays the commit
    atomic_write_text(
        part, yaml.safe_dump(ci_runners.subset_workflow(workflow, keep), sort_keys=False, width=10**6)
    )
    labels = {label for job in keep for label in _runs_on(workflow["jobs"][job])}
    state = r.work / "act-state"
    run_id = str(int(time.time()))
    ci_runners.act_artifacts(state, run_id).mkdir(parents=True)
    argv = ci_runners.act_command(
        act=act,
        repo=r.source,
        workflow=part,
        event="workflow_dispatch" if r.options.slow else "push",
        labels=labels,
        stand_ins=stand_ins,
        state=state,
        run_id=run_id,
        secret_names=sorted(r.secrets),
        inputs={"slow": "true"} if r.options.slow else {},
    )
    home = r.work / "home"  # act writes its configuration under HOME
    home.mkdir()
    log_file = r.work / "act.jsonl"
    ctx.log(f"act: {len(keep)} job(s) ({', '.join(keep)}); log {log_file}")
    env = {**r.env, **r.secrets, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    # act's host mode runs jobs as this user: keep the user's pyenv/npm settings reachable
    for name in ("PYENV_ROOT",):
        if name in os.environ:
            env[name] = os.environ[name]
    status = ci_runners.run_logged(argv, cwd=r.source, env=env, log=log_file)
    jobs = ci_runners.read_act_log(log_file.read_text(errors="replace").splitlines())
    report = _unzip_report(
        ci_runners.act_artifacts(state, run_id) / "report" / "report.zip", r.work / "report"
    )
    return status, jobs, report


def _runs_on(job: Mapping[str, Any]) -> list[str]:
    labels = job.get("runs-on", [])
    return [labels] if isinstance(labels, str) else [str(x) for x in labels]


def _unzip_report(archive: Path, dest: Path) -> Path | None:
    if not archive.is_file():
        return None
    with zipfile.ZipFile(archive) as z:
        z.extractall(dest)
    found = dest / "report.json"
    return found if found.is_file() else None


def _run_gitlab(r: Rehearsal, ctx: Context) -> tuple[int, dict[str, JobRun], Path | None]:
    node, script = ci_runners.gitlab_ci_local(ctx.project.cache)
    state = r.work / "gitlab-state"
    variables_file = r.work / "variables.yml"  # outside the snapshot, and out of argv
    atomic_write_text(variables_file, yaml.safe_dump(r.secrets, sort_keys=True))
    variables = {"ELIZA_SLOW": "1" if r.options.slow else "0"}
    if r.options.only_platform:
        variables["ELIZA_ONLY_PLATFORM"] = r.options.only_platform[0]
    # One environment for the jobs' `pip install -e .`, over this host's packages: the
    # host's own installation stays as it is.
    venv = r.work / "venv"
    subprocess.run(["python3", "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = {**r.env, "PATH": f"{venv / 'bin'}{os.pathsep}{r.env.get('PATH', '')}", "VIRTUAL_ENV": str(venv)}
    argv = ci_runners.gitlab_command(
        node=node,
        script=script,
        cwd=r.source,
        state=state,
        variables_file=variables_file,
        variables=variables,
    )
    log_file = r.work / "gitlab-ci-local.log"
    ctx.log(f"gitlab-ci-local: {GITLAB_CI} with {variables}; log {log_file}")
    status = ci_runners.run_logged(argv, cwd=r.source, env=env, log=log_file)
    variables_file.unlink()
    jobs = ci_runners.read_gitlab_log(log_file.read_text(errors="replace"), state / "output")
    report = state / "artifacts" / REPORT_JOB / "build" / "report" / "report.json"
    return status, jobs, report if report.is_file() else None


def builds_said(jobs: Mapping[str, JobRun]) -> dict[str, int]:
    """Job -> the llama.cpp builds it said it made ("llama.cpp built N time(s)"). act echoes
    the step summary too: a job says its count once, however often it is printed."""
    return {
        j.job: max((int(n) for line in j.lines for n in _BUILT.findall(line)), default=0)
        for j in jobs.values()
    }


def check_jobs_that_compiled(said: Mapping[str, int], pipeline: Pipeline) -> list[str]:
    """The check jobs that said they compiled llama.cpp: only a build job may."""
    checks = {c.id for c in pipeline.checks}
    return sorted(job for job, count in said.items() if job in checks and count > 0)


def _summary(
    jobs: Mapping[str, JobRun], said: Mapping[str, int], compiled: int, how: str, wall: float, log: Log
) -> None:
    log("job                          result    wall s  said: llama.cpp built")
    for j in jobs.values():
        log(f"{j.job:<28} {j.result:<8} {j.seconds:7.0f}  {said[j.job]:>20}")
    log(
        f"{len(jobs)} job(s) ran; llama.cpp compiled {compiled} time(s) in all ({how}); wall time {wall:.0f}s"
    )


def fresh_clone(repo: Path, dest: Path) -> Path:
    """A clone of the working tree: HEAD's history plus the tree as git sees it (tracked and
    untracked-but-not-ignored files), so uncommitted work is rehearsed too."""
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(repo), str(dest)], check=True)
    return git.copy_working_tree(repo, dest, remove_deleted=True)


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


def _platform_of(pipeline: Pipeline, job_id: str) -> str | None:
    for b in pipeline.builds:
        if b.id == job_id:
            return b.platform
    for c in pipeline.checks:
        if c.id == job_id:
            return c.platform
    return None
