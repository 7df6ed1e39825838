"""pytest-benchmark of what signed evidence costs the report: reading 1,000 envelopes with
their signatures verified, next to reading the same records' bare JSON (what a reader of
schema 1 did), one group. Skipped in the normal suite (`--benchmark-skip` in pyproject);
`nox -s benchmarks` runs them. The record is a realistic one: a selector record with its
library, test kit and bundle subjects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eliza.core.evidence import (
    Counts,
    EvidenceRecord,
    HostInfo,
    InputFingerprint,
    Subject,
    SubjectRole,
    record_filename,
)
from eliza.formats.evidence_json import read_records, record_from_dict, to_json, write_record
from tests.signing import TEST_KEY, TEST_POLICY

RECORDS = 1000


def _record(n: int) -> EvidenceRecord:
    cell = f"linux-cpu.g{n}"
    return EvidenceRecord(
        cell=cell,
        check="selector",
        status="passed",  # type: ignore[arg-type]
        counts=Counts(ran=29, passed=29, failed=0),
        fingerprint=InputFingerprint.of({"native": "n" * 64, "tests": "t" * 64, "matrix": f"{n:064x}"}),
        commit="c0ffee" * 6,
        dirty=False,
        host=HostInfo(os="linux 6.1", cpu="x86_64", tools={"cmake": "3.30", "conan": "2.9"}),
        started_at="2026-01-31T12:00:00.000Z",
        finished_at="2026-01-31T12:00:10.000Z",
        duration_s=10.0,
        details={"summary": "29 passed", "ran_on": "native"},
        log_tail="x" * 2000,
        subjects=(
            Subject(
                name=f"build/{cell}/libelizainference.so",
                sha256="a" * 64,
                role=SubjectRole.LIBRARY,
                cell=cell,
            ),
            Subject(
                name=f"build/{cell}/libelizainference_testkit.so", sha256="b" * 64, role=SubjectRole.TEST_KIT
            ),
            Subject(name="build/bundles/tiny/manifest.json", sha256="c" * 64, role=SubjectRole.BUNDLE),
        ),
    )


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    signed = tmp_path_factory.mktemp("signed")
    bare = tmp_path_factory.mktemp("bare")
    for n in range(RECORDS):
        record = _record(n)
        write_record(signed, record, TEST_KEY)
        (bare / record_filename(record.cell, record.check)).write_text(to_json(record))
    return signed, bare


@pytest.mark.benchmark(group="read-1000-records")
def test_read_and_verify_1000_signed_envelopes(benchmark, evidence: tuple[Path, Path]) -> None:  # type: ignore[no-untyped-def]
    keys = TEST_POLICY.public_keys()
    loaded = benchmark.pedantic(read_records, args=([evidence[0]], keys), rounds=5, warmup_rounds=1)
    assert len(loaded) == RECORDS
    assert all(r.signature is not None and r.signature.verified == (TEST_KEY.id,) for r in loaded)


@pytest.mark.benchmark(group="read-1000-records")
def test_read_1000_bare_records(benchmark, evidence: tuple[Path, Path]) -> None:  # type: ignore[no-untyped-def]
    def read_bare() -> int:
        return sum(
            1 for p in sorted(evidence[1].iterdir()) if record_from_dict(json.loads(p.read_text()), str(p))
        )

    assert benchmark.pedantic(read_bare, rounds=5, warmup_rounds=1) == RECORDS
