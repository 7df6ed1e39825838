"""Device-gated items can be claimed: evidence made on a GPU host (here written with the
project's own recording code, fingerprinted against the same tree, as the checks on a
device would write it) is brought in with `nox -s import-evidence -- DIR` and judged like
any record. With every linux-cuda identity check VERIFIED and carrying tok_s, the
cuda-gpu-run item reads claimed; a record without the metric leaves it not claimed, and
files that cannot be used are named and not imported. Runs in a copy: nothing is built."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.ci.helpers import copy_tree
from tests.integration.test_synthetic_gate import copy_env, run

ITEM = "cuda-gpu-run"

# What a GPU host's verify would record for the linux-cuda identity checks.
WRITE_GPU_EVIDENCE = textwrap.dedent(
    """
    import sys
    from dataclasses import replace
    from pathlib import Path

    from eliza.app.services.bundle import ensure_tiny_bundle
    from eliza.app.services.clock import Stopwatch
    from eliza.app.project import current, host_facts, load_project_matrix
    from eliza.app.services.run import start_run
    from eliza.core.matrix import CheckKind
    from eliza.core.outcome import outcome

    out, with_tok_s = Path(sys.argv[1]), sys.argv[2] == "yes"
    matrix = load_project_matrix()
    run = start_run(current(), matrix, host_facts(), print, bundle=ensure_tiny_bundle())
    run.evidence_dir = out
    run.ran_on["linux-cuda"] = "native (NVIDIA H100)"
    kinds = {
        CheckKind.BYTE_IDENTITY_REFERENCE, CheckKind.BYTE_IDENTITY_GATES, CheckKind.BYTE_IDENTITY_BASELINE
    }
    done = []
    for cell in matrix.cells_of("linux-cuda"):
        for check in cell.checks:
            if check.kind in kinds:
                o = outcome(cell.id, check.id, ran=5, passed=5, span=Stopwatch().span(),
                            metrics={"tok_s": 1234.5} if with_tok_s else {})
                if check.kind is CheckKind.BYTE_IDENTITY_BASELINE:
                    o = replace(o, details={"baseline_commit": matrix.baseline.ref})
                done.append(o)
    run.record(done)
    """
)


def _item(repo: Path) -> dict[str, object]:
    report = json.loads((repo / "build" / "report" / "report.json").read_text())
    return next(d for d in report["device_gated"] if d["id"] == ITEM)


def test_gpu_evidence_brought_in_claims_the_gpu_item(tmp_path: Path) -> None:
    repo = copy_tree(tmp_path / "repo")
    env = copy_env(repo)
    gpu_run = tmp_path / "gpu-run"
    made = run(repo, "-c", WRITE_GPU_EVIDENCE, str(gpu_run), "yes", env=env)
    assert made.returncode == 0, made.stdout + made.stderr
    (gpu_run / "junk__x.json").write_text("{not json")
    # A check this host runs itself: its own evidence is never replaced by another machine's.
    (gpu_run / "linux-cpu.none__build.json").write_text(
        (gpu_run / "linux-cuda.none__byte-identity-reference.json")
        .read_text()
        .replace('"cell": "linux-cuda.none"', '"cell": "linux-cpu.none"')
        .replace('"check": "byte-identity-reference"', '"check": "build"')
    )
    (gpu_run / "macos-arm64.none__nope.json").write_text(
        (gpu_run / "linux-cuda.none__byte-identity-reference.json")
        .read_text()
        .replace('"check": "byte-identity-reference"', '"check": "nope"')
    )

    rendered = run(repo, "-m", "nox", "-s", "report", env=env)
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    item = _item(repo)
    assert item["claimed"] is False and item["missing"], item

    imported = run(repo, "-m", "nox", "-s", "import-evidence", "--", str(gpu_run), env=env)
    out = imported.stdout + imported.stderr
    assert imported.returncode == 0, out
    assert "imported 11 record(s)" in out  # 4 cells x (reference, baseline) + 3 gated cells x gates in out
    assert "not imported:" in out and "junk__x.json" in out
    assert "declares no check 'nope'" in out
    assert "this host runs linux-cpu.none · build itself" in out

    rendered = run(repo, "-m", "nox", "-s", "report", env=env)
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    item = _item(repo)
    assert item["claimed"] is True, item["missing"]
    assert {e["cell"] for e in item["claim_evidence"]} == {  # type: ignore[attr-defined]
        "linux-cuda.none",
        "linux-cuda.litert",
        "linux-cuda.mlx",
        "linux-cuda.litert+mlx",
    }
    markdown = (repo / "build" / "report" / "report.md").read_text()
    assert "| claimed |" in markdown


def test_gpu_evidence_without_the_metric_does_not_claim(tmp_path: Path) -> None:
    repo = copy_tree(tmp_path / "repo")
    env = copy_env(repo)
    gpu_run = tmp_path / "gpu-run"
    made = run(repo, "-c", WRITE_GPU_EVIDENCE, str(gpu_run), "no", env=env)
    assert made.returncode == 0, made.stdout + made.stderr
    assert run(repo, "-m", "nox", "-s", "import-evidence", "--", str(gpu_run), env=env).returncode == 0
    assert run(repo, "-m", "nox", "-s", "report", env=env).returncode == 0
    item = _item(repo)
    assert item["claimed"] is False
    assert "linux-cuda.none · byte-identity-reference: the evidence has no tok_s" in item["missing"]  # type: ignore[operator]


def test_nothing_usable_is_an_error_naming_the_directory(tmp_path: Path) -> None:
    repo = copy_tree(tmp_path / "repo")
    env = copy_env(repo)
    empty = tmp_path / "empty"
    empty.mkdir()
    done = run(repo, "-m", "nox", "-s", "import-evidence", "--", str(empty), env=env)
    assert done.returncode == 2
    assert f"no usable evidence record in {empty}" in done.stdout + done.stderr
    assert not (repo / "build" / "imported-evidence").exists()
