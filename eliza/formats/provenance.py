"""SLSA provenance v1 of a release's archives, signed like the evidence records.

Beside each release archive `elizainference-<V>-<cell>.tar.gz` the release writes
`<archive name>.intoto.jsonl`: one line, one DSSE envelope (eliza.formats.attestation:
ed25519 over the DSSE PAE) whose payload is an in-toto Statement v1 with predicateType
PREDICATE_TYPE and the SLSA provenance v1 predicate (https://slsa.dev/spec/v1.0/provenance):

    {"buildDefinition": {"buildType": BUILD_TYPE, "externalParameters": {...},
                         "internalParameters": {...}, "resolvedDependencies": [...]},
     "runDetails": {"builder": {"id": ...},
                    "metadata": {"invocationId": ..., "startedOn": ..., "finishedOn": ...},
                    "byproducts": [...]}}

Pure: texts in, texts out; the caller reads and writes the files. Every refusal is a
ProvenanceError whose message is one sentence naming the field or the key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from eliza.core.trust import PUBLIC_KEY_BYTES, key_id
from eliza.formats import attestation
from eliza.formats.attestation import AttestationError, SigningKey

PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
# This project's build type: what externalParameters and internalParameters of a release mean.
BUILD_TYPE = "https://libelizainference.github.io/release/v1"

_HEX = re.compile(r"[0-9a-f]+")
# Digest algorithms whose length is known; any other must still be lowercase hex.
_HEX_LENGTHS = {"sha256": 64, "sha512": 128, "sha1": 40}


class ProvenanceError(ValueError):
    """A provenance Statement or envelope that is not what this project writes, or one
    whose signature does not verify with the given key."""


def _check_digest(where: str, digest: Mapping[str, str]) -> None:
    """where: what owns the digest, e.g. "subject[0] ('a.tar.gz')" or "resource 'llama.cpp'"."""
    for algorithm, value in digest.items():
        if not isinstance(algorithm, str) or not algorithm:
            raise ProvenanceError(f"field 'digest' of {where} has an empty or non-string algorithm name")
        name = f"digest.{algorithm}"
        if not isinstance(value, str) or not _HEX.fullmatch(value):
            raise ProvenanceError(f"field '{name}' of {where} must be non-empty lowercase hex, not {value!r}")
        length = _HEX_LENGTHS.get(algorithm)
        if length is not None and len(value) != length:
            raise ProvenanceError(
                f"field '{name}' of {where} must be {length} hex digits, not {len(value)} ({value!r})"
            )


@dataclass(frozen=True, kw_only=True)
class ResourceDescriptor:
    """SLSA's ResourceDescriptor: an input of the build (a resolved dependency) or something
    it made besides the subjects (a byproduct). It needs a digest or a uri."""

    name: str
    digest: Mapping[str, str]
    uri: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"resource {self.name!r}" if self.name else "resource"
        if not isinstance(self.name, str) or not isinstance(self.uri, str):
            raise ProvenanceError(f"fields 'name' and 'uri' of a {where} must be strings")
        _check_digest(f"the {where}", self.digest)
        if not self.digest and not self.uri:
            raise ProvenanceError(f"the {where} has neither a 'digest' nor a 'uri'")
        for key, value in self.annotations.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ProvenanceError(f"field 'annotations' of the {where} must map strings to strings")
        # Copies: a caller changing its dicts afterwards changes nothing here.
        object.__setattr__(self, "digest", dict(self.digest))
        object.__setattr__(self, "annotations", dict(self.annotations))

    def to_dict(self) -> dict[str, Any]:
        """SLSA's ResourceDescriptor JSON, empty fields left out."""
        out: dict[str, Any] = {}
        if self.name:
            out["name"] = self.name
        if self.uri:
            out["uri"] = self.uri
        if self.digest:
            out["digest"] = dict(sorted(self.digest.items()))
        if self.annotations:
            out["annotations"] = dict(sorted(self.annotations.items()))
        return out


