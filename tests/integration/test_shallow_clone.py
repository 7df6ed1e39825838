"""In a clone without the history (a shallow CI checkout), the declared pre-M3 baseline
cannot be built: verify says so and records byte-identity-baseline as not run, instead of
failing the code under test. The clone is of the last commit (what CI checks out)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from eliza.core.layout import REPO_ROOT
from eliza.formats.matrix_yaml import load_matrix


def test_verify_in_a_shallow_clone_says_the_baseline_is_missing(tmp_path: Path) -> None:
    clone = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "--quiet", "--depth", "1", f"file://{REPO_ROOT}", str(clone)],
        check=True,
        timeout=120,
    )
    baseline = load_matrix(clone / "matrix.yaml").baseline
    assert baseline is not None, "matrix.yaml declares the pre-M3 baseline"
    env = {k: v for k, v in os.environ.items() if k not in ("ELIZA_MATRIX", "ELIZA_STRICT")}
    env["PYTHONPATH"] = str(clone)
    # A cell this host cannot build: verify reaches its baseline decision and builds nothing.
    done = subprocess.run(
        [sys.executable, "-m", "nox", "-s", "verify", "--", "--cell", "android-arm64.none"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert (
        f"byte-identity-baseline not run: the declared baseline {baseline.ref[:12]} is not in this clone"
        in out
    )
    assert "git fetch --unshallow" in out
    assert "Traceback" not in out
    report = json.loads((clone / "build" / "report" / "report.json").read_text())
    assert report["header"]["declared"] > 0
