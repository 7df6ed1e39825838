"""Signed evidence for tests: a fixed test key, a trust policy that trusts it, and helpers
that sign hand-written records the way verify does, so tests judge real envelopes rather
than a judge that trusts everything.

- `TEST_KEY` / `TEST_POLICY`: for tests that call `build_report` with their own matrix.
- `signed(loaded)`: a `LoadedRecord` as `read_records` returns it for a file TEST_KEY signed.
- `write_signed(dir, record)`: the record as verify writes it, signed by this environment's
  key (the one a `nox -s report` started here trusts as "this machine").
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from eliza.adapters.signing_keys import machine_key
from eliza.core.evidence import EvidenceRecord, LoadedRecord, Subject, SubjectRole
from eliza.core.layout import cache_dir
from eliza.core.trust import SignatureCheck, TrustedKey, TrustPolicy
from eliza.formats.attestation import SigningKey
from eliza.formats.evidence_json import write_record

# A fixed key, derived from its name: never a secret, and never this machine's.
TEST_KEY = SigningKey.from_text(
    base64.b64encode(hashlib.sha256(b"eliza evidence test key").digest()).decode()
)
TEST_POLICY = TrustPolicy(
    keys=(TrustedKey(id=TEST_KEY.id, label="test key", public_key=TEST_KEY.public_raw),)
)
TEST_SIGNATURE = SignatureCheck(keyids=(TEST_KEY.id,), verified=(TEST_KEY.id,))


def signed(loaded: LoadedRecord) -> LoadedRecord:
    """As read from a file TEST_KEY signed."""
    return replace(loaded, signature=TEST_SIGNATURE)


def local_key() -> SigningKey:
    """This environment's signing key: what verify signs with and a local report trusts."""
    return machine_key(cache_dir(os.environ, Path.home()), os.environ)


def write_signed(directory: Path, record: EvidenceRecord, key: SigningKey | None = None) -> Path:
    return write_record(directory, record, key or local_key())


def library_subject(cell: str, sha256: str | None = None) -> Subject:
    """The library subject a record of `cell` names (by default, one sha256 per cell: the
    same in the cell's build record and in the records of the checks that ran it)."""
    digest = sha256 or hashlib.sha256(f"library of {cell}".encode()).hexdigest()
    return Subject(
        name=f"build/{cell}/libelizainference.so", sha256=digest, role=SubjectRole.LIBRARY, cell=cell
    )


def predicate(path: Path) -> dict[str, Any]:
    """The record a signed evidence file holds (its Statement's predicate), as JSON data."""
    envelope = json.loads(path.read_text(encoding="utf-8"))
    statement: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    record: dict[str, Any] = statement["predicate"]
    return record
