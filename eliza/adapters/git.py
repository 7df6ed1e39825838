"""git: the commit evidence is produced from, and worktrees of older commits."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.errors import ToolError


class GitError(ToolError):
    pass


@dataclass(frozen=True, kw_only=True)
class GitState:
    commit: str
    dirty: bool


def _git(repo: Path, *args: str) -> str:
    done = proc.run(["git", *args], cwd=repo)
    if not done.ok:
        raise GitError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def git_state(repo: Path) -> GitState:
    """The checked-out commit ("unknown" outside git) and whether tracked files changed."""
    try:
        commit = _git(repo, "rev-parse", "HEAD")
        dirty = bool(_git(repo, "status", "--porcelain", "--untracked-files=no"))
    except GitError:
        return GitState(commit="unknown", dirty=False)
    return GitState(commit=commit, dirty=dirty)


def resolve_commit(repo: Path, ref: str) -> str:
    return _git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}")


def add_worktree(repo: Path, path: Path, commit: str) -> None:
    """A detached worktree of `commit` at `path` (stale registrations pruned first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _git(repo, "worktree", "prune")
    _git(repo, "worktree", "add", "--force", "--detach", str(path), commit)


def copy_working_tree(repo: Path, dest: Path, *, remove_deleted: bool = False) -> Path:
    """Copies the working tree as git sees it (tracked and untracked-but-not-ignored files,
    no build outputs) into dest. remove_deleted: a file tracked but deleted in the working
    tree is removed from dest too (dest being a clone that still has it)."""
    listed = _git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for rel in filter(None, listed.split("\0")):
        src, dst = repo / rel, dest / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        elif remove_deleted and dst.exists():
            dst.unlink()
    return dest
