"""Evidence records: model invariants, JSON form, atomic write, tolerant reading."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from eliza.core.evidence import (
    SCHEMA_VERSION,
    Artifact,
    Counts,
    EvidenceError,
    EvidenceRecord,
    HostInfo,
    InputFingerprint,
    Status,
    fingerprint_key,
    record_filename,
    utc_timestamp,
)
from eliza.formats.evidence_json import (
    SCHEMA_PATH,
    from_json,
    read_records,
    record_to_dict,
    to_json,
    write_record,
)
from eliza.formats.json_schema import load_jsonschema
from tests.signing import TEST_KEY, TEST_POLICY

PARTS = {"native": "a" * 64, "recipes": "b" * 64, "lockfile": "c" * 64, "matrix": "d" * 64}


def make_record(**overrides: Any) -> EvidenceRecord:
    values: dict[str, Any] = {
        "cell": "linux-cpu.npu+xla",
        "check": "byte-identity-gates",
        "status": Status.PASSED,
        "counts": Counts(ran=3, passed=3, failed=0),
        "fingerprint": InputFingerprint.of(PARTS),
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "dirty": False,
        "host": HostInfo(os="linux", cpu="x86_64", compiler="gcc 13.2", tools={"cmake": "3.30.1"}),
        "artifacts": (Artifact(path="build/libelizainference.so", sha256="e" * 64),),
        "started_at": "2026-01-31T12:00:00.000Z",
        "finished_at": "2026-01-31T12:00:05.250Z",
        "duration_s": 5.25,
        "metrics": {"tok_s": 812.5, "first_token_ms": 3, "note": "median of 5"},
        "details": {"first_divergence": None, "prompts": ["a", "b"]},
        "log_tail": "ok\n",
    }
    values.update(overrides)
    return EvidenceRecord(**values)


def test_fingerprint_key_is_sha256_of_sorted_name_value_lines() -> None:
    expected = hashlib.sha256(b"a=1\nb=2\n").hexdigest()
    assert fingerprint_key({"b": "2", "a": "1"}) == expected
    assert InputFingerprint.of({"a": "1", "b": "2"}).key == expected


def test_fingerprint_rejects_ambiguous_parts_and_mismatched_key() -> None:
    with pytest.raises(ValueError, match="without '='"):
        fingerprint_key({"a=b": "1"})
    with pytest.raises(ValueError, match="newline"):
        fingerprint_key({"a": "1\n2"})
    with pytest.raises(EvidenceError, match=r"fingerprint\.key"):
        InputFingerprint(key="0" * 64, parts={"a": "1"})
    with pytest.raises(EvidenceError, match="at least one input"):
        InputFingerprint.of({})


def test_differing_parts_names_changed_added_and_removed() -> None:
    old = InputFingerprint.of({"native": "1", "matrix": "1", "bundle": "1"})
    new = InputFingerprint.of({"native": "2", "matrix": "1", "prompts": "1"})
    assert old.differing_parts(new) == ("bundle", "native", "prompts")


def test_json_round_trip_and_schema_agrees() -> None:
    record = make_record()
    text = to_json(record)
    assert from_json(text) == record
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    load_jsonschema().validate(json.loads(text), schema)
    data = json.loads(text)
    assert data["schema_version"] == SCHEMA_VERSION == 2
    assert data["status"] == "passed"
    assert data["fingerprint"]["parts"] == PARTS


def test_model_invariants() -> None:
    with pytest.raises(EvidenceError, match="exceeds ran"):
        Counts(ran=1, passed=1, failed=1)
    with pytest.raises(EvidenceError, match=r"counts\.ran"):
        Counts(ran=-1, passed=0, failed=0)
    with pytest.raises(EvidenceError, match="UTC"):
        make_record(finished_at="2026-01-31T12:00:05+02:00")
    with pytest.raises(EvidenceError, match="before started_at"):
        make_record(finished_at="2026-01-31T11:00:00Z")
    with pytest.raises(EvidenceError, match=r"metrics\.tok_s"):
        make_record(metrics={"tok_s": float("nan")})
    with pytest.raises(EvidenceError, match="details"):
        make_record(details={"x": object()})
    with pytest.raises(EvidenceError, match="status"):
        make_record(status="maybe")


def test_utc_timestamp_is_z_suffixed_and_rejects_naive() -> None:
    from datetime import UTC, datetime

    assert utc_timestamp(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000Z"
    with pytest.raises(ValueError, match="timezone"):
        utc_timestamp(datetime(2026, 1, 2))


def test_from_json_names_source_and_field() -> None:
    data = record_to_dict(make_record())
    data["counts"]["ran"] = "three"
    with pytest.raises(EvidenceError) as info:
        from_json(json.dumps(data), source="ev/x__y.json")
    assert info.value.source == "ev/x__y.json"
    assert info.value.field == "counts.ran"
    assert "ev/x__y.json" in str(info.value)

    data = record_to_dict(make_record())
    del data["host"]["cpu"]
    with pytest.raises(EvidenceError) as info:
        from_json(json.dumps(data), source="f.json")
    assert info.value.field == "host.cpu"
    assert "required" in info.value.problem

    data = record_to_dict(make_record())
    data["fingerprint"]["parts"]["native"] = "tampered"
    with pytest.raises(EvidenceError, match=r"f\.json: field 'fingerprint\.key'"):
        from_json(json.dumps(data), source="f.json")

    with pytest.raises(EvidenceError, match="not valid JSON"):
        from_json("{", source="f.json")


def test_schema_version_mismatch_is_a_clear_error() -> None:
    data = record_to_dict(make_record())
    data["schema_version"] = 3
    with pytest.raises(EvidenceError) as info:
        from_json(json.dumps(data), source="new.json")
    assert info.value.field == "schema_version"
    assert "version 3 is not supported" in str(info.value)
    assert f"expects {SCHEMA_VERSION}" in str(info.value)


def test_record_filename_is_filesystem_safe() -> None:
    assert record_filename("linux-cpu.npu+xla", "abi") == "linux-cpu.npu+xla__abi.json"
    assert record_filename("../evil/cell", "a b:c") == "_evil_cell__a_b_c.json"


def test_atomic_write_round_trips_and_leaves_no_temp_file(tmp_path: Path) -> None:
    record = make_record()
    path = write_record(tmp_path / "ev", record, TEST_KEY)
    assert path == tmp_path / "ev" / "linux-cpu.npu+xla__byte-identity-gates.json"
    assert sorted(p.name for p in (tmp_path / "ev").iterdir()) == [path.name]
    assert path.stat().st_mode & 0o777 == 0o644  # shareable, unlike mkstemp's default
    # overwriting replaces, still without leftovers
    newer = replace(record, status=Status.FAILED, counts=Counts(ran=3, passed=2, failed=1), reason="diverged")
    write_record(tmp_path / "ev", newer, TEST_KEY)
    assert sorted(p.name for p in (tmp_path / "ev").iterdir()) == [path.name]
    [loaded] = read_records([tmp_path / "ev"], TEST_POLICY.public_keys())
    assert loaded.ok and loaded.problem is None
    assert loaded.record == newer
    assert loaded.path == path


def test_failed_write_removes_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    def boom(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_record(tmp_path, make_record(), TEST_KEY)
    assert list(tmp_path.iterdir()) == []


def test_read_records_turns_bad_files_into_problems(tmp_path: Path) -> None:
    good = write_record(tmp_path / "a", make_record(), TEST_KEY)
    (tmp_path / "a" / "broken__build.json").write_text("{ not json", encoding="utf-8")
    bad = record_to_dict(make_record(cell="linux-cpu.none", check="build"))
    bad["counts"] = {"ran": 1}
    (tmp_path / "a" / "linux-cpu.none__build.json").write_text(json.dumps(bad), encoding="utf-8")
    # not record-shaped names and hidden temp files are ignored
    (tmp_path / "a" / "report.json").write_text("{}", encoding="utf-8")
    (tmp_path / "a" / ".x__y.json.123.tmp").write_text("partial", encoding="utf-8")
    nested = write_record(tmp_path / "a" / "job-2", make_record(cell="linux-cuda.none"), TEST_KEY)

    loaded = read_records([tmp_path / "a", tmp_path / "missing", tmp_path / "a"], TEST_POLICY.public_keys())
    by_name = {item.path.name: item for item in loaded}
    assert set(by_name) == {
        good.name,
        "broken__build.json",
        "linux-cpu.none__build.json",
        nested.name,
        "missing",
    }
    assert by_name[good.name].ok
    assert by_name[nested.name].ok
    broken = by_name["broken__build.json"]
    assert not broken.ok and broken.problem is not None
    assert str(tmp_path / "a" / "broken__build.json") in broken.problem
    assert "not valid JSON" in broken.problem
    invalid = by_name["linux-cpu.none__build.json"]
    assert invalid.problem is not None and "counts.passed" in invalid.problem
    # attributable even though invalid, so the report can mark the grid entry
    assert (invalid.cell, invalid.check) == ("linux-cpu.none", "build")
    assert by_name["missing"].problem is not None and "does not exist" in by_name["missing"].problem
    # the same directory twice does not duplicate records
    assert len(loaded) == 5
