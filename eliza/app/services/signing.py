"""This machine's signing key and the trust a report reads evidence with: the policy of
matrix.yaml, plus (for a local report) this machine's own key."""

from __future__ import annotations

from eliza.adapters.signing_keys import machine_key
from eliza.app.project import Project
from eliza.core.matrix import Matrix
from eliza.core.trust import TrustPolicy
from eliza.formats.attestation import SigningKey


def signing_key(project: Project) -> SigningKey:
    return machine_key(project.cache, project.env)


def report_trust(matrix: Matrix, project: Project, *, release: bool) -> TrustPolicy:
    """--release: only the policy's keys. Otherwise this machine's key is trusted too, for
    every check (the report's header says so)."""
    if release:
        return matrix.trust
    return matrix.trust.with_local(signing_key(project).public_raw)
