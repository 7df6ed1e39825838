"""The local rehearsal of the pipeline for linux-cpu: the build job compiles llama.cpp
once, the four check jobs compile nothing, and the merged report agrees with
`nox -s verify` on this host.

Slow (a cold llama.cpp build in the build job's empty Conan home, then every check of
four cells): ELIZA_SLOW_TESTS=1 runs it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.ci.helpers import env_for, git_copy, nox

pytestmark = pytest.mark.skipif(
    os.environ.get("ELIZA_SLOW_TESTS") != "1",
    reason="slow (a cold llama.cpp build); ELIZA_SLOW_TESTS=1 runs it",
)


def test_the_rehearsal_compiles_llama_once_and_agrees_with_verify(tmp_path: Path) -> None:
    host = git_copy(tmp_path / "verify")
    verified = nox(host, "-s", "verify", env=env_for(host))
    assert verified.returncode == 0, verified.stderr[-4000:]
    rehearsed = nox(
        host,
        "-s",
        "ci-rehearse",
        "--",
        "--workdir",
        str(tmp_path / "rehearsal"),
        "--only-platform",
        "linux-cpu",
        "--compare",
        str(host / "build" / "report" / "report.json"),
        env=env_for(host),
    )
    assert rehearsed.returncode == 0, rehearsed.stderr[-6000:]
    assert "llama.cpp compiled 1 time(s) in all" in rehearsed.stderr
    assert "agrees with" in rehearsed.stderr
    for cell in ("linux-cpu_none", "linux-cpu_litert", "linux-cpu_mlx", "linux-cpu_litert-mlx"):
        assert f"{cell}: passed" in rehearsed.stderr
