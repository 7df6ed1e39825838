"""The shared binary cache: a real conan_server on 127.0.0.1 with a temporary storage
folder. One Conan home uploads llama.cpp; a fresh clone with a second, empty Conan home
installs it from the server and builds a cell without compiling llama.cpp, into a library
byte-identical to the first one (another checkout path, another Conan home)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from eliza.adapters.conan_server import local_server, server_python
from eliza.app.project import capability, current, load_project_matrix
from eliza.core.layout import REPO_ROOT, library_path
from tests.ci.helpers import copy_tree, env_for, nox, stable_empty_cache

# sessions on this checkout: never beside another such test (tests/conftest.py)
pytestmark = pytest.mark.checkout


CELL = "linux-cpu.none"


@pytest.fixture(scope="module", autouse=True)
def _can_build() -> None:
    can = capability(load_project_matrix().cell(CELL).platform)
    if not can.can_build:
        pytest.skip(f"{CELL} cannot be built here: {can.build_reason}")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_empty_conan_home_installs_llama_from_the_remote(tmp_path: Path) -> None:
    python = server_python(current().env.get("ELIZA_CONAN_SERVER"), current().cache)
    with local_server(tmp_path / "remote", python) as server:
        remote = {
            "ELIZA_CONAN_REMOTE_URL": server.url,
            "ELIZA_CONAN_REMOTE_USER": server.user,
            "ELIZA_CONAN_REMOTE_PASSWORD": server.password,
        }
        # 1. This checkout and the caller's Conan home: builds the cell (llama.cpp only if
        #    that home lacks it) and uploads llama.cpp.
        started = time.monotonic()
        first = nox(
            REPO_ROOT,
            "-s",
            "ci-build",
            "--",
            "--platform",
            "linux-cpu",
            "--cell",
            CELL,
            "--out",
            str(tmp_path / "out"),
            env=env_for(REPO_ROOT, **remote),
        )
        first_s = time.monotonic() - started
        assert first.returncode == 0, first.stderr[-4000:]
        assert f"uploaded to {server.url}" in first.stderr
        assert any(server.storage.rglob("conan_package.tgz")), "the server stored a binary"

        # 2. A fresh clone elsewhere with an empty cache (so an empty Conan home).
        clone = copy_tree(tmp_path / "clone")
        # Its own Conan home, but the caller's compiler cache and llama.cpp sources: what is
        # tested is where llama.cpp's binary comes from, not how long the library takes to
        # compile or the sources to download. At the same path every run, like a CI cache.
        with stable_empty_cache("conan-remote") as cache:
            if (current().cache / "ccache").is_dir():
                (cache / "ccache").symlink_to(current().cache / "ccache", target_is_directory=True)
            started = time.monotonic()
            second = nox(clone, "-s", f"build-{CELL}", env=env_for(clone, cache, **remote))
            second_s = time.monotonic() - started
            assert second.returncode == 0, second.stderr[-4000:]
            assert f"downloaded from {server.url}" in second.stderr, second.stderr[-3000:]
            assert "llama.cpp built 0 time(s), reused 1 time(s)" in second.stderr
            assert not any((cache / "conan2").rglob("CMakeCache.txt")), "nothing of llama.cpp was configured"

    # Same sources, options and toolchain: the same bytes, whatever the checkout and Conan home.
    assert sha256(library_path(CELL, clone)) == sha256(library_path(CELL, REPO_ROOT))
    compiled = "compiled llama.cpp" if "llama.cpp built 1 time(s)" in first.stderr else "had llama.cpp cached"
    print(
        f"\nmeasured: upload side {first_s:.0f}s ({compiled}), install-from-remote side {second_s:.0f}s "
        f"(ratio {first_s / second_s:.2f})"
    )
