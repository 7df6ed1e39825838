"""The local rehearsal of the pipeline for linux-cpu: the build job compiles llama.cpp
once per build variant (release, ASan+UBSan), the check jobs compile nothing, and the
merged report agrees with `nox -s verify` on this host.

Slow (a cold llama.cpp build in the build job's empty Conan home, then every check of
four cells): `nox -s tests -- --tier slow` runs it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eliza.app.project import load_project_matrix
from tests.ci.helpers import env_for, git_copy, nox

pytestmark = pytest.mark.slow


SLOW_VARIANT_CELLS = [
    c.id
    for c in load_project_matrix().cells_of("linux-cpu")
    if c.variant is not None and c.variant.slow_build
]


def test_the_rehearsal_compiles_llama_once_and_agrees_with_verify(tmp_path: Path) -> None:
    host = git_copy(tmp_path / "verify")
    # the sanitizer cell is a slow-build variant: verify runs it only when named, and a
    # plain verify afterwards keeps that evidence rather than recording a skip over it
    for cell in SLOW_VARIANT_CELLS:
        named = nox(host, "-s", "verify", "--", "--cell", cell, env=env_for(host))
        assert named.returncode == 0, named.stderr[-4000:]
    verified = nox(host, "-s", "verify", env=env_for(host))
    assert verified.returncode == 0, verified.stderr[-4000:]
    report = json.loads((host / "build" / "report" / "report.json").read_text())
    states = {(e["cell"], e["check"]): e["state"] for row in report["rows"] for e in row["entries"]}
    for cell in SLOW_VARIANT_CELLS:
        for check in ("build", "native-suite"):
            assert states[(cell, check)] == "verified", (cell, check, states[(cell, check)])
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
    # once per build variant of the platform: release, and each sanitizer variant
    assert f"llama.cpp compiled {1 + len(SLOW_VARIANT_CELLS)} time(s) in all" in rehearsed.stderr
    assert "agrees with" in rehearsed.stderr
    jobs = ["linux-cpu_none", "linux-cpu_litert", "linux-cpu_mlx", "linux-cpu_litert-mlx"]
    jobs += [c.replace(".", "_").replace("@", "_") for c in SLOW_VARIANT_CELLS]
    for cell in jobs:
        assert f"{cell}: passed" in rehearsed.stderr
