"""A baseline build of an older commit: a git worktree under build/baseline/<sha>/src,
built once per (commit, cell) with the same Conan profile and llama.cpp options, and
reused on later calls. Only its library is used: the current bench tool drives it
through the C ABI, so a baseline that predates the bench tool still works."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from eliza import conan
from eliza.build import conan_build_argv, llama_option_args, profile_name
from eliza.matrix.model import Cell
from eliza.paths import REPO_ROOT, build_root


class BaselineError(RuntimeError):
    pass


def _git(*args: str, cwd: Path = REPO_ROOT) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BaselineError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def resolve_commit(ref: str) -> str:
    try:
        return _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    except BaselineError as exc:
        raise BaselineError(f"--baseline {ref!r} is not a commit of this repository ({exc})") from exc


def baseline_root(sha: str) -> Path:
    return build_root() / "baseline" / sha


def ensure_worktree(sha: str) -> Path:
    src = baseline_root(sha) / "src"
    if not (src / "native" / "CMakeLists.txt").is_file():
        src.parent.mkdir(parents=True, exist_ok=True)
        _git("worktree", "prune")
        _git("worktree", "add", "--force", "--detach", str(src), sha)
    if not (src / "conanfile.py").is_file():
        raise BaselineError(f"baseline {sha[:12]} has no conanfile.py: it predates the Conan build")
    return src


def baseline_library(sha: str, cell: Cell, env: dict[str, str]) -> tuple[Path, bool]:
    """(library, built_now) of the baseline's build of the cell's platform without gates,
    one per (commit, platform, llama.cpp source and options)."""
    source_version = conan.llama_source_version()
    options = llama_option_args(cell.platform)
    variant = hashlib.sha256("\0".join([source_version, profile_name(cell.platform), *options]).encode())
    out = baseline_root(sha) / f"{cell.platform.id}-{variant.hexdigest()[:12]}"
    library = out / "build" / "libelizainference.so"
    if library.is_file():
        return library, False
    src = ensure_worktree(sha)
    conan.prepare_conan_home(REPO_ROOT)
    source = conan.resolve_llama_source()
    argv = conan_build_argv(src, out, cell.platform, source.version)
    log = out / "conan-build.log"
    out.mkdir(parents=True, exist_ok=True)
    with log.open("w") as log_f:
        result = subprocess.run(argv, env=conan.conan_env({**source.env, **env}), stdout=subprocess.DEVNULL,
                                stderr=log_f, check=False)  # fmt: skip
    if result.returncode != 0 or not library.is_file():
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise BaselineError(f"baseline {sha[:12]} failed to build ({result.returncode}); log: {log}\n{tail}")
    return library, True
