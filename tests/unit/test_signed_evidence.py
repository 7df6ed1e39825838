"""Signed, bound evidence: envelopes written and read through the real codec, judged by the
real report against the project's matrix. Every forgery of a selector record is refused
and says why; the private key never reaches a record or a report."""

from __future__ import annotations

import base64
import json
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from eliza.adapters.signing_keys import KEY_ENV, SigningKeyError, key_path, machine_key
from eliza.app.services import recording
from eliza.core.evidence import Counts, EvidenceRecord, HostInfo, LoadedRecord, Status, SubjectRole
from eliza.core.fingerprint import InputHashes, fingerprint_for
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import Matrix
from eliza.core.report import GridState, HeaderFacts, PlatformCapability, Report, build_report
from eliza.core.trust import TrustedKey, TrustPolicy, key_id
from eliza.formats import attestation
from eliza.formats.attestation import SigningKey
from eliza.formats.evidence_json import read_records, record_to_dict, write_record
from eliza.formats.matrix_yaml import MatrixError, load_matrix, parse_matrix
from eliza.formats.report_render import render_report
from tests.signing import TEST_KEY, TEST_POLICY
from tests.unit.test_verify_plan import HASHES

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
CPU = "linux-cpu.litert"
CUDA = "linux-cuda.litert"  # a cell whose library was never built here
CAN = PlatformCapability(can_build=True, build_reason="ok", can_run=True, run_reason="ok")
FACTS = HeaderFacts(commit="c0ffee", dirty=False, generated_at="2026-02-01T00:00:00Z", host="test host")


def current(hashes: InputHashes = HASHES) -> Any:
    return lambda cell, check: fingerprint_for(cell, check, hashes)


def make(cell: str, check: str, subjects: Any = (), hashes: InputHashes = HASHES) -> EvidenceRecord:
    return EvidenceRecord(
        cell=cell,
        check=check,
        status=Status.PASSED,
        counts=Counts(ran=29, passed=29, failed=0),
        fingerprint=fingerprint_for(MATRIX.cell(cell), MATRIX.check(check), hashes),
        commit="c0ffee",
        dirty=False,
        host=HostInfo(os="linux", cpu="x86_64"),
        started_at="2026-01-31T12:00:00Z",
        finished_at="2026-01-31T12:00:10Z",
        duration_s=10.0,
        subjects=subjects,
    )


class Scene:
    """A checkout's evidence as verify leaves it: the CPU cell built, its build and selector
    records bound to the library and signed by TEST_KEY."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.evidence = root / "build" / "evidence"
        self.library = root / "build" / CPU / "libelizainference.so"
        self.library.parent.mkdir(parents=True)
        self.library.write_bytes(b"the cpu library")
        self.hashes = recording.ArtifactHashes(repo=root)
        self.build = self.signed(CPU, "build")
        self.selector = self.signed(CPU, "selector")

    def subjects(self, cell: str, library: Path | None = None) -> Any:
        judged = recording.Judged(libraries={cell: library or self.library})
        return recording.subjects(cell, judged, MATRIX, self.root, self.hashes)

    def signed(self, cell: str, check: str, key: SigningKey = TEST_KEY, **kw: Any) -> Path:
        record = make(cell, check, self.subjects(CPU if cell == CPU else cell), **kw)
        return write_record(self.evidence, record, key)

    def report(self, trust: TrustPolicy = TEST_POLICY, hashes: InputHashes = HASHES) -> Report:
        return build_report(
            MATRIX,
            records=read_records([self.evidence], trust.public_keys()),
            current_fingerprint=current(hashes),
            capabilities={p.id: CAN for p in MATRIX.platforms},
            artifact_matches=self.hashes.resolve,
            facts=FACTS,
            trust=trust,
        )


def payload_of(path: Path) -> dict[str, Any]:
    envelope = json.loads(path.read_text())
    statement: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    return statement


def forge_selector_for_cuda(scene: Scene) -> dict[str, Any]:
    """The attack: the selector record's content, its cell renamed, its fingerprint
    recomputed with the project's own functions."""
    predicate = payload_of(scene.selector)["predicate"]
    predicate["cell"] = CUDA
    fingerprint = fingerprint_for(MATRIX.cell(CUDA), MATRIX.check("selector"), HASHES)
    predicate["fingerprint"] = {"key": fingerprint.key, "parts": dict(fingerprint.parts)}
    return predicate


