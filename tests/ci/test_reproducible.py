"""Reproducible binaries: the no-gate cell built in two fresh clones at different paths,
each with its own empty Conan home (so llama.cpp compiled twice, once through ccache and
once without it), gives byte-identical libraries and tools with no path of either
checkout or cache in them; evidence made in one clone verifies the other's artifacts.

Slow (two cold llama.cpp builds: about 20 minutes on 2 cores), so not in the default
suite: `nox -s tests -- --tier slow` runs it.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from eliza.adapters.signing_keys import KEY_ENV
from eliza.core.layout import cell_build_dir
from tests.ci.helpers import copy_tree, env_for, nox
from tests.signing import TEST_KEY

CELL = "linux-cpu.none"
FILES = ("libelizainference.so", "libelizainference_testkit.so", "e2e_loop_bench", "reference_runner")

pytestmark = pytest.mark.slow


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_two_fresh_clones_build_byte_identical_cells(tmp_path: Path) -> None:
    a = copy_tree(tmp_path / "a")
    b = copy_tree(tmp_path / "elsewhere" / "a-longer-path" / "b")
    seconds = {}
    for repo, cache, extra in (
        (a, tmp_path / "cache-a", {}),
        (b, tmp_path / "c" / "cache-b", {"CCACHE_DISABLE": "1"}),
    ):
        started = time.monotonic()
        done = nox(repo, "-s", f"build-{CELL}", env=env_for(repo, cache, **extra))
        seconds[repo.name] = time.monotonic() - started
        assert done.returncode == 0, done.stderr[-4000:]
        assert "llama.cpp built 1 time(s)" in done.stderr
    for name in FILES:
        fa, fb = (cell_build_dir(CELL, r) / "build" / name for r in (a, b))
        assert digest(fa) == digest(fb), f"{name} differs between the clones"
        data = fa.read_bytes()
        for path in (str(tmp_path), "conan2", ".cache/eliza-inference"):
            assert path.encode() not in data, f"{name} names {path}"
    print(f"\nmeasured: cold build with ccache {seconds['a']:.0f}s, without {seconds['b']:.0f}s")

    # One machine's key for both clones: b's local report trusts what a signed, as it
    # would on the machine that made both (each empty cache would otherwise make its own).
    key = {KEY_ENV: TEST_KEY.private_pem().decode("ascii")}
    verified = nox(
        a, "-s", "verify", "--", "--cell", CELL, "--no-bench", env=env_for(a, tmp_path / "cache-a", **key)
    )
    assert verified.returncode == 0, verified.stderr[-4000:]
    out = tmp_path / "report-b"
    reported = nox(
        b,
        "-s",
        "report",
        "--",
        str(a / "build" / "evidence"),
        "--out",
        str(out),
        env=env_for(b, tmp_path / "c" / "cache-b", **key),
    )
    assert reported.returncode == 0, reported.stderr[-4000:]
    rows = json.loads((out / "report.json").read_text())["rows"]
    states = {e["check"]: e["state"] for r in rows if r["cell"] == CELL for e in r["entries"]}
    assert states["build"] == "verified", states
    assert "invalid" not in states.values(), states
