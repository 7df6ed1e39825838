"""A baseline build of an older commit: a git worktree under build/baseline/<sha>/src,
built once per (commit, platform, llama.cpp source and options) with the same Conan
profile, and reused on later calls. Only its library is used: the current bench tool
drives it through the C ABI, so a baseline that predates the bench tool still works."""

from __future__ import annotations

import hashlib
from pathlib import Path

from eliza.adapters import conan, conan_remote, git, proc
from eliza.adapters.checkout_lock import conan_home_lock
from eliza.adapters.errors import ToolError
from eliza.app.project import current
from eliza.app.services.profiles import conan_profiles_for
from eliza.core.binary_remote import RemoteSettingError, remote_from_env
from eliza.core.build_log import failure_excerpt
from eliza.core.build_plan import CellBuildPlan, conan_build_argv, llama_option_args
from eliza.core.conan_profiles import host_profile_name
from eliza.core.matrix import Cell
from eliza.core.target import library_file


class BaselineError(ToolError):
    pass


def resolve_commit(ref: str) -> str:
    try:
        return git.resolve_commit(current().repo, ref)
    except git.GitError as exc:
        raise BaselineError(
            f"baseline {ref!r} is not a commit of this repository ({exc}); "
            "a shallow clone lacks it: fetch the history (git fetch --unshallow)"
        ) from exc


def baseline_root(sha: str) -> Path:
    return current().build_root / "baseline" / sha


def ensure_worktree(sha: str) -> Path:
    src = baseline_root(sha) / "src"
    if not (src / "native" / "CMakeLists.txt").is_file():
        try:
            git.add_worktree(current().repo, src, sha)
        except git.GitError as exc:
            raise BaselineError(f"baseline {sha[:12]}: {exc}") from exc
    if not (src / "conanfile.py").is_file():
        raise BaselineError(f"baseline {sha[:12]} has no conanfile.py: it predates the Conan build")
    return src


def baseline_library(sha: str, cell: Cell, env: dict[str, str]) -> tuple[Path, bool]:
    """(library, built_now) of the baseline's build of the cell's platform without gates."""
    project = current()
    source_version = conan.llama_source_version(project.env)
    options = llama_option_args(cell.platform)
    variant = hashlib.sha256("\0".join([source_version, host_profile_name(cell.platform), *options]).encode())
    out = baseline_root(sha) / f"{cell.platform.id}-{variant.hexdigest()[:12]}"
    library = out / "build" / library_file(cell.platform)
    if library.is_file():
        return library, False
    src = ensure_worktree(sha)
    with conan_home_lock(conan.conan_home(project.cache), f"baseline {sha[:12]}", lambda _: None):
        conan.prepare_conan_home(project.cache, project.repo, conan_profiles_for((cell.platform,)))
        source = conan.resolve_llama_source(project.cache, project.env)
        argv = conan_build_argv(src, out, cell.platform, source.version)
        _fetch_llama(
            CellBuildPlan(
                cell_id=f"baseline {sha[:12]}", output_dir=out, library=library, argv=tuple(argv), env=env
            ),
            source,
        )
        done = proc.run(
            conan.conan_argv(argv),
            env=conan.conan_env(project.cache, {**source.env, **env}),
        )
    out.mkdir(parents=True, exist_ok=True)
    log = out / "conan-build.log"
    log.write_text(done.stderr)
    if not done.ok or not library.is_file():
        excerpt = failure_excerpt(done.stderr.splitlines())
        raise BaselineError(f"baseline {sha[:12]} failed to build ({done.returncode}); log: {log}\n{excerpt}")
    return library, True


def _fetch_llama(plan: CellBuildPlan, source: conan.LlamaSource) -> None:
    """The baseline links the llama.cpp its platform's cells link: a job with an empty Conan
    home (a CI check job) takes it from the Conan remote, when one is set, rather than
    compiling it."""
    project = current()
    try:
        remote = remote_from_env(project.env)
    except RemoteSettingError as exc:
        raise BaselineError(str(exc)) from None
    if remote is not None:
        try:
            conan_remote.fetch_llama(plan, source, project.cache, remote)
        except conan.BuildError as exc:
            raise BaselineError(f"{plan.cell_id}: {exc}") from exc
