"""Device-gated items can be claimed: evidence made on a GPU host (here written with the
project's own recording code, fingerprinted against the same tree, as the checks on a
device would write it) is brought in with `nox -s import-evidence -- DIR` and judged like
any record. With every linux-cuda identity check VERIFIED and carrying tok_s, the
cuda-gpu-run item reads claimed; a record without the metric leaves it not claimed, and
files that cannot be used, or that no key the policy trusts for their cell signed, are named
and not imported. The GPU host signs with its own key, which the copy's policy trusts for
the linux-cuda platform; this host's build records of the same (reproducible) libraries are
what the GPU host's records bind to. Runs in a copy: nothing is built."""

from __future__ import annotations

import base64
import hashlib
import json
import textwrap
from pathlib import Path

import pytest

from eliza.formats import attestation
from eliza.formats.attestation import SigningKey
from eliza.formats.matrix_yaml import load_matrix
from tests.ci.helpers import copy_tree
from tests.integration.test_synthetic_gate import copy_env, run

ITEM = "cuda-gpu-run"

# What a GPU host's verify would record for the linux-cuda identity checks ("identity"),
# or this host's verify for the linux-cuda builds ("builds"): builds are reproducible, so
# both name a library of the same bytes, and the identity records bind to this host's build.
WRITE_GPU_EVIDENCE = textwrap.dedent(
    """
    import sys
    from dataclasses import replace
    from pathlib import Path

    from eliza.app.services.bundle import ensure_tiny_bundle
    from eliza.app.services.clock import Stopwatch
    from eliza.app.project import current, host_facts, load_project_matrix
    from eliza.app.services.run import start_run
    from eliza.core.cell_id import CellId
    from eliza.core.matrix import CheckKind
    from eliza.core.outcome import outcome

    out, with_tok_s, what, libs = Path(sys.argv[1]), sys.argv[2] == "yes", sys.argv[3], Path(sys.argv[4])
    matrix = load_project_matrix()
    run = start_run(current(), matrix, host_facts(), print, bundle=ensure_tiny_bundle())
    run.evidence_dir = out
    run.ran_on["linux-cuda"] = "native (NVIDIA H100)"
    kinds = {CheckKind.BUILD} if what == "builds" else {
        CheckKind.BYTE_IDENTITY_REFERENCE, CheckKind.BYTE_IDENTITY_GATES, CheckKind.BYTE_IDENTITY_BASELINE
    }
    for cell in matrix.cells_of("linux-cuda"):
        library = libs / cell.id / "libelizainference.so"
        library.parent.mkdir(parents=True, exist_ok=True)
        library.write_bytes(f"the reproducible library of {cell.id}".encode())
        done = []
        for check in cell.checks:
            if check.kind in kinds:
                o = outcome(cell.id, check.id, ran=5, passed=5, span=Stopwatch().span(),
                            metrics={"tok_s": 1234.5} if with_tok_s else {})
                if check.kind is CheckKind.BYTE_IDENTITY_BASELINE:
                    o = replace(o, details={"baseline_commit": matrix.baseline.ref})
                done.append(o)
        run.record(done, {(o.cell, o.check): {CellId.parse(cell.id): library} for o in done})
    """
)

# The GPU host's key, which the copy's trust policy names for the linux-cuda platform.
GPU_KEY = SigningKey.from_text(base64.b64encode(hashlib.sha256(b"a GPU host's key").digest()).decode())


def _trust_gpu_host(repo: Path) -> None:
    matrix = repo / "matrix.yaml"
    entry = (
        f"  - id: {GPU_KEY.id}\n    label: GPU host\n    public_key: {GPU_KEY.public_b64}\n"
        "    scope: {platforms: [linux-cuda], checks: all}\n"
    )
    matrix.write_text(matrix.read_text().replace("trust:\n  keys: []\n", "trust:\n  keys:\n" + entry))


