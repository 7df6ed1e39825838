"""The verifiability report as a pure evaluation of evidence against the matrix.

Nothing here reads files, the environment or the clock: the caller supplies the matrix,
the loaded evidence, the current fingerprint of every (cell, check), what this host can
build and run, a way to check artifact hashes, and the header facts. The result is a
frozen `Report` that the renderers (eliza.formats.report_render) turn into HTML,
Markdown and JSON.

The report claims nothing without evidence: a grid entry is VERIFIED only from a record
that passed, ran something, passed everything it ran, is fresh for the current inputs,
and whose artifacts present here still hash as recorded.
"""

from eliza.core.report.assemble import build_report
from eliza.core.report.judge import DEVICE_REQUIREMENTS, applies, check_artifacts, judge_record
from eliza.core.report.model import (
    REPORT_SCHEMA_VERSION,
    UNPROBED,
    ArtifactResult,
    ArtifactState,
    ArtifactVerifier,
    ChecklistBox,
    CurrentFingerprint,
    DeviceGatedRow,
    Entry,
    EntryRef,
    EvidenceView,
    Fact,
    FingerprintSource,
    HeaderFacts,
    LoadProblem,
    PlatformCapability,
    Report,
    ReportHeader,
    Row,
    StateCount,
    Superseded,
    cell_anchor,
    entry_anchor,
)
from eliza.core.report.states import GridState

__all__ = [
    "DEVICE_REQUIREMENTS",
    "REPORT_SCHEMA_VERSION",
    "UNPROBED",
    "ArtifactResult",
    "ArtifactState",
    "ArtifactVerifier",
    "ChecklistBox",
    "CurrentFingerprint",
    "DeviceGatedRow",
    "Entry",
    "EntryRef",
    "EvidenceView",
    "Fact",
    "FingerprintSource",
    "GridState",
    "HeaderFacts",
    "LoadProblem",
    "PlatformCapability",
    "Report",
    "ReportHeader",
    "Row",
    "StateCount",
    "Superseded",
    "applies",
    "build_report",
    "cell_anchor",
    "check_artifacts",
    "entry_anchor",
    "judge_record",
]
