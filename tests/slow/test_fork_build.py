"""ELIZA_LLAMA_CPP_DIR: a cell builds against a llama.cpp checkout of the user's (a fork)
instead of the pinned sdist. The fork is the pinned tree, unpacked, with one marker line
added to a source file: it is exported as recipe version fork.<content hash>, built once
as a package of its own beside the pinned one, and the cell's build-info says so. A cold
llama.cpp build: the slow tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from eliza.adapters.conan import fork_version
from eliza.adapters.git import copy_working_tree
from eliza.adapters.llama_source import ensure_sdist, pinned_source
from eliza.app.project import current
from eliza.core.layout import REPO_ROOT


def unpack_fork(dest: Path) -> Path:
    pin = pinned_source()
    archive = ensure_sdist(current().cache, pin)
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(f"{pin.subdir}/")]
        tar.extractall(dest, members=members, filter="data")
    tree = dest / pin.subdir
    marker = tree / "src" / "llama.cpp"
    marker.write_text(marker.read_text() + "\n// a fork's change: this line makes it another tree\n")
    return tree


def test_a_cell_builds_against_a_fork_named_by_eliza_llama_cpp_dir(tmp_path: Path) -> None:
    tree = unpack_fork(tmp_path / "fork")
    version = fork_version(tree)
    clone = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", f"file://{REPO_ROOT}", str(clone)], check=True, timeout=120)
    copy_working_tree(REPO_ROOT, clone, remove_deleted=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELIZA_") or k == "ELIZA_CACHE_DIR"}
    env |= {"PYTHONPATH": str(clone), "ELIZA_LLAMA_CPP_DIR": str(tree)}
    done = subprocess.run(
        [sys.executable, "-m", "nox", "-s", "build-linux-cpu.none"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=3 * 3600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "llama.cpp built now" in done.stderr  # a package of its own, not the pinned one
    info = json.loads((clone / "build" / "linux-cpu" / "none" / "build" / "build-info.json").read_text())
    source = info["llama_cpp"]["source"]
    assert source["kind"] == "local-checkout", source
    assert Path(source["path"]).resolve() == tree.resolve()
    assert version.startswith("fork.") and source["content_hash"] == version.removeprefix("fork.")
