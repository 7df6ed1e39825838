"""The forgery of issue 28, against a copy: evidence written by the project's own recording
code (a CPU cell's build and selector records, bound to its library and signed with the
copy's machine key), then the attacker's step: the selector record copied, its cell renamed
to linux-cuda.litert, its fingerprint recomputed with eliza.core.fingerprint. `nox -s
report` reads it UNTRUSTED, never VERIFIED, and the verified count does not move. The
machine's private key appears in no record, report or log. Runs in a copy: nothing is built."""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path

import pytest

from tests.ci.helpers import copy_tree, seeded_cache
from tests.integration.test_synthetic_gate import copy_env, run

CPU, CUDA = "linux-cpu.litert", "linux-cuda.litert"

WRITE = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    from eliza.app.project import current, host_facts, load_project_matrix
    from eliza.app.services.bundle import ensure_tiny_bundle
    from eliza.app.services.clock import Stopwatch
    from eliza.app.services.run import start_run
    from eliza.core.cell_id import CellId
    from eliza.core.outcome import outcome

    cell = sys.argv[1]
    matrix = load_project_matrix()
    run = start_run(current(), matrix, host_facts(), print, bundle=ensure_tiny_bundle())
    library = run.project.repo / "build" / "linux-cpu" / "litert" / "build" / "libelizainference.so"
    library.parent.mkdir(parents=True, exist_ok=True)
    library.write_bytes(b"the litert cell's library")
    span = Stopwatch().span()
    done = [outcome(cell, check, ran=29, passed=29, span=span) for check in ("build", "selector")]
    run.record(done, {(o.cell, o.check): {CellId.parse(cell): library} for o in done})
    """
)

FORGE = textwrap.dedent(
    """
    import base64, json, sys
    from pathlib import Path

    from eliza.app.project import current, host_facts, load_project_matrix
    from eliza.app.services.bundle import ensure_tiny_bundle
    from eliza.app.services.run import start_run
    from eliza.core.fingerprint import fingerprint_for

    evidence, cell = Path(sys.argv[1]), sys.argv[2]
    matrix = load_project_matrix()
    hashes = start_run(current(), matrix, host_facts(), print, bundle=ensure_tiny_bundle()).hashes
    envelope = json.loads((evidence / "linux-cpu.litert__selector.json").read_text())
    record = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    record["cell"] = cell
    fingerprint = fingerprint_for(matrix.cell(cell), matrix.check("selector"), hashes)
    record["fingerprint"] = {"key": fingerprint.key, "parts": dict(fingerprint.parts)}
    (evidence / f"{cell}__selector.json").write_text(json.dumps(record, indent=2))
    """
)


def _report(repo: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((repo / "build" / "report" / "report.json").read_text())
    return data


def _entry(report: dict[str, object], cell: str, check: str) -> dict[str, object]:
    rows = report["rows"]
    assert isinstance(rows, list)
    return next(e for row in rows for e in row["entries"] if (e["cell"], e["check"]) == (cell, check))


# The slow tier (13 s of a 2-core suite): the cheaper tests of the same path are in
# tests/unit/test_signed_evidence.py: the same forgery judged by the same report code
# (test_the_issue_s_attack_a_bare_copy_with_a_recomputed_fingerprint_is_untrusted) and the
# private key kept out of every record and report
# (test_the_private_key_appears_in_no_record_and_no_report).
@pytest.mark.slow
def test_the_forgery_of_the_issue_is_untrusted_and_the_key_stays_private(tmp_path: Path) -> None:
    repo = copy_tree(tmp_path / "repo")
    env = {**copy_env(repo), "ELIZA_CACHE_DIR": str(seeded_cache(tmp_path / "cache"))}  # a machine of its own
    env.pop("ELIZA_SIGNING_KEY", None)
    logs = []
    made = run(repo, "-c", WRITE, CPU, env=env)
    logs.append(made.stdout + made.stderr)
    assert made.returncode == 0, logs[-1]
    before = run(repo, "-m", "nox", "-s", "report", env=env)
    logs.append(before.stdout + before.stderr)
    assert before.returncode == 0, logs[-1]
    honest = _report(repo)
    assert _entry(honest, CPU, "selector")["state"] == "verified"
    verified = honest["header"]["verified"]  # type: ignore[index]

    evidence = repo / "build" / "evidence"
    forged = run(repo, "-c", FORGE, str(evidence), CUDA, env=env)
    logs.append(forged.stdout + forged.stderr)
    assert forged.returncode == 0, logs[-1]
    after = run(repo, "-m", "nox", "-s", "report", env=env)
    logs.append(after.stdout + after.stderr)
    assert after.returncode == 0, logs[-1]
    report = _report(repo)
    entry = _entry(report, CUDA, "selector")
    assert entry["state"] == "untrusted" and "not signed" in str(entry["reason"])
    assert _entry(report, CUDA, "build")["state"] == "not-run"
    assert report["header"]["verified"] == verified  # type: ignore[index]
    keys = run(repo, "-m", "nox", "-s", "keys", env=env)
    logs.append(keys.stdout + keys.stderr)
    assert keys.returncode == 0, logs[-1]

    pem = next((tmp_path / "cache" / "keys").glob("*.pem")).read_text()
    body = "".join(pem.strip().splitlines()[1:-1])
    der = base64.b64decode(body)
    secrets = [body, base64.b64encode(der[-32:]).decode(), der[-32:].hex()]  # the PEM, the raw seed
    shown = [*evidence.iterdir(), *(repo / "build" / "report").iterdir()]
    for path in shown:
        if path.suffix in (".json", ".md", ".html"):
            text = path.read_text()
            assert not any(s in text for s in secrets), path
    for log in logs:
        assert not any(s in log for s in secrets)
    assert "public key" in logs[-1]  # nox -s keys shows the public half