def _json_copy(name: str, value: Any) -> Any:
    """value as plain JSON (tuples become lists), or ProvenanceError naming the field."""
    try:
        return json.loads(attestation.to_json_bytes(value))
    except (TypeError, ValueError) as exc:
        raise ProvenanceError(f"field '{name}' is not JSON-serialisable: {exc}") from None


def _timestamp(name: str, text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise ProvenanceError(f"field '{name}' must be an RFC 3339 timestamp, not {text!r}") from None
    if moment.tzinfo is None:
        raise ProvenanceError(f"field '{name}' must carry its time zone (e.g. a trailing Z), not {text!r}")
    return moment


def provenance_statement(
    *,
    subjects: Sequence[tuple[str, str]],
    external_parameters: Mapping[str, Any],
    internal_parameters: Mapping[str, Any],
    resolved_dependencies: Sequence[ResourceDescriptor],
    builder_id: str,
    invocation_id: str,
    started_on: str,
    finished_on: str,
    byproducts: Sequence[ResourceDescriptor] = (),
) -> dict[str, Any]:
    """The in-toto Statement v1 of a release build: subjects are (file name, sha256)."""
    if not subjects:
        raise ProvenanceError("a provenance Statement needs at least one subject; none was given")
    subject_list: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, (name, sha256) in enumerate(subjects):
        if not isinstance(name, str) or not name:
            raise ProvenanceError(f"field 'subject[{i}].name' must be a non-empty string")
        if name in seen:
            raise ProvenanceError(f"field 'subject[{i}].name': {name!r} is named twice")
        seen.add(name)
        _check_digest(f"subject[{i}] ({name!r})", {"sha256": sha256})
        subject_list.append(ResourceDescriptor(name=name, digest={"sha256": sha256}).to_dict())
    if not isinstance(builder_id, str) or not builder_id:
        raise ProvenanceError("field 'runDetails.builder.id' must be a non-empty string")
    if not isinstance(invocation_id, str):
        raise ProvenanceError("field 'runDetails.metadata.invocationId' must be a string")
    started = _timestamp("runDetails.metadata.startedOn", started_on)
    finished = _timestamp("runDetails.metadata.finishedOn", finished_on)
    if finished < started:
        raise ProvenanceError(
            f"field 'runDetails.metadata.finishedOn' ({finished_on}) is before startedOn ({started_on})"
        )
    metadata = {"invocationId": invocation_id, "startedOn": started_on, "finishedOn": finished_on}
    run_details: dict[str, Any] = {"builder": {"id": builder_id}, "metadata": metadata}
    if byproducts:
        run_details["byproducts"] = [b.to_dict() for b in byproducts]
    predicate = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": _json_copy("buildDefinition.externalParameters", dict(external_parameters)),
            "internalParameters": _json_copy("buildDefinition.internalParameters", dict(internal_parameters)),
            "resolvedDependencies": [d.to_dict() for d in resolved_dependencies],
        },
        "runDetails": run_details,
    }
    return attestation.statement(subject_list, predicate, predicate_type=PREDICATE_TYPE)


def sign_provenance(statement: Mapping[str, Any], key: SigningKey) -> str:
    """The text of the `.intoto.jsonl` file: the signed envelope on one line, then a newline."""
    if (
        statement.get("_type") != attestation.STATEMENT_TYPE
        or statement.get("predicateType") != PREDICATE_TYPE
    ):
        raise ProvenanceError(
            f"refusing to sign: not a Statement v1 of predicate type {PREDICATE_TYPE!r} "
            f"(its predicateType is {statement.get('predicateType')!r})"
        )
    try:
        payload = attestation.to_json_bytes(dict(statement))
    except (TypeError, ValueError) as exc:
        raise ProvenanceError(f"refusing to sign: the Statement is not JSON-serialisable: {exc}") from None
    line = attestation.to_json_bytes(attestation.envelope(payload, key)).decode("utf-8")
    return line + "\n"


