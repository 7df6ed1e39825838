"""Evidence as in-toto attestations: a Statement v1 in a DSSE envelope, signed with ed25519.

    {"payloadType": "application/vnd.in-toto+json",
     "payload": base64(Statement JSON),
     "signatures": [{"keyid": "<16 hex>", "sig": base64(ed25519(PAE(payloadType, payload)))}]}

The Statement's subjects are the artifacts the check judged (docs/evidence.md), its
predicateType is PREDICATE_TYPE and its predicate the record. The signature covers the
DSSE pre-authentication encoding (PAE) of the exact payload bytes, so any change to the
record, its subjects or its type breaks it. This module signs and verifies; where keys
live is eliza.adapters.signing_keys. A release's SLSA provenance is signed the same way,
under its own predicate type (eliza.formats.provenance).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from eliza.core.trust import SignatureCheck, key_id

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
# The evidence schema (eliza/schema/evidence.schema.json) the predicate follows; bumped with it.
PREDICATE_TYPE = "https://libelizainference.github.io/evidence/v2"


class AttestationError(ValueError):
    """An envelope or Statement that is not of the shape this project writes."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what the signature is over."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


@dataclass(frozen=True)
class SigningKey:
    """An ed25519 private key and the id of its public half. Its repr never shows the key."""

    private: Ed25519PrivateKey

    def __repr__(self) -> str:
        return f"SigningKey(id={self.id})"

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_text(cls, text: str) -> SigningKey:
        """A PKCS#8 PEM private key, or the base64 of the 32-byte raw private key (seed)."""
        stripped = text.strip()
        try:
            if stripped.startswith("-----BEGIN"):
                key = serialization.load_pem_private_key(stripped.encode("ascii"), password=None)
                if not isinstance(key, Ed25519PrivateKey):
                    raise AttestationError("the PEM key is not an ed25519 key")
                return cls(key)
            raw = base64.b64decode(stripped, validate=True)
        except (ValueError, TypeError, binascii.Error) as exc:
            if isinstance(exc, AttestationError):
                raise
            raise AttestationError(
                "is neither a PKCS#8 PEM ed25519 private key nor the base64 of its 32 raw bytes"
            ) from None
        if len(raw) != 32:
            raise AttestationError(f"decodes to {len(raw)} bytes; a raw ed25519 private key is 32")
        return cls(Ed25519PrivateKey.from_private_bytes(raw))

    def private_pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    @property
    def public_raw(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )

    @property
    def public_b64(self) -> str:
        return base64.b64encode(self.public_raw).decode("ascii")

    @property
    def id(self) -> str:
        return key_id(self.public_raw)

    def sign(self, data: bytes) -> bytes:
        return self.private.sign(data)


def statement(
    subjects: list[dict[str, Any]], predicate: Mapping[str, Any], *, predicate_type: str = PREDICATE_TYPE
) -> dict[str, Any]:
    """A Statement v1; its predicate type is this project's evidence unless another is named
    (the release's SLSA provenance: eliza.formats.provenance)."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": predicate_type,
        "predicate": dict(predicate),
    }


def envelope(payload: bytes, key: SigningKey) -> dict[str, Any]:
    signature = key.sign(pae(PAYLOAD_TYPE, payload))
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": key.id, "sig": base64.b64encode(signature).decode("ascii")}],
    }


def is_envelope(data: Any) -> bool:
    return isinstance(data, dict) and "payloadType" in data and "payload" in data


def open_envelope(data: Mapping[str, Any]) -> tuple[str, bytes, list[tuple[str, bytes]]]:
    """(payloadType, payload bytes, [(keyid, signature)]) or AttestationError naming the field."""
    kind = data.get("payloadType")
    if not isinstance(kind, str):
        raise AttestationError("field 'payloadType' must be a string")
    text = data.get("payload")
    if not isinstance(text, str):
        raise AttestationError("field 'payload' must be a base64 string")
    try:
        payload = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise AttestationError("field 'payload' is not valid base64") from None
    signatures = data.get("signatures")
    if not isinstance(signatures, list):
        raise AttestationError("field 'signatures' must be a list")
    found: list[tuple[str, bytes]] = []
    for i, item in enumerate(signatures):
        if not isinstance(item, dict) or not isinstance(item.get("sig"), str):
            raise AttestationError(f"field 'signatures[{i}]' must be an object with a base64 'sig'")
        kid = item.get("keyid", "")
        if not isinstance(kid, str):
            raise AttestationError(f"field 'signatures[{i}].keyid' must be a string")
        try:
            sig = base64.b64decode(item["sig"], validate=True)
        except (binascii.Error, ValueError):
            raise AttestationError(f"field 'signatures[{i}].sig' is not valid base64") from None
        found.append((kid, sig))
    return kind, payload, found


def check_signatures(
    payload_type: str, payload: bytes, signatures: list[tuple[str, bytes]], keys: Mapping[str, bytes]
) -> SignatureCheck:
    """Which of the signatures verify over PAE(payload_type, payload) with the known public
    keys (key id -> 32 raw bytes); when none does, why, naming the key ids."""
    keyids = tuple(kid for kid, _ in signatures)
    if not signatures:
        return SignatureCheck(problem="not signed: the envelope has no signature")
    message = pae(payload_type, payload)
    verified: list[str] = []
    failed: list[str] = []
    unknown: list[str] = []
    for kid, sig in signatures:
        public = keys.get(kid)
        if public is None:
            unknown.append(kid or "(no keyid)")
            continue
        try:
            Ed25519PublicKey.from_public_bytes(public).verify(sig, message)
        except InvalidSignature:
            failed.append(kid)
            continue
        verified.append(kid)
    if verified:
        return SignatureCheck(keyids=keyids, verified=tuple(verified))
    if failed:
        problem = (
            f"invalid signature: key {', '.join(failed)}'s signature does not verify over these bytes "
            "(the record was altered after signing, or signed by another key under that id)"
        )
    else:
        problem = f"signed by key {', '.join(unknown)}, which the trust policy does not name"
    return SignatureCheck(keyids=keyids, problem=problem)


def decode_statement(payload: bytes, *, predicate_type: str = PREDICATE_TYPE) -> dict[str, Any]:
    """The Statement of a payload, or AttestationError: not JSON, not a Statement v1, or a
    predicate type other than predicate_type (by default this project's evidence)."""
    try:
        data = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise AttestationError("the payload is not UTF-8 JSON") from None
    if not isinstance(data, dict):
        raise AttestationError("the payload is not a JSON object")
    if data.get("_type") != STATEMENT_TYPE:
        raise AttestationError(f"the payload's _type is {data.get('_type')!r}, not {STATEMENT_TYPE!r}")
    if data.get("predicateType") != predicate_type:
        whose = "this project's" if predicate_type == PREDICATE_TYPE else "the expected"
        raise AttestationError(
            f"the predicateType is {data.get('predicateType')!r}, not {whose} {predicate_type!r}"
        )
    if not isinstance(data.get("subject"), list) or not isinstance(data.get("predicate"), dict):
        raise AttestationError("the Statement needs a 'subject' list and a 'predicate' object")
    return data


def to_json_bytes(value: Any) -> bytes:
    """The canonical bytes this project signs: sorted keys, no spaces, UTF-8."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")
