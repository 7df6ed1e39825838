"""pytest-benchmark of a verify with nothing to do: `nox -s verify` on this checkout once its
evidence is current (every step kept or skipped), five rounds, one group. It reads the
matrix and the evidence, hashes the inputs, plans, and keeps the report and the sample line
as they are; the budget is 2 s on a 2-core machine. Skipped when verify has work to do
(run `nox -s verify` first): a benchmark that builds would measure the builds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def _nox(*args: str) -> subprocess.CompletedProcess[str]:
    nox = shutil.which("nox")
    argv = [nox] if nox else [sys.executable, "-m", "nox"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [*argv, "-s", "verify", *args], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )


def test_a_verify_with_nothing_to_do(benchmark: Any) -> None:
    plan = _nox("--", "--dry-run", "--json")
    assert plan.returncode == 0, plan.stderr[-2000:]
    counts = json.loads(plan.stdout[plan.stdout.index("{") :])["counts"]
    if counts.get("build") or counts.get("run"):
        pytest.skip(f"verify has work to do here ({counts}); run `nox -s verify` first")
    _nox()  # the report and the sample line settle

    def verify() -> subprocess.CompletedProcess[str]:
        return _nox()

    done = benchmark.pedantic(verify, rounds=5, iterations=1)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "verify: 0 check(s) ran" in done.stdout + done.stderr, done.stderr[-2000:]
