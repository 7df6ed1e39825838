"""Who may attest what: the trust policy of matrix.yaml (`trust.keys`), the key ids that
name public keys, and the verdict on one record's signature.

Pure: signatures are checked in eliza.formats.attestation, keys are stored by
eliza.adapters.signing_keys. A record counts only when a signature over its exact bytes
verifies with a key the policy (or, for a local report, this machine) trusts for the
record's cell and check.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

# An ed25519 public key is 32 bytes; its id is the first 16 hex digits of their sha256.
PUBLIC_KEY_BYTES = 32
KEY_ID_LENGTH = 16
THIS_MACHINE = "this machine"


def key_id(public_key: bytes) -> str:
    """The id a raw ed25519 public key goes by in envelopes, the policy and the report."""
    return hashlib.sha256(public_key).hexdigest()[:KEY_ID_LENGTH]


def decode_public_key(text: str) -> bytes:
    """The 32 raw bytes of a base64 public key, or ValueError saying what is wrong."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not base64") from None
    if len(raw) != PUBLIC_KEY_BYTES:
        raise ValueError(f"is {len(raw)} bytes, an ed25519 public key is {PUBLIC_KEY_BYTES}")
    return raw


@dataclass(frozen=True, kw_only=True)
class TrustedKey:
    """One key the report believes, within its scope. `platforms`/`checks` None: all."""

    id: str
    label: str
    public_key: bytes
    platforms: frozenset[str] | None = None
    checks: frozenset[str] | None = None
    local: bool = False  # this machine's own key, trusted by a local report only

    def covers(self, platform: str, check: str) -> bool:
        return (self.platforms is None or platform in self.platforms) and (
            self.checks is None or check in self.checks
        )

    def scope_text(self) -> str:
        platforms = "every platform" if self.platforms is None else ", ".join(sorted(self.platforms))
        checks = "every check" if self.checks is None else ", ".join(sorted(self.checks))
        return f"{checks} on {platforms}"


@dataclass(frozen=True, kw_only=True)
class TrustPolicy:
    """The keys of matrix.yaml's `trust` section, in file order."""

    keys: tuple[TrustedKey, ...] = ()

    def key(self, kid: str) -> TrustedKey | None:
        return next((k for k in self.keys if k.id == kid), None)

    def with_local(self, public_key: bytes) -> TrustPolicy:
        """The policy plus this machine's key for everything (a local report). A key the
        policy already names keeps its label and scope."""
        kid = key_id(public_key)
        if self.key(kid) is not None:
            return self
        mine = TrustedKey(id=kid, label=THIS_MACHINE, public_key=public_key, local=True)
        return TrustPolicy(keys=(*self.keys, mine))

    def public_keys(self) -> dict[str, bytes]:
        return {k.id: k.public_key for k in self.keys}


@dataclass(frozen=True, kw_only=True)
class SignatureCheck:
    """What the reader found of a record's envelope: the key ids it names, the ids whose
    signature verified over the exact payload, and, when none did, why."""

    keyids: tuple[str, ...] = ()
    verified: tuple[str, ...] = ()
    problem: str = ""


@dataclass(frozen=True, kw_only=True)
class Signer:
    """Who vouches for a record the report counts."""

    key_id: str
    label: str
    local: bool

    @property
    def text(self) -> str:
        return f"{self.key_id} ({self.label})"


def judge_signature(
    check: SignatureCheck | None, policy: TrustPolicy, platform: str, check_id: str
) -> tuple[Signer | None, str]:
    """The signer the policy trusts for this cell's platform and check, or None and why not."""
    if check is None:
        return None, "not signed: the file is a bare record, not a signed envelope"
    if not check.verified:
        return None, check.problem or "no signature verified"
    for kid in check.verified:
        key = policy.key(kid)
        if key is not None and key.covers(platform, check_id):
            return Signer(key_id=key.id, label=key.label, local=key.local), ""
    kid = check.verified[0]
    key = policy.key(kid)
    if key is None:
        return None, f"signed by key {kid}, which the trust policy does not name"
    return None, (
        f"signed by key {kid} ({key.label}), which the trust policy trusts for {key.scope_text()} only, "
        f"not {check_id} on {platform}"
    )