def _field(value: Any, name: str, what: str, kind: type) -> Any:
    """value when it is a non-empty kind (an empty list counts), else ProvenanceError naming the field."""
    if not isinstance(value, kind) or (kind is str and not value):
        raise ProvenanceError(f"the provenance's field '{name}' must be {what}")
    return value


def _check_subjects(statement: Mapping[str, Any]) -> None:
    for i, item in enumerate(statement["subject"]):
        item = _field(item, f"subject[{i}]", "an object", dict)
        name = _field(item.get("name"), f"subject[{i}].name", "a non-empty string", str)
        digest = _field(item.get("digest"), f"subject[{i}].digest", "an object", dict)
        _field(digest.get("sha256"), f"subject[{i}].digest.sha256", "a sha256 in hex", str)
        _check_digest(f"subject[{i}] ({name!r})", digest)


def _check_predicate(predicate: Mapping[str, Any]) -> None:
    definition = _field(predicate.get("buildDefinition"), "buildDefinition", "an object", dict)
    _field(definition.get("buildType"), "buildDefinition.buildType", "a URI", str)
    _field(definition.get("resolvedDependencies"), "buildDefinition.resolvedDependencies", "a list", list)
    run = _field(predicate.get("runDetails"), "runDetails", "an object", dict)
    builder = _field(run.get("builder"), "runDetails.builder", "an object", dict)
    _field(builder.get("id"), "runDetails.builder.id", "a URI", str)


def verify_provenance(text: str, public_key: bytes) -> dict[str, Any]:
    """The Statement of a `.intoto.jsonl` text whose envelope public_key (32 raw ed25519
    bytes) signed, or ProvenanceError saying in one sentence why not."""
    if len(public_key) != PUBLIC_KEY_BYTES:
        raise ProvenanceError(
            f"the public key is {len(public_key)} bytes; an ed25519 public key is {PUBLIC_KEY_BYTES}"
        )
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise ProvenanceError(
            f"the file holds {len(lines)} non-empty lines; a provenance file holds exactly one DSSE envelope"
        )
    try:
        data = json.loads(lines[0])
    except (ValueError, RecursionError):
        raise ProvenanceError("its line is not JSON") from None
    if not attestation.is_envelope(data):
        raise ProvenanceError("its line is not a DSSE envelope (no 'payloadType' and 'payload')")
    try:
        kind, payload, signatures = attestation.open_envelope(data)
    except AttestationError as exc:
        raise ProvenanceError(f"malformed envelope: {exc}") from None
    if kind != attestation.PAYLOAD_TYPE:
        raise ProvenanceError(
            f"the envelope's payloadType is {kind!r}, not in-toto's {attestation.PAYLOAD_TYPE!r}"
        )
    kid = key_id(public_key)
    check = attestation.check_signatures(kind, payload, signatures, {kid: public_key})
    if not check.verified:
        if not check.keyids:
            raise ProvenanceError("not signed: the envelope has no signature")
        if kid in check.keyids:
            raise ProvenanceError(
                f"the signature does not verify with key {kid}: the file was altered after signing, "
                "or signed by another key under that id"
            )
        named = ", ".join(k or "(no keyid)" for k in check.keyids)
        raise ProvenanceError(f"signed by key {named}, not by the given key {kid}")
    try:
        statement = attestation.decode_statement(payload, predicate_type=PREDICATE_TYPE)
    except AttestationError as exc:
        raise ProvenanceError(f"not SLSA provenance v1: {exc}") from None
    _check_subjects(statement)
    _check_predicate(statement["predicate"])
    return statement


def subject_digest(statement: Mapping[str, Any], name: str) -> str | None:
    """The sha256 of the Statement's subject called name, or None when there is none."""
    for item in statement.get("subject") or ():
        if isinstance(item, dict) and item.get("name") == name:
            digest = item.get("digest")
            sha256 = digest.get("sha256") if isinstance(digest, dict) else None
            return sha256 if isinstance(sha256, str) else None
    return None
