"""The success paths of the sessions whose failures other tests cover: `generate` prints the
library's own greedy text; a CI build job packs a cell and the check job verifies it from
the artifact, compiling nothing (the slow tier); `bench-<platform>` measures and records
identity.
The CI jobs and the bench run in a clone (with the history: the baseline is built there),
so this checkout's evidence is left alone."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from eliza.core.layout import REPO_ROOT
from tests.ci.helpers import env_for, exclude, history_clone, run_only
from tests.ci.helpers import nox as run_nox
from tests.signing import predicate


def nox(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_nox(root, "-s", *args, env=env_for(root))


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return history_clone(tmp_path_factory.mktemp("success") / "repo")


def records(root: Path) -> dict[tuple[str, str], dict[str, object]]:
    found = {}
    for path in (root / "build" / "evidence").glob("*__*.json"):
        data = predicate(path)
        found[(data["cell"], data["check"])] = data
    return found


@pytest.mark.checkout  # this checkout's own generate session
def test_generate_prints_the_librarys_greedy_text() -> None:
    from eliza.app.project import load_project_matrix
    from eliza.app.services.build import ensure_cell_built
    from eliza.app.services.bundle import ensure_bundle, generate_text, sample_bundle

    done = nox(REPO_ROOT, "generate", "--", "--cell", "linux-cpu.none", "--max-tokens", "8", "Once", "upon")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "8 tokens generated (greedy)" in done.stderr
    library = ensure_cell_built("linux-cpu.none").library
    matrix = load_project_matrix()  # generate's default: the real model's bundle
    _, text = generate_text(library, ensure_bundle(matrix, sample_bundle(matrix)), "Once upon", 8)
    assert done.stdout.strip().splitlines()[-1] == "Once upon" + text.decode("utf-8", errors="replace")


# The slow tier: a check job verifying the no-gate cell from its build job's artifact,
# compiling nothing, is also tests/ci/test_a_cell_that_does_not_build.py (build and selector
# from the artifact); this one adds the checks that take the artifact's tools (abi,
# gate-fallthrough, the consumers), which the CI rehearsal's check jobs run too.
@pytest.mark.slow
def test_a_check_job_verifies_a_cell_from_its_build_jobs_artifact(clone: Path) -> None:
    # The checks that take the library and the tools from the artifact (the consumers
    # compare with its reference runner); the benches' and perf's own paths have their tests.
    run_only(clone, ("build", "selector", "gate-fallthrough", "abi", "consumer"))
    built = nox(
        clone, "ci-build", "--", "--platform", "linux-cpu", "--cell", "linux-cpu.none", "--out", "build/ci"
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert (clone / "build" / "ci" / "cells-linux-cpu.tar.gz").is_file()
    check = nox(clone, "ci-check", "--", "--cell", "linux-cpu.none", "--artifacts", "build/ci")
    assert check.returncode == 0, check.stderr[-3000:]
    assert "llama.cpp built 0 time(s) in this job" in check.stderr
    found = records(clone)
    cell = "linux-cpu.none"
    assert set(found) == {(cell, c) for c in ("build", "abi", "selector", "gate-fallthrough", "consumer")}
    for name in ("build", "abi", "selector", "gate-fallthrough", "consumer"):
        assert found[(cell, name)]["status"] == "passed", (name, found[(cell, name)]["reason"])
    report = json.loads((clone / "build" / "report" / "report.json").read_text())
    states = {(e["cell"], e["check"]): e["state"] for row in report["rows"] for e in row["entries"]}
    assert states[(cell, "selector")] == "verified" and states[(cell, "consumer")] == "verified"


def test_a_bench_session_measures_and_records_identity(clone: Path, tmp_path: Path) -> None:
    run_only(clone, ("build", "byte-identity-reference", "byte-identity-gates"))
    exclude(clone, "linux-cpu", ("litert",), ("litert", "mlx"))  # the no-gate cell and one gated cell
    # An ASCII prompt and a multi-byte one: every overhead run decodes 3 x 256 tokens of each.
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Once upon a time there was\nnaïve café — 東京 and\n", encoding="utf-8")
    done = nox(
        clone,
        "bench-linux-cpu",
        "--",
        *("--prompts", str(prompts), "--max-tokens", "8", "--repeats", "1"),
        *("--overhead-pairs", "5", "--drafter-pairs", "3"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "seam overhead: decode tok/s FFI / reference" in done.stderr
    found = records(clone)
    assert ("linux-cpu.litert", "byte-identity-reference") not in found  # left out of this copy
    for cell in ("linux-cpu.none", "linux-cpu.mlx"):
        record = found[(cell, "byte-identity-reference")]
        assert record["status"] == "passed" and record["counts"]["ran"] > 0  # type: ignore[index]
    gates = found[("linux-cpu.mlx", "byte-identity-gates")]
    assert gates["status"] == "passed", gates["reason"]
    metrics = found[("linux-cpu.none", "byte-identity-reference")]["metrics"]
    assert "seam_overhead_ratio" in metrics  # type: ignore[operator]
