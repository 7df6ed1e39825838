"""ELIZA_LLAMA_CPP_DIR: a cell builds against a llama.cpp checkout of the user's (a fork)
instead of the pinned sdist. The fork is the pinned tree, unpacked, with one marker line
added to a source file: it is exported as recipe version fork.<content hash>, built once
as a package of its own beside the pinned one, and the cell's build-info says so. A cold
llama.cpp build: the slow tier."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from eliza.adapters.conan import fork_version
from eliza.adapters.llama_source import ensure_sdist, pinned_source
from eliza.app.project import current
from tests.ci.helpers import env_for, history_clone, nox


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
    clone = history_clone(tmp_path / "repo")
    env = env_for(clone, ELIZA_LLAMA_CPP_DIR=str(tree))
    done = nox(clone, "-s", "build-linux-cpu.none", env=env, timeout=3 * 3600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    info = json.loads((clone / "build" / "linux-cpu" / "none" / "build" / "build-info.json").read_text())
    # a package of its own beside the pinned one: recipe version fork.<hash>, built now or
    # reused from an earlier run of this test
    assert info["llama_cpp"]["version"] == version
    source = info["llama_cpp"]["source"]
    assert source["kind"] == "local-checkout", source
    # the package is keyed by the tree's content: its recorded path is the checkout that built
    # it first, which on a rerun of this test is an earlier temporary folder
    assert source["path"].endswith(pinned_source().subdir)
    assert version.startswith("fork.") and source["content_hash"] == version.removeprefix("fork.")
