"""One runner per check kind. A runner takes a Job (its steps, the libraries they need, how
the platform's binaries run here) and returns outcomes; the executor records them. Adding
a kind: its matrix entry, its runner file here, and its line in RUNNERS."""

from __future__ import annotations

from collections.abc import Mapping

from eliza.app.checks import (
    abi,
    backend_agreement,
    build,
    byte_identity,
    consumer,
    gate_fallthrough,
    native_suite,
    perf,
    selector,
)
from eliza.app.checks.job import CheckRunner
from eliza.core.matrix import CheckKind
from eliza.core.verify_plan import IDENTITY_KINDS

RUNNERS: Mapping[CheckKind, CheckRunner] = {
    CheckKind.BUILD: build.run,
    CheckKind.ABI: abi.run,
    CheckKind.SELECTOR: selector.run,
    CheckKind.GATE_FALLTHROUGH: gate_fallthrough.run,
    CheckKind.NATIVE_SUITE: native_suite.run,
    CheckKind.CONSUMER: consumer.run,
    CheckKind.PERF: perf.run,
    CheckKind.BACKEND_AGREEMENT: backend_agreement.run,
    **dict.fromkeys(IDENTITY_KINDS, byte_identity.run),
}
