"""The rehearsal plays the generated workflow as GitHub would: jobs after what they need,
the repository's secrets replaced by the local server's, artifacts uploaded and
downloaded by name or pattern; its report is compared with another by state."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from eliza.adapters.conan_server import LocalServer
from eliza.app.sessions.ci_rehearsal import (
    _download,
    _upload,
    _workflow_env,
    compare_states,
    job_order,
    trust_in_policy,
)
from eliza.core.ci_jobs import RELEASE_JOB, REPORT_JOB
from eliza.core.layout import REPO_ROOT
from eliza.formats.attestation import SigningKey
from eliza.formats.ci_workflow import WORKFLOW
from eliza.formats.matrix_yaml import load_matrix

WORKFLOW_DATA = yaml.safe_load((REPO_ROOT / WORKFLOW).read_text())


def test_every_job_runs_after_the_jobs_it_needs() -> None:
    jobs = WORKFLOW_DATA["jobs"]
    order = job_order(jobs)
    assert sorted(order) == sorted(jobs) and order[-2:] == [REPORT_JOB, RELEASE_JOB]
    for job, body in jobs.items():
        for needed in body.get("needs", []):
            assert order.index(needed) < order.index(job)


def test_the_secrets_are_the_local_servers_and_the_rehearsal_s_key() -> None:
    server = LocalServer(url="http://127.0.0.1:1", user="u", password="p", storage=Path(), log=Path())
    key = SigningKey.generate()
    env = _workflow_env(WORKFLOW_DATA, server, key)
    assert env == {
        "ELIZA_STRICT": "1",
        "ELIZA_CONAN_REMOTE_URL": "http://127.0.0.1:1",
        "ELIZA_CONAN_REMOTE_USER": "u",
        "ELIZA_CONAN_REMOTE_PASSWORD": "p",
        "ELIZA_SIGNING_KEY": key.private_pem().decode(),
    }


def test_the_rehearsal_s_key_is_trusted_by_its_snapshot_s_policy(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text((REPO_ROOT / "matrix.yaml").read_text())
    key = SigningKey.generate()
    trust_in_policy(matrix, key, "the CI rehearsal's key")
    [trusted] = load_matrix(matrix).trust.keys
    assert (trusted.id, trusted.public_key) == (key.id, key.public_raw)
    assert trusted.covers("linux-cpu", "selector") and trusted.covers("linux-cuda", "build")


def test_artifacts_by_name_and_by_pattern(tmp_path: Path) -> None:
    job, store, other = tmp_path / "job", tmp_path / "store", tmp_path / "other"
    (job / "build" / "ci").mkdir(parents=True)
    (job / "build" / "ci" / "cells-a.tar.gz").write_text("a")
    (job / "build" / "evidence").mkdir(parents=True)
    (job / "build" / "evidence" / "x__y.json").write_text("{}")
    store.mkdir()
    up = {"name": "cells-a", "path": "build/ci/cells-a.tar.gz", "if-no-files-found": "error"}
    assert _upload({"with": up}, job, store) is None
    assert _upload({"with": {"name": "evidence-a", "path": "build/evidence"}}, job, store) is None
    missing = {"name": "gone", "path": "nowhere", "if-no-files-found": "error"}
    assert _upload({"with": missing}, job, store) == "upload gone: nowhere does not exist"
    assert _download({"with": {"name": "cells-a", "path": "build/ci"}}, other, store) is None
    assert (other / "build" / "ci" / "cells-a.tar.gz").read_text() == "a"
    assert _download({"with": {"pattern": "evidence-*", "path": "evidence"}}, other, store) is None
    assert (other / "evidence" / "evidence-a" / "x__y.json").is_file()
    assert (
        _download({"with": {"name": "cells-b", "path": "x"}}, other, store)
        == "download cells-b: no such artifact"
    )


def test_reports_are_compared_by_state_on_the_cells_that_ran(tmp_path: Path) -> None:
    def report(path: Path, states: dict[tuple[str, str], str]) -> Path:
        rows: dict[str, list[dict[str, str]]] = {}
        for (cell, check), state in states.items():
            rows.setdefault(cell, []).append({"check": check, "state": state})
        path.write_text(json.dumps({"rows": [{"cell": c, "entries": e} for c, e in rows.items()]}))
        return path

    ours = report(tmp_path / "a.json", {("c1", "build"): "verified", ("c2", "build"): "not-run"})
    theirs = report(tmp_path / "b.json", {("c1", "build"): "verified", ("c2", "build"): "not-buildable-here"})
    assert compare_states(ours, theirs, {"c1"}) == []
    assert compare_states(ours, theirs, {"c1", "c2"}) == [
        "c2/build: rehearsal not-run, other not-buildable-here"
    ]
    theirs = report(tmp_path / "c.json", {("c2", "build"): "not-run"})
    assert compare_states(ours, theirs, {"c1"}) == ["c1/build: not in the other report"]