def _gpu_run(repo: Path, env: dict[str, str], out: Path, tok_s: str) -> None:
    """The GPU host's identity evidence in `out`, and this host's build evidence."""
    _trust_gpu_host(repo)
    libs = out.parent / "libs"
    gpu_env = {**env, "ELIZA_SIGNING_KEY": GPU_KEY.private_pem().decode()}
    made = run(repo, "-c", WRITE_GPU_EVIDENCE, str(out), tok_s, "identity", str(libs), env=gpu_env)
    assert made.returncode == 0, made.stdout + made.stderr
    built = run(
        repo, "-c", WRITE_GPU_EVIDENCE, str(repo / "build" / "evidence"), "no", "builds", str(libs), env=env
    )
    assert built.returncode == 0, built.stdout + built.stderr


def _resigned(source: Path, key: SigningKey, **changes: str) -> bytes:
    """A record of `source` with fields of its predicate changed, signed again by `key`."""
    envelope = json.loads(source.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"].update(changes)
    payload = attestation.to_json_bytes(statement)
    return (json.dumps(attestation.envelope(payload, key)) + "\n").encode()


def _item(repo: Path) -> dict[str, object]:
    report = json.loads((repo / "build" / "report" / "report.json").read_text())
    return next(d for d in report["device_gated"] if d["id"] == ITEM)


def test_gpu_evidence_brought_in_claims_the_gpu_item(tmp_path: Path) -> None:
    repo = copy_tree(tmp_path / "repo")
    env = copy_env(repo)
    gpu_run = tmp_path / "gpu-run"
    _gpu_run(repo, env, gpu_run, "yes")
    (gpu_run / "junk__x.json").write_text("{not json")
    reference = gpu_run / "linux-cuda.none__byte-identity-reference.json"
    # A check this host runs itself: its own evidence is never replaced by another machine's.
    cpu_build = _resigned(reference, GPU_KEY, cell="linux-cpu.none", check="build")
    (gpu_run / "linux-cpu.none__build.json").write_bytes(cpu_build)
    (gpu_run / "linux-cuda.none__nope.json").write_bytes(_resigned(reference, GPU_KEY, check="nope"))
    # Signed by a key the policy does not name, or by the GPU host's key outside its scope.
    stranger = SigningKey.generate()
    (gpu_run / "sub").mkdir()
    (gpu_run / "sub" / reference.name).write_bytes(_resigned(reference, stranger))
    android = "android-arm64.none__byte-identity-reference.json"
    (gpu_run / android).write_bytes(_resigned(reference, GPU_KEY, cell="android-arm64.none"))

    rendered = run(repo, "-m", "nox", "-s", "report", env=env)
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    item = _item(repo)
    assert item["claimed"] is False and item["missing"], item

    imported = run(repo, "-m", "nox", "-s", "import-evidence", "--", str(gpu_run), env=env)
    out = imported.stdout + imported.stderr
    assert imported.returncode == 0, out
    # every identity record the GPU host wrote: each linux-cuda cell's reference and baseline
    # (on each of their bundles) and the gated cells' gates
    identity = {"byte-identity-reference", "byte-identity-gates", "byte-identity-baseline"}
    matrix = load_matrix(repo / "matrix.yaml")
    written = sum(1 for c in matrix.cells_of("linux-cuda") for k in c.checks if k.kind.value in identity)
    assert written > 11 and f"imported {written} record(s)" in out
    assert "not imported:" in out and "junk__x.json" in out
    assert "declares no check 'nope'" in out
    assert "this host runs linux-cpu.none · build itself" in out
    assert f"not trusted: signed by key {stranger.id}, which the trust policy does not name" in out
    assert f"{android}: not trusted: signed by key {GPU_KEY.id} (GPU host)" in out
    copied = repo / "build" / "imported-evidence"
    [imported_reference] = copied.rglob(reference.name)
    assert (
        imported_reference.read_bytes() == reference.read_bytes()
    )  # byte for byte: the GPU host's signature

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
    assert f"`{GPU_KEY.id}` (GPU host)" in markdown  # the signer of the imported entries


# The slow tier: the import path is the case above's; an item that lacks its metric is
# tests/unit/test_report_m3.py::test_a_device_item_is_claimed_by_verified_evidence_with_its_metrics.
@pytest.mark.slow
def test_gpu_evidence_without_the_metric_does_not_claim(tmp_path: Path) -> None:
    repo = copy_tree(tmp_path / "repo")
    env = copy_env(repo)
    gpu_run = tmp_path / "gpu-run"
    _gpu_run(repo, env, gpu_run, "no")
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
