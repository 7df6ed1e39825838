"""What the report is made of: its inputs (host capabilities, header facts, how to read
current fingerprints and artifacts) and the frozen values the renderers show."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from eliza.core.evidence import (
    Artifact,
    Counts,
    HostInfo,
    InputFingerprint,
    Status,
    Subject,
)
from eliza.core.host import Capability
from eliza.core.matrix import Cell, Check, CheckKind, DeviceGatedItem
from eliza.core.report.compare import Since
from eliza.core.report.states import GridState
from eliza.core.trust import Signer

REPORT_SCHEMA_VERSION = 1
WAIVED_PREFIX = "VERIFIED (waived: "  # the reason of a perf entry a waiver turns VERIFIED


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True, kw_only=True)
class PlatformCapability:
    """What the host probe decided for one platform, with the reasons shown to readers."""

    can_build: bool
    build_reason: str
    can_run: bool
    run_reason: str
    # The CPU fallback (device_free checks); as can_run for a platform without one.
    can_run_fallback: bool = False
    fallback_reason: str = ""
    # check id -> what this host lacks to run it (a consumer's runtime)
    check_blockers: Mapping[str, str] = field(default_factory=dict)

    def can_run_check(self, check: Check) -> bool:
        return self.can_run or (check.device_free and self.can_run_fallback)

    @classmethod
    def of(cls, can: Capability, check_blockers: Mapping[str, str] | None = None) -> PlatformCapability:
        """What the host probe decided (eliza.core.host.decide), as the report judges by."""
        return cls(
            can_build=can.can_build,
            build_reason=can.build_reason,
            can_run=can.can_run,
            run_reason=can.run_reason,
            can_run_fallback=can.can_run_fallback,
            fallback_reason=can.fallback_reason,
            check_blockers=dict(check_blockers or {}),
        )


UNPROBED = PlatformCapability(
    can_build=False,
    build_reason="host capability was not probed for this platform",
    can_run=False,
    run_reason="host capability was not probed for this platform",
)


@dataclass(frozen=True, kw_only=True)
class HeaderFacts:
    commit: str
    dirty: bool
    generated_at: str  # ISO 8601 UTC
    host: str  # where the report was generated, in words


# The current fingerprint of a (cell, check): the full fingerprint (lets the report say
# which parts changed), just its key, or None when it cannot be computed here.
CurrentFingerprint = InputFingerprint | str | None
FingerprintSource = (
    Callable[[Cell, Check], CurrentFingerprint] | Mapping[tuple[str, str], InputFingerprint | str]
)
# True: the file here hashes as recorded; False: it does not; None: not present here.
ArtifactVerifier = Callable[[Artifact], bool | None]


# --------------------------------------------------------------------------- model


class ArtifactState(StrEnum):
    MATCH = "match"
    MISMATCH = "mismatch"
    ABSENT = "absent"  # not on this host, so not verified either way


@dataclass(frozen=True, kw_only=True)
class ArtifactResult:
    path: str
    sha256: str
    state: ArtifactState


@dataclass(frozen=True, kw_only=True)
class Fact:
    name: str
    value: str
    multiline: bool


@dataclass(frozen=True, kw_only=True)
class EvidenceView:
    """The chosen record of a grid entry, flattened for display."""

    path: str
    status: Status
    reason: str
    counts: Counts
    commit: str
    dirty: bool
    host: HostInfo
    started_at: str
    finished_at: str
    duration_s: float
    fingerprint_key: str
    fresh: bool
    differing_parts: tuple[str, ...]
    artifacts: tuple[ArtifactResult, ...]
    metrics: tuple[Fact, ...]
    highlights: tuple[Fact, ...]  # well-known details of the check kind (first divergence, ABI diff)
    details: tuple[Fact, ...]  # every other details entry
    log_tail: str
    signer: Signer | None = None  # the trusted key that vouches for it; None: none does
    subjects: tuple[Subject, ...] = ()  # what it judged (the in-toto subjects)


@dataclass(frozen=True, kw_only=True)
class Superseded:
    path: str
    status: Status
    finished_at: str
    fresh: bool


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One cell and check of the grid."""

    cell: str
    check: str
    kind: CheckKind
    state: GridState
    reason: str
    anchor: str
    evidence: EvidenceView | None = None
    superseded: tuple[Superseded, ...] = ()
    gated_by: tuple[DeviceGatedItem, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ran_on(self) -> str:
        """How the evidence's run went: "native", or the fallback it used (details.ran_on)."""
        if self.evidence is None:
            return "native"
        fact = next((f for f in self.evidence.details if f.name == "ran_on"), None)
        return fact.value if fact is not None else "native"

    @property
    def signer(self) -> Signer | None:
        return self.evidence.signer if self.evidence is not None else None

    @property
    def qualifier(self) -> str:
        """Words the grid adds to the state: "CPU fallback" for a run without the accelerator,
        "waived" for a perf regression a waiver accepts."""
        if self.state is GridState.VERIFIED and self.reason.startswith(WAIVED_PREFIX):
            return "waived"
        return "CPU fallback" if self.ran_on.startswith("CPU fallback") else ""


@dataclass(frozen=True, kw_only=True)
class Row:
    cell: str
    platform: str
    platform_description: str
    gate_key: str
    anchor: str
    entries: tuple[Entry, ...]  # one per column, in column order


@dataclass(frozen=True, kw_only=True)
class EntryRef:
    cell: str
    check: str
    state: GridState
    anchor: str


@dataclass(frozen=True, kw_only=True)
class ChecklistBox:
    number: int
    text: str  # the box as the seam doc words it (backticks mark code)
    needs: str  # which evidence ticks it, in words
    ticked: bool  # every check VERIFIED on every cell of the scope
    ticked_here: bool  # not ticked, and nothing is missing but what waits for a device
    evidence: tuple[EntryRef, ...]
    missing: tuple[str, ...]  # short of VERIFIED for reasons a run here could change
    waits: tuple[str, ...] = ()  # short of VERIFIED for want of hardware: which part, which device
    notes: tuple[str, ...] = ()  # e.g. the baseline commit the identity was checked against


@dataclass(frozen=True, kw_only=True)
class VerifiableRow:
    """A row of the "verifiable here" table, judged from the grid like a checklist box."""

    item: str
    how: str
    checks: tuple[str, ...]
    scope: str  # the cells, in words
    bundles: tuple[str, ...]  # the bundles its checks' evidence comes from
    verified: bool
    verified_here: bool  # everything but what waits for a device is VERIFIED
    counts: str  # "7 of 8 entries VERIFIED"
    evidence: tuple[EntryRef, ...]
    missing: tuple[str, ...]
    waits: tuple[str, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class DeviceGatedRow:
    id: str
    title: str
    needs: str
    milestone: str
    evidence: str  # what would count as evidence
    platforms: tuple[str, ...]
    cells: tuple[str, ...]  # grid entries ("cell · check") shown as DEVICE-GATED by it
    checks: tuple[str, ...] = ()  # checks whose evidence claims it
    metrics: tuple[str, ...] = ()  # metrics that evidence must carry
    claimed: bool = False  # VERIFIED evidence of its checks on all its platforms' cells, with the metrics
    claim_evidence: tuple[EntryRef, ...] = ()
    missing: tuple[str, ...] = ()  # why it is not claimed


@dataclass(frozen=True, kw_only=True)
class Figure:
    """A measured number of the evidence, with when it was measured."""

    cell: str
    check: str
    name: str
    value: str
    measured_at: str  # finished_at of the record
    fresh: bool  # the record's inputs are the current ones
    anchor: str


@dataclass(frozen=True, kw_only=True)
class PerfRow:
    """One metric of one cell's perf evidence."""

    cell: str
    platform: str
    check: str
    metric: str
    direction: str  # "higher" | "lower": which way is better
    ratio: float  # median candidate / median reference
    ci_low: float
    ci_high: float
    p_value: float
    bound: float
    threshold: float  # 1 - bound or 1 + bound
    verdict: str  # the metric's own verdict: verified | failed | inconclusive
    candidate: float  # the candidate's median
    reference: float  # the reference's median
    rounds: int
    against: str  # what the reference was, in words
    ran_on: str  # how it ran ("native", ...) and where (the record's host)
    measured_at: str
    state: GridState  # the entry's state (waivers applied)
    anchor: str
    instrument: str = "wall time"  # what measured it: "simulated CPU", "wall time" or "memory"
    exact: bool = False  # one count per side (the simulated CPU): no interval, no p
    decided_by: str = ""  # the entry's: which instrument decided, in words


@dataclass(frozen=True, kw_only=True)
class LoadProblem:
    path: str
    message: str


@dataclass(frozen=True, kw_only=True)
class StateCount:
    state: GridState
    count: int


@dataclass(frozen=True, kw_only=True)
class ShipView:
    """What a release of the cell would do now: the release's own verdict on it
    (eliza.core.release.judge_cell), as the report shows it."""

    cell: str
    verdict: str  # "ship" | "refused" | "not here"
    line: str  # the release's line on it
    reasons: tuple[str, ...] = ()  # why it is refused or not here, one line each

    @property
    def label(self) -> str:
        return {"ship": "ships", "refused": "refused", "not here": "not here"}.get(self.verdict, self.verdict)


@dataclass(frozen=True, kw_only=True)
class ReportHeader:
    commit: str
    dirty: bool
    generated_at: str
    host: str
    matrix_source: str
    matrix_sha256: str
    verified: int
    declared: int  # applicable (cell, check) entries
    by_state: tuple[StateCount, ...]
    trust: str = ""  # which keys the report trusted, in words


@dataclass(frozen=True, kw_only=True)
class Report:
    header: ReportHeader
    legend: tuple[GridState, ...]
    columns: tuple[Check, ...]  # the matrix's checks, in matrix order
    rows: tuple[Row, ...]
    checklist_milestone: str  # "" when the matrix declares no exit checklist
    checklist: tuple[ChecklistBox, ...]
    device_gated: tuple[DeviceGatedRow, ...]
    verifiable_here: tuple[VerifiableRow, ...]
    figures: tuple[Figure, ...]
    problems: tuple[LoadProblem, ...]
    perf: tuple[PerfRow, ...] = ()  # one row per (cell, metric) of the perf evidence
    since: Since | None = None  # --compare OLD: what changed since an older report
    # Per cell a release considers (the default build variant): what it would do now.
    would_ship: tuple[ShipView, ...] = ()

    def ship_view(self, cell: str) -> ShipView | None:
        return next((v for v in self.would_ship if v.cell == cell), None)

    def perf_decisions(self, rows: Sequence[PerfRow]) -> list[tuple[PerfRow, str]]:
        """One (first row, which instrument decided) per perf entry among `rows`, in order."""
        seen: dict[tuple[str, str], tuple[PerfRow, str]] = {}
        for r in rows:
            seen.setdefault((r.cell, r.check), (r, r.decided_by))
        return list(seen.values())

    def perf_platforms(self) -> list[tuple[str, list[PerfRow]]]:
        """The perf rows grouped by platform, in row order."""
        groups: dict[str, list[PerfRow]] = {}
        for row in self.perf:
            groups.setdefault(row.platform, []).append(row)
        return list(groups.items())

    def entry(self, cell: str, check: str) -> Entry:
        for row in self.rows:
            if row.cell == cell:
                for entry in row.entries:
                    if entry.check == check:
                        return entry
        raise KeyError((cell, check))

    def entries(self) -> Iterable[Entry]:
        for row in self.rows:
            yield from row.entries


# --------------------------------------------------------------------------- anchors


def _anchor_part(text: str) -> str:
    # Injective, so two ids never share an anchor; keeps anchors valid in URLs and CSS.
    return re.sub(r"[^A-Za-z0-9.-]", lambda m: f"_{ord(m.group()):02x}", text)


def cell_anchor(cell: str) -> str:
    return f"cell-{_anchor_part(cell)}"


def entry_anchor(cell: str, check: str) -> str:
    return f"ev-{_anchor_part(cell)}--{_anchor_part(check)}"
