"""Where the project keeps things: the repository, its build tree, the user-level cache.

Pure path arithmetic: nothing here touches the file system or reads the environment (the
caller passes the environment in). The cache lives outside the checkout so a fresh clone
on the same machine reuses llama.cpp packages already built; ELIZA_CACHE_DIR moves it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path, PurePath

from eliza.core.cell_id import CellId

# eliza/core/layout.py -> the repository root (module paths are absolute once imported).
REPO_ROOT = Path(__file__).parents[2]

LIBRARY_NAME = "libelizainference.so"
TEST_KIT_NAME = "libelizainference_testkit.so"
PUBLIC_HEADER = "eliza-inference-ffi.h"
EXPORT_PREFIX = "eliza_inference_"  # every exported symbol of the C ABI starts with it


def cache_dir(env: Mapping[str, str], home: PurePath, repo: Path = REPO_ROOT) -> Path:
    """ELIZA_CACHE_DIR, else $XDG_CACHE_HOME or ~/.cache, then /eliza-inference. A relative
    ELIZA_CACHE_DIR is taken from the checkout's root, wherever a command runs from: a CI job
    that gives `.eliza-cache` keeps a cache of its own inside its checkout (where GitLab's
    `cache:` can keep it between pipelines)."""
    explicit = env.get("ELIZA_CACHE_DIR")
    if explicit:
        return repo / explicit  # an absolute path stays itself
    base = env.get("XDG_CACHE_HOME") or str(home / ".cache")
    return Path(base) / "eliza-inference"


def tool_versions_path(cache: Path) -> Path:
    """What this machine's programs said to `--version` (eliza.adapters.tool_versions)."""
    return cache / "tool-versions.json"


def abidw_memo_dir(cache: Path) -> Path:
    """abidw's dumps of libraries, by their bytes (eliza.adapters.abi_tools.abidw)."""
    return cache / "abidw"


def build_root(repo: Path) -> Path:
    return repo / "build"


def evidence_dir(repo: Path) -> Path:
    return build_root(repo) / "evidence"


def artifact_store(repo: Path) -> Path:
    """The evidence's own copies of the check outputs its records name, by content:
    `<store>/<sha256>/<file name>` (eliza.app.services.artifact_store)."""
    return build_root(repo) / "artifacts"


def is_check_output(path: PurePath, repo: Path) -> bool:
    """A file a check wrote under build/ (a bench run, a junit file, a consumer's output),
    which a later run may write again: not one of a build tree's outputs (a library, its
    build-info.json: under a `build` folder of a cell or of the baseline), not already in
    the store, not a source of the repository."""
    root = build_root(repo)
    if not path.is_relative_to(root):
        return False
    folders = path.relative_to(root).parts[:-1]
    return bool(folders) and folders[0] != artifact_store(repo).name and "build" not in folders


def imported_evidence_dir(repo: Path) -> Path:
    """Evidence made elsewhere (a device run) and brought in by `nox -s import-evidence`."""
    return build_root(repo) / "imported-evidence"


def report_dir(repo: Path) -> Path:
    return build_root(repo) / "report"


def cell_build_dir(cell_id: str | CellId, repo: Path) -> Path:
    """One Conan output folder per matrix cell, e.g. build/linux-cpu/litert+mlx,
    build/linux-cpu/none@asan-ubsan."""
    cell = cell_id if isinstance(cell_id, CellId) else CellId.parse(cell_id)
    return build_root(repo) / cell.platform / cell.key


def library_path(cell_id: str | CellId, repo: Path, file_name: str = LIBRARY_NAME) -> Path:
    """file_name: eliza.core.target.library_file(platform) for a platform that is not ELF."""
    return cell_build_dir(cell_id, repo) / "build" / file_name


def tiny_bundle_dir(repo: Path) -> Path:
    return build_root(repo) / "bundles" / "tiny"


def public_headers_dir(repo: Path) -> Path:
    return repo / "native" / "include"


def public_header(repo: Path) -> Path:
    return public_headers_dir(repo) / PUBLIC_HEADER


def default_prompts(repo: Path) -> Path:
    return repo / "native" / "tools" / "prompts" / "default.txt"
