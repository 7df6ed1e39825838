"""The states a grid entry can be in, with the words the report shows for each."""

from __future__ import annotations

import re
from enum import StrEnum


class GridState(StrEnum):
    VERIFIED = "verified"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"
    STALE = "stale"
    NOT_RUN = "not-run"
    NOT_BUILDABLE_HERE = "not-buildable-here"
    NOT_RUNNABLE_HERE = "not-runnable-here"
    DEVICE_GATED = "device-gated"
    INVALID = "invalid"
    UNTRUSTED = "untrusted"
    NOT_APPLICABLE = "n/a"

    @property
    def label(self) -> str:
        return _STATE_TEXT[self][0]

    @property
    def short(self) -> str:
        """A word or two for narrow places (Markdown table cells)."""
        return _STATE_TEXT[self][1]

    @property
    def meaning(self) -> str:
        return _STATE_TEXT[self][2]

    @property
    def css(self) -> str:
        return "st-" + re.sub(r"[^a-z-]", "", self.value)


_STATE_TEXT: dict[GridState, tuple[str, str, str]] = {
    GridState.VERIFIED: (
        "VERIFIED",
        "verified",
        "fresh passing evidence signed by a trusted key: ran > 0, all passed, inputs unchanged, "
        "run against the library of the cell's verified build",
    ),
    GridState.FAILED: ("FAILED", "FAILED", "fresh evidence of a failure or an error"),
    GridState.INCONCLUSIVE: (
        "INCONCLUSIVE",
        "inconclusive",
        "fresh evidence whose measurements could not decide: too few or too noisy rounds; never VERIFIED",
    ),
    GridState.STALE: ("STALE", "stale", "evidence exists but the inputs changed since; re-run"),
    GridState.NOT_RUN: ("NOT RUN", "not run", "no usable evidence: never ran, skipped, or ran nothing"),
    GridState.NOT_BUILDABLE_HERE: (
        "NOT BUILDABLE HERE",
        "no build here",
        "this host lacks a toolchain the platform needs to build",
    ),
    GridState.NOT_RUNNABLE_HERE: (
        "NOT RUNNABLE HERE",
        "no run here",
        "builds here, but running it needs hardware this host lacks",
    ),
    GridState.DEVICE_GATED: (
        "DEVICE-GATED",
        "device-gated",
        "needs a device; scoped to a later milestone, not claimed",
    ),
    GridState.INVALID: (
        "INVALID",
        "INVALID",
        "evidence is malformed, self-contradictory, or its artifacts no longer match",
    ),
    GridState.UNTRUSTED: (
        "UNTRUSTED",
        "UNTRUSTED",
        "no trusted key vouches for the evidence: unsigned, a bad signature, a signer the trust "
        "policy does not trust for this cell and check, or not this project's evidence",
    ),
    GridState.NOT_APPLICABLE: ("n/a", "n/a", "the check does not apply to this cell"),
}
