"""Where the project keeps things: the repo, its build tree, and the user-level cache.

The cache (sources, the Conan home) lives outside the checkout so a fresh clone on the
same machine reuses llama.cpp packages already built; ELIZA_CACHE_DIR moves it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    explicit = env.get("ELIZA_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "eliza-inference"


def build_root(repo: Path = REPO_ROOT) -> Path:
    return repo / "build"


def cell_build_dir(cell_id: str, repo: Path = REPO_ROOT) -> Path:
    """One Conan output folder per matrix cell, e.g. build/linux-cpu/litert+mlx."""
    platform, _, gates = cell_id.partition(".")
    return build_root(repo) / platform / (gates or "none")


def library_path(cell_id: str, repo: Path = REPO_ROOT) -> Path:
    return cell_build_dir(cell_id, repo) / "build" / "libelizainference.so"


def tiny_bundle_dir(repo: Path = REPO_ROOT) -> Path:
    return build_root(repo) / "bundles" / "tiny"