def test_verify_s_records_are_signed_bound_and_verified(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    statement = payload_of(scene.selector)
    assert statement["_type"] == attestation.STATEMENT_TYPE
    assert statement["predicateType"] == attestation.PREDICATE_TYPE
    assert statement["predicate"]["schema_version"] == 2
    library = [s for s in statement["subject"] if s["annotations"]["role"] == "library"]
    assert library == [
        {
            "name": f"build/{CPU}/libelizainference.so",
            "digest": {"sha256": scene.hashes.sha256(scene.library)},
            "annotations": {"role": "library", "cell": CPU},
        }
    ]
    report = scene.report()
    entry = report.entry(CPU, "selector")
    assert entry.state is GridState.VERIFIED, entry.reason
    assert entry.signer is not None and (entry.signer.key_id, entry.signer.label) == (TEST_KEY.id, "test key")
    assert report.entry(CPU, "build").state is GridState.VERIFIED


def test_the_issue_s_attack_a_bare_copy_with_a_recomputed_fingerprint_is_untrusted(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    before = scene.report().header.verified
    forged = scene.evidence / f"{CUDA}__selector.json"
    forged.write_text(json.dumps(forge_selector_for_cuda(scene)))
    report = scene.report()
    entry = report.entry(CUDA, "selector")
    assert entry.state is GridState.UNTRUSTED
    assert "not signed" in entry.reason
    assert report.entry(CUDA, "build").state is GridState.NOT_RUN
    assert report.header.verified == before


def test_the_attack_in_an_envelope_with_the_original_signature_is_an_invalid_signature(
    tmp_path: Path,
) -> None:
    scene = Scene(tmp_path)
    statement = payload_of(scene.selector)
    statement["predicate"] = forge_selector_for_cuda(scene)
    envelope = json.loads(scene.selector.read_text())
    envelope["payload"] = base64.b64encode(attestation.to_json_bytes(statement)).decode()
    (scene.evidence / f"{CUDA}__selector.json").write_text(json.dumps(envelope))
    entry = scene.report().entry(CUDA, "selector")
    assert entry.state is GridState.UNTRUSTED
    assert "invalid signature" in entry.reason and TEST_KEY.id in entry.reason


def test_self_signed_by_a_key_the_policy_does_not_trust_is_untrusted(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    stranger = SigningKey.generate()
    write_record(scene.evidence, make(CUDA, "selector", scene.subjects(CUDA)), stranger)
    entry = scene.report().entry(CUDA, "selector")
    assert entry.state is GridState.UNTRUSTED
    assert f"signed by key {stranger.id}, which the trust policy does not name" in entry.reason


def test_a_trusted_record_copied_to_another_cell_is_refused(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    (scene.evidence / f"{CUDA}__selector.json").write_bytes(scene.selector.read_bytes())
    report = scene.report()
    entry = report.entry(CUDA, "selector")
    assert entry.state is GridState.INVALID
    assert "named for another entry" in entry.reason and f"{CPU}__selector.json" in entry.reason
    assert report.entry(CPU, "selector").state is GridState.VERIFIED  # the original still counts


def test_a_key_trusted_for_other_platforms_does_not_vouch_for_this_one(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    lab = SigningKey.generate()
    scoped = TrustedKey(
        id=lab.id, label="android lab", public_key=lab.public_raw, platforms=frozenset({"android-arm64"})
    )
    policy = TrustPolicy(keys=(*TEST_POLICY.keys, scoped))
    write_record(scene.evidence, make(CPU, "selector", scene.subjects(CPU)), lab)  # replaces the good one
    entry = scene.report(policy).entry(CPU, "selector")
    assert entry.state is GridState.UNTRUSTED
    assert "android lab" in entry.reason and "android-arm64" in entry.reason and "linux-cpu" in entry.reason


def test_a_signature_over_altered_bytes_is_invalid(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    envelope = json.loads(scene.selector.read_text())
    statement = payload_of(scene.selector)
    statement["predicate"]["status"] = "passed"
    statement["predicate"]["counts"] = {"ran": 30, "passed": 30, "failed": 0}
    envelope["payload"] = base64.b64encode(attestation.to_json_bytes(statement)).decode()
    scene.selector.write_text(json.dumps(envelope))
    entry = scene.report().entry(CPU, "selector")
    assert entry.state is GridState.UNTRUSTED
    assert "invalid signature" in entry.reason


def test_an_envelope_replayed_after_the_inputs_changed_is_stale(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    changed = replace(HASHES, native="n2")
    report = scene.report(hashes=changed)
    entry = report.entry(CPU, "selector")
    assert entry.state is GridState.STALE and "native" in entry.reason


def test_an_envelope_replayed_after_the_library_was_rebuilt_names_both_hashes(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    old = scene.hashes.sha256(scene.library)
    replayed = scene.selector.read_bytes()
    scene.library.write_bytes(b"the rebuilt cpu library")
    scene.signed(CPU, "build")  # the new build's evidence
    scene.selector.write_bytes(replayed)  # the old selector record, dropped back in
    new = scene.hashes.sha256(scene.library)
    entry = scene.report().entry(CPU, "selector")
    assert entry.state is GridState.INVALID
    assert old in entry.reason and new in entry.reason and "another library" in entry.reason


def test_a_record_whose_subjects_name_another_library_is_invalid(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    other = tmp_path / "elsewhere" / "libelizainference.so"
    other.parent.mkdir()
    other.write_bytes(b"some other library")
    write_record(scene.evidence, make(CPU, "selector", scene.subjects(CPU, other)), TEST_KEY)
    entry = scene.report().entry(CPU, "selector")
    assert entry.state is GridState.INVALID
    assert scene.hashes.sha256(other) in entry.reason and scene.hashes.sha256(scene.library) in entry.reason


def test_a_run_check_without_its_cell_s_build_evidence_is_not_run(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    scene.build.unlink()
    entry = scene.report().entry(CPU, "selector")
    assert entry.state is GridState.NOT_RUN
    assert "build has no evidence" in entry.reason


def test_a_run_check_that_names_no_library_is_invalid(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    write_record(scene.evidence, make(CPU, "selector", ()), TEST_KEY)
    entry = scene.report().entry(CPU, "selector")
    assert entry.state is GridState.INVALID and "names no library" in entry.reason


def test_a_schema_1_record_is_untrusted_with_the_reason(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    old = record_to_dict(make(CPU, "selector"))
    old["schema_version"] = 1
    scene.selector.write_text(json.dumps(old))
    entry = scene.report().entry(CPU, "selector")
    assert entry.state is GridState.UNTRUSTED
    assert "schema 1 record" in entry.reason and "re-run" in entry.reason


def test_a_payload_type_that_is_not_ours_is_untrusted(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    envelope = json.loads(scene.selector.read_text())
    envelope["payloadType"] = "application/json"
    scene.selector.write_text(json.dumps(envelope))
    entry = scene.report().entry(CPU, "selector")
    assert entry.state is GridState.UNTRUSTED and "'application/json' is not ours" in entry.reason


def test_an_unsigned_envelope_and_a_malformed_one_are_untrusted(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    envelope = json.loads(scene.selector.read_text())
    scene.selector.write_text(json.dumps({**envelope, "signatures": []}))
    entry = scene.report().entry(CPU, "selector")
    assert entry.state is GridState.UNTRUSTED and "no signature" in entry.reason
    scene.selector.write_text(json.dumps({**envelope, "payload": "not base64!"}))
    entry = scene.report().entry(CPU, "selector")
    assert entry.state is GridState.UNTRUSTED and "malformed envelope" in entry.reason


def test_the_local_key_counts_only_without_release(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    mine = SigningKey.generate()
    write_record(scene.evidence, make(CPU, "build", scene.subjects(CPU)), mine)
    write_record(scene.evidence, make(CPU, "selector", scene.subjects(CPU)), mine)
    local = TrustPolicy().with_local(mine.public_raw)
    report = scene.report(local)
    entry = report.entry(CPU, "selector")
    assert entry.state is GridState.VERIFIED and entry.signer is not None
    assert (entry.signer.label, entry.signer.local) == ("this machine", True)
    assert "this machine's key" in report.header.trust and mine.id in report.header.trust
    release = scene.report(TrustPolicy())
    assert release.entry(CPU, "selector").state is GridState.UNTRUSTED
    assert "only (--release)" in release.header.trust


def test_a_trusted_record_is_preferred_to_a_newer_forged_one(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    forged = scene.root / "imported" / f"{CPU}__selector.json"
    forged.parent.mkdir()
    failing = replace(make(CPU, "selector", scene.subjects(CPU)), finished_at="2026-01-31T13:00:00Z")
    write_record(forged.parent, failing, SigningKey.generate())
    records = read_records([scene.evidence, forged.parent], TEST_POLICY.public_keys())
    report = build_report(
        MATRIX,
        records=records,
        current_fingerprint=current(),
        capabilities={p.id: CAN for p in MATRIX.platforms},
        artifact_matches=scene.hashes.resolve,
        facts=FACTS,
        trust=TEST_POLICY,
    )
    entry = report.entry(CPU, "selector")
    assert entry.state is GridState.VERIFIED and entry.evidence is not None
    assert entry.evidence.path == str(scene.selector)


def test_the_private_key_appears_in_no_record_and_no_report(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    rendered = render_report(scene.report(), tmp_path / "report")
    secrets = _secret_forms(TEST_KEY)
    for path in [*scene.evidence.iterdir(), rendered.html, rendered.markdown, rendered.json]:
        text = path.read_text()
        assert not any(s in text for s in secrets), path
    assert TEST_KEY.id in rendered.markdown.read_text()  # the signer is named, the key is not
    assert not any(s in repr(TEST_KEY) for s in secrets)


def _secret_forms(key: SigningKey) -> list[str]:
    pem = key.private_pem().decode()
    body = "".join(pem.strip().splitlines()[1:-1])
    from cryptography.hazmat.primitives import serialization

    raw = key.private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    return [body, base64.b64encode(raw).decode(), raw.hex()]


# --------------------------------------------------------------------------- codec


def test_pae_is_the_dsse_encoding() -> None:
    assert attestation.pae("a/b", b"xyz") == b"DSSEv1 3 a/b 3 xyz"


def test_a_signature_verifies_only_over_its_exact_bytes() -> None:
    payload = b'{"x":1}'
    env = attestation.envelope(payload, TEST_KEY)
    kind, body, sigs = attestation.open_envelope(env)
    keys = {TEST_KEY.id: TEST_KEY.public_raw}
    assert attestation.check_signatures(kind, body, sigs, keys).verified == (TEST_KEY.id,)
    assert attestation.check_signatures(kind, b'{"x":2}', sigs, keys).verified == ()
    assert attestation.check_signatures("other/type", body, sigs, keys).verified == ()


def test_a_record_read_back_has_its_subjects_and_signature(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    [loaded] = [r for r in read_records([scene.evidence], TEST_POLICY.public_keys()) if r.check == "selector"]
    assert isinstance(loaded, LoadedRecord) and loaded.record is not None
    assert loaded.signature is not None and loaded.signature.verified == (TEST_KEY.id,)
    roles = [s.role for s in loaded.record.subjects]
    assert roles == [SubjectRole.LIBRARY]
    assert loaded.raw == scene.selector.read_bytes()


# --------------------------------------------------------------------------- keys


def test_this_machine_s_key_is_made_once_private_and_reused(tmp_path: Path) -> None:
    first = machine_key(tmp_path, {})
    path = key_path(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert machine_key(tmp_path, {}).id == first.id


def test_a_key_file_others_can_read_is_refused_with_the_fix(tmp_path: Path) -> None:
    machine_key(tmp_path, {})
    path = key_path(tmp_path)
    os.chmod(path, 0o644)
    with pytest.raises(SigningKeyError) as info:
        machine_key(tmp_path, {})
    assert f"chmod 600 {path}" in str(info.value) and "0644" in str(info.value)


def test_the_ci_key_comes_from_the_environment_as_pem_or_base64(tmp_path: Path) -> None:
    key = SigningKey.generate()
    from cryptography.hazmat.primitives import serialization

    raw = key.private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    assert machine_key(tmp_path, {KEY_ENV: key.private_pem().decode()}).id == key.id
    assert machine_key(tmp_path, {KEY_ENV: base64.b64encode(raw).decode()}).id == key.id
    assert not key_path(tmp_path).exists()  # a CI key never lands in the cache
    with pytest.raises(SigningKeyError) as info:
        machine_key(tmp_path, {KEY_ENV: "not a key"})
    assert KEY_ENV in str(info.value) and "not a key" not in str(info.value)


# --------------------------------------------------------------------------- policy


def _with_trust(entry: str) -> Matrix:
    text = (REPO_ROOT / "matrix.yaml").read_text()
    return parse_matrix(text.replace("trust:\n  keys: []", f"trust:\n  keys:\n{entry}"), "matrix.yaml")


def test_the_policy_loads_keys_with_their_scopes() -> None:
    key = SigningKey.generate()
    matrix = _with_trust(
        f"  - id: {key.id}\n    label: android lab\n    public_key: {key.public_b64}\n"
        "    scope: {platforms: [android-arm64], checks: all}\n"
    )
    [trusted] = matrix.trust.keys
    assert trusted.id == key_id(key.public_raw) and trusted.label == "android lab"
    assert trusted.covers("android-arm64", "selector") and not trusted.covers("linux-cpu", "selector")


def test_a_policy_key_whose_id_is_not_its_key_s_is_an_error_naming_the_line() -> None:
    key = SigningKey.generate()
    with pytest.raises(MatrixError) as info:
        _with_trust(
            f"  - id: {'f' * 16}\n    label: ci\n    public_key: {key.public_b64}\n"
            "    scope: {platforms: all, checks: all}\n"
        )
    text = str(info.value)
    assert "trust.keys[0].id" in text and key.id in text and "matrix.yaml:" in text


def test_a_policy_scope_naming_an_unknown_check_is_an_error() -> None:
    key = SigningKey.generate()
    with pytest.raises(MatrixError) as info:
        _with_trust(
            f"  - id: {key.id}\n    label: ci\n    public_key: {key.public_b64}\n"
            "    scope: {platforms: all, checks: [selector, no-such-check]}\n"
        )
    assert "trust.keys[0].scope.checks[1]" in str(info.value) and "no-such-check" in str(info.value)


def test_a_record_that_passed_the_schema_is_not_schema_checked_again_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eliza.formats import evidence_json

    evidence, memo = tmp_path / "evidence", tmp_path / "evidence-schema-valid.json"
    path = write_record(evidence, make(CPU, "selector"), TEST_KEY)
    keys = TEST_POLICY.public_keys()
    [first] = read_records([evidence], keys, memo=memo)
    assert first.record is not None and memo.is_file()
    checked: list[str] = []
    real = evidence_json._first_schema_error

    def counting(data: Any, source: str) -> Any:
        checked.append(source)
        return real(data, source)

    monkeypatch.setattr(evidence_json, "_first_schema_error", counting)
    [again] = read_records([evidence], keys, memo=memo)
    assert again.record == first.record and checked == []
    assert again.signature is not None and again.signature.verified  # signatures: every time
    # Rewritten (another identity): checked again, and a schema problem is found and named.
    envelope = json.loads(path.read_text())
    statement = payload_of(path)
    statement["predicate"]["counts"] = {"ran": "many", "passed": 29, "failed": 0}
    envelope["payload"] = base64.b64encode(attestation.to_json_bytes(statement)).decode()
    path.write_text(json.dumps(envelope))
    [broken] = read_records([evidence], keys, memo=memo)
    assert checked == [str(path)] and broken.record is None and "counts.ran" in (broken.problem or "")
