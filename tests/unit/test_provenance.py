"""A release archive's signed SLSA provenance (eliza.formats.provenance): written and read
back through the real DSSE codec, refused when altered, signed by another key, of another
predicate type or with a malformed digest; and `eliza verify-provenance`'s exit statuses."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from eliza.cli import main
from eliza.core.trust import key_id
from eliza.formats import attestation
from eliza.formats.attestation import SigningKey
from eliza.formats.provenance import (
    BUILD_TYPE,
    PREDICATE_TYPE,
    ProvenanceError,
    ResourceDescriptor,
    provenance_statement,
    sign_provenance,
    subject_digest,
    verify_provenance,
)


def _key(name: bytes) -> SigningKey:
    """A fixed key derived from its name: never a secret."""
    return SigningKey.from_text(base64.b64encode(hashlib.sha256(name).digest()).decode())


KEY = _key(b"eliza provenance test key")
OTHER = _key(b"eliza provenance other key")
ARCHIVE = b"the bytes of an archive\n"
ARCHIVE_NAME = "elizainference-1.2.3-linux-cpu.none.tar.gz"
LLAMA_COMMIT = hashlib.sha1(b"llama.cpp").hexdigest()


def _statement(**changes: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "subjects": [(ARCHIVE_NAME, hashlib.sha256(ARCHIVE).hexdigest())],
        "external_parameters": {"version": "1.2.3", "cell": "linux-cpu.none", "gates": ()},
        "internal_parameters": {"host": "test host"},
        "resolved_dependencies": [
            ResourceDescriptor(
                name="llama.cpp",
                uri="git+https://example.invalid/llama.cpp",
                digest={"gitCommit": LLAMA_COMMIT},
            ),
            ResourceDescriptor(name="matrix.yaml", digest={"sha256": hashlib.sha256(b"matrix").hexdigest()}),
        ],
        "builder_id": "https://libelizainference.github.io/release/builder/test",
        "invocation_id": "run-1",
        "started_on": "2026-12-01T10:00:00Z",
        "finished_on": "2026-12-01T10:05:00Z",
    }
    return provenance_statement(**{**arguments, **changes})


def test_a_signed_statement_verifies_and_reads_back_whole() -> None:
    statement = _statement(byproducts=[ResourceDescriptor(name="build.log", digest={"sha256": "0" * 64})])
    text = sign_provenance(statement, KEY)
    assert text.endswith("\n") and text.count("\n") == 1
    envelope = json.loads(text)
    assert envelope["signatures"][0]["keyid"] == KEY.id
    assert base64.b64decode(envelope["payload"]) == attestation.to_json_bytes(statement)
    assert verify_provenance(text, KEY.public_raw) == statement
    assert statement["_type"] == attestation.STATEMENT_TYPE and statement["predicateType"] == PREDICATE_TYPE
    predicate = statement["predicate"]
    assert predicate["buildDefinition"]["buildType"] == BUILD_TYPE
    assert predicate["buildDefinition"]["externalParameters"]["gates"] == []  # plain JSON
    assert predicate["buildDefinition"]["resolvedDependencies"][0] == {
        "name": "llama.cpp",
        "uri": "git+https://example.invalid/llama.cpp",
        "digest": {"gitCommit": LLAMA_COMMIT},
    }
    assert predicate["runDetails"]["metadata"] == {
        "invocationId": "run-1",
        "startedOn": "2026-12-01T10:00:00Z",
        "finishedOn": "2026-12-01T10:05:00Z",
    }
    assert predicate["runDetails"]["byproducts"] == [{"name": "build.log", "digest": {"sha256": "0" * 64}}]
    assert "byproducts" not in _statement()["predicate"]["runDetails"]


def test_subject_digest_names_the_sha256_of_a_subject() -> None:
    statement = _statement(subjects=[(ARCHIVE_NAME, hashlib.sha256(ARCHIVE).hexdigest()), ("b", "1" * 64)])
    assert statement["subject"][0] == {
        "name": ARCHIVE_NAME,
        "digest": {"sha256": hashlib.sha256(ARCHIVE).hexdigest()},
    }
    assert subject_digest(statement, ARCHIVE_NAME) == hashlib.sha256(ARCHIVE).hexdigest()
    assert subject_digest(statement, "b") == "1" * 64
    assert subject_digest(statement, "absent") is None


def test_a_payload_altered_by_one_byte_does_not_verify() -> None:
    envelope = json.loads(sign_provenance(_statement(), KEY))
    payload = bytearray(base64.b64decode(envelope["payload"]))
    at = payload.index(b"1.2.3")
    payload[at] = ord("9")
    envelope["payload"] = base64.b64encode(bytes(payload)).decode()
    with pytest.raises(ProvenanceError, match=f"^the signature does not verify with key {KEY.id}"):
        verify_provenance(json.dumps(envelope), KEY.public_raw)


def test_another_key_is_refused_naming_both_ids() -> None:
    text = sign_provenance(_statement(), OTHER)
    with pytest.raises(ProvenanceError) as caught:
        verify_provenance(text, KEY.public_raw)
    assert str(caught.value) == f"signed by key {OTHER.id}, not by the given key {KEY.id}"


def test_another_predicate_type_is_refused() -> None:
    statement = attestation.statement([{"name": "a", "digest": {"sha256": "2" * 64}}], {"check": "build"})
    envelope = attestation.envelope(attestation.to_json_bytes(statement), KEY)
    text = attestation.to_json_bytes(envelope).decode()
    with pytest.raises(
        ProvenanceError, match=f"not SLSA provenance v1: .*not the expected '{PREDICATE_TYPE}'"
    ):
        verify_provenance(text, KEY.public_raw)
    with pytest.raises(ProvenanceError, match="refusing to sign"):
        sign_provenance(statement, KEY)
    # The evidence reader still takes its own type only, with its own message.
    evidence = attestation.statement([], {}, predicate_type=PREDICATE_TYPE)
    with pytest.raises(attestation.AttestationError, match="not this project's"):
        attestation.decode_statement(attestation.to_json_bytes(evidence))


@pytest.mark.parametrize(
    ("digest", "field"),
    [
        ({"sha256": "A" * 64}, "digest.sha256"),
        ({"sha256": "0" * 63}, "digest.sha256"),
        ({"gitCommit": ""}, "digest.gitCommit"),
        ({"sha512": "zz"}, "digest.sha512"),
    ],
)
def test_a_bad_digest_is_refused_naming_the_field(digest: dict[str, str], field: str) -> None:
    with pytest.raises(ProvenanceError, match=rf"field '{field}' of the resource 'dep'"):
        ResourceDescriptor(name="dep", digest=digest)
    with pytest.raises(ProvenanceError, match=r"field 'digest.sha256' of subject\[0\]"):
        _statement(subjects=[(ARCHIVE_NAME, "0" * 63)])


def test_zero_subjects_and_a_resource_with_nothing_are_refused() -> None:
    with pytest.raises(ProvenanceError, match="at least one subject"):
        _statement(subjects=[])
    with pytest.raises(ProvenanceError, match="neither a 'digest' nor a 'uri'"):
        ResourceDescriptor(name="dep", digest={})
    assert ResourceDescriptor(name="", digest={}, uri="https://example.invalid/x").to_dict() == {
        "uri": "https://example.invalid/x"
    }


def test_malformed_files_are_refused_in_one_sentence() -> None:
    text = sign_provenance(_statement(), KEY)
    for bad, message in (
        (text + text, "holds 2 non-empty lines"),
        ("", "holds 0 non-empty lines"),
        ("{not json", "is not JSON"),
        ('{"a": 1}', "not a DSSE envelope"),
    ):
        with pytest.raises(ProvenanceError, match=message):
            verify_provenance(bad, KEY.public_raw)


# ------------------------------------------------------------------ the command line


def _release(tmp_path: Path) -> tuple[Path, Path]:
    archive = tmp_path / ARCHIVE_NAME
    archive.write_bytes(ARCHIVE)
    provenance = tmp_path / f"{ARCHIVE_NAME}.intoto.jsonl"
    provenance.write_text(sign_provenance(_statement(), KEY))
    return archive, provenance


def test_cli_verifies_and_prints_each_subject(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive, provenance = _release(tmp_path)
    argv = ["verify-provenance", str(provenance), "--public-key", KEY.public_b64]
    assert main([*argv, "--artifact", str(archive)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{ARCHIVE_NAME} sha256:{hashlib.sha256(ARCHIVE).hexdigest()}"
    assert out[1] == f"verified: signed by key {KEY.id}, predicate {PREDICATE_TYPE}, 2 resolved dependencies"


def test_cli_exit_1_when_it_does_not_verify_or_an_artifact_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive, provenance = _release(tmp_path)
    assert main(["verify-provenance", str(provenance), "--public-key", OTHER.public_b64]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and str(provenance) in error
    assert f"not by the given key {key_id(OTHER.public_raw)}" in error
    archive.write_bytes(ARCHIVE + b"changed")
    argv = ["verify-provenance", str(provenance), "--public-key", KEY.public_b64, "--artifact", str(archive)]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert f"{archive}: its sha256 is {hashlib.sha256(ARCHIVE + b'changed').hexdigest()}" in captured.err
    stranger = tmp_path / "other.tar.gz"
    stranger.write_bytes(ARCHIVE)
    assert main([*argv[:-1], str(stranger)]) == 1
    assert "attests no subject 'other.tar.gz'" in capsys.readouterr().err


def test_cli_exit_2_on_an_unreadable_file_or_a_bad_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, provenance = _release(tmp_path)
    missing = tmp_path / "missing.intoto.jsonl"
    assert main(["verify-provenance", str(missing), "--public-key", KEY.public_b64]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and str(missing) in error
    assert main(["verify-provenance", str(provenance), "--public-key", "not base64!"]) == 2
    assert "--public-key is not base64" in capsys.readouterr().err
    short = base64.b64encode(KEY.public_raw[:16]).decode()
    assert main(["verify-provenance", str(provenance), "--public-key", short]) == 2
    assert "--public-key is 16 bytes" in capsys.readouterr().err
    gone = tmp_path / "gone.tar.gz"
    argv = ["verify-provenance", str(provenance), "--public-key", KEY.public_b64, "--artifact", str(gone)]
    assert main(argv) == 2
    assert str(gone) in capsys.readouterr().err
