"""The slow tier's own runs in the checkout, so CI's slow-tier job uploads their evidence
and the report merges it: the sanitizer cell verified (llama.cpp and the library under
ASan + UBSan, the native suite with leak checking), and every fuzz target run for a time
budget without a finding."""

from __future__ import annotations

import json
import subprocess

from eliza.app.project import load_project_matrix
from eliza.core.layout import REPO_ROOT
from tests.ci.helpers import env_for
from tests.ci.helpers import nox as run_nox

FUZZ_SECONDS = 60


def nox(*args: str, timeout: int) -> subprocess.CompletedProcess[str]:
    """In the checkout itself: CI's slow-tier job uploads the evidence this writes."""
    return run_nox(REPO_ROOT, "-s", *args, env=env_for(REPO_ROOT), timeout=timeout)


def sanitizer_cells() -> list[str]:
    return [c.id for c in load_project_matrix().cells if c.variant is not None and c.variant.sanitizers]


def test_the_sanitizer_cell_verifies() -> None:
    cells = sanitizer_cells()
    assert cells, "matrix.yaml declares a sanitizer variant cell"
    args = [a for c in cells for a in ("--cell", c)]
    done = nox("verify", "--", *args, timeout=3 * 3600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    report = json.loads((REPO_ROOT / "build" / "report" / "report.json").read_text())
    states = {(e["cell"], e["check"]): e["state"] for row in report["rows"] for e in row["entries"]}
    for cell in cells:
        for check in ("build", "native-suite"):
            assert states[(cell, check)] == "verified", (cell, check, states[(cell, check)])


def test_every_fuzz_target_runs_its_budget_without_a_finding() -> None:
    done = nox("fuzz", "--", "--seconds", str(FUZZ_SECONDS), timeout=3 * 3600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    summary = json.loads((REPO_ROOT / "build" / "fuzz" / "summary.json").read_text())
    targets = summary["targets"]
    assert targets, "nox -s fuzz ran no target"
    for name, target in targets.items():
        assert target["executions"] > 0, name
        assert target["findings"] == [], (name, target["findings"])
