"""Evidence records: one per (cell, check) run, the only input the report trusts.

The model and its invariants; the JSON form, the schema check and the files live in
eliza.formats.evidence_json. The record's shape is described by
`eliza/schema/evidence.schema.json` and documented in `docs/evidence.md`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from eliza.core.trust import SignatureCheck

SCHEMA_VERSION = 2
# Records of schema 1 were bare JSON, bound to nothing and signed by no one.
UNSIGNED_SCHEMA_VERSION = 1

# Producers and readers must agree on this name pattern; `read_records` only picks up
# files that look like records so that a report written next to evidence is not misread.
RECORD_SUFFIX = ".json"
NAME_SEPARATOR = "__"
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._+-]")
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")

JsonValue = Any
MetricValue = float | int | str


class EvidenceError(ValueError):
    """A record that cannot be trusted; the message names the source and the field."""

    def __init__(self, source: str, field_path: str, problem: str) -> None:
        self.source = source
        self.field = field_path
        self.problem = problem
        where = f"field {field_path!r}" if field_path else "top level"
        super().__init__(f"{source}: {where}: {problem}")


def _bad(field_path: str, problem: str) -> EvidenceError:
    # Model invariants do not know which file they came from; `record_from_dict` re-raises
    # them with the source filled in.
    return EvidenceError("<record>", field_path, problem)


class Status(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"  # the check could not run to a verdict (tool crashed, setup failed)
    SKIPPED = "skipped"  # deliberately not run; `reason` says why
    INCONCLUSIVE = "inconclusive"  # ran, and the samples could not decide (perf); `reason` says what would


@dataclass(frozen=True, kw_only=True)
class Counts:
    """How much a check executed. A run with `ran == 0` is never a pass, whatever its status."""

    ran: int
    passed: int
    failed: int

    def __post_init__(self) -> None:
        for name in ("ran", "passed", "failed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _bad(f"counts.{name}", f"must be an integer >= 0, got {value!r}")
        if self.passed + self.failed > self.ran:
            raise _bad("counts", f"passed ({self.passed}) + failed ({self.failed}) exceeds ran ({self.ran})")


def fingerprint_key(parts: Mapping[str, str]) -> str:
    """sha256 (hex) of the parts as sorted ``name=value`` lines, each ending in ``\\n``, UTF-8.

    Spelled out so that any producer (a shell step in CI included) can compute the same key.
    """
    lines = []
    for name in sorted(parts):
        value = parts[name]
        if not name or "=" in name or "\n" in name:
            raise ValueError(f"fingerprint part name {name!r} must be non-empty, without '=' or newline")
        if "\n" in value:
            raise ValueError(f"fingerprint part {name!r} has a newline in its value")
        lines.append(f"{name}={value}\n")
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


@dataclass(frozen=True, kw_only=True)
class InputFingerprint:
    """Content hashes of everything a check depends on; `key` is derived from `parts`.

    The commit is deliberately not a part: evidence from another commit with the same
    inputs is still fresh.
    """

    key: str
    parts: Mapping[str, str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", MappingProxyType(dict(self.parts)))
        if not self.parts:
            raise _bad("fingerprint.parts", "must name at least one input")
        for name, value in self.parts.items():
            if not isinstance(value, str):
                raise _bad(f"fingerprint.parts.{name}", f"must be a string, got {value!r}")
        try:
            expected = fingerprint_key(self.parts)
        except ValueError as exc:
            raise _bad("fingerprint.parts", str(exc)) from None
        if self.key != expected:
            # A key that does not follow from its parts would make freshness unfalsifiable.
            raise _bad("fingerprint.key", f"{self.key!r} is not the key of the parts ({expected!r})")

    @classmethod
    def of(cls, parts: Mapping[str, str]) -> InputFingerprint:
        return cls(key=fingerprint_key(parts), parts=parts)

    def differing_parts(self, other: InputFingerprint) -> tuple[str, ...]:
        """Names whose value differs, or that only one side has, sorted."""
        names = set(self.parts) | set(other.parts)
        return tuple(sorted(n for n in names if self.parts.get(n) != other.parts.get(n)))


@dataclass(frozen=True, kw_only=True)
class HostInfo:
    os: str
    cpu: str
    gpu: str = ""  # "" when the host has none
    compiler: str = ""
    cuda: str = ""  # toolkit version, "" when absent
    tools: Mapping[str, str] = field(default_factory=dict)  # tool name -> version

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", MappingProxyType(dict(self.tools)))


@dataclass(frozen=True, kw_only=True)
class Artifact:
    path: str  # as the producer wrote it; the report resolves it
    sha256: str

    def __post_init__(self) -> None:
        if not _SHA256_HEX.match(self.sha256):
            raise _bad("artifacts.sha256", f"{self.sha256!r} is not 64 lowercase hex digits")


class SubjectRole(StrEnum):
    """What a subject of a record is: the files a check judged, by path and sha256."""

    INPUTS = "inputs"  # the input fingerprint itself (its key is a sha256 of the parts)
    LIBRARY = "library"  # a cell's built library (annotated with the cell)
    TOOL = "tool"  # a program the check ran
    TEST_KIT = "test-kit"  # the test-kit library the suite loaded
    BUNDLE = "bundle"  # a file of the model bundle
    PROMPTS = "prompts"  # the prompt file


@dataclass(frozen=True, kw_only=True)
class Subject:
    """One artifact a record judged (an in-toto subject): the record counts only while it
    still names the artifacts of the cell's current build."""

    name: str  # the path, relative to the repository when inside it
    sha256: str
    role: SubjectRole
    cell: str = ""  # for a library: whose

    def __post_init__(self) -> None:
        if not _SHA256_HEX.match(self.sha256):
            raise _bad("subject.digest.sha256", f"{self.sha256!r} is not 64 lowercase hex digits")
        try:
            object.__setattr__(self, "role", SubjectRole(self.role))
        except ValueError:
            roles = [r.value for r in SubjectRole]
            raise _bad("subject.annotations.role", f"{self.role!r} is not one of {roles}") from None


def utc_timestamp(moment: datetime) -> str:
    """ISO 8601 in UTC with a ``Z`` suffix, millisecond precision."""
    if moment.tzinfo is None:
        raise ValueError("timestamp needs a timezone; naive datetimes are ambiguous across hosts")
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_utc(text: str, field_path: str = "timestamp") -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise _bad(field_path, f"{text!r} is not an ISO 8601 timestamp") from None
    if moment.utcoffset() != timedelta(0):
        raise _bad(field_path, f"{text!r} must be in UTC (Z or +00:00)")
    return moment


@dataclass(frozen=True, kw_only=True)
class EvidenceRecord:
    schema_version: int = SCHEMA_VERSION
    cell: str  # cell id, e.g. "linux-cpu.litert+mlx"
    check: str  # check id, e.g. "byte-identity-gates"
    status: Status
    reason: str = ""  # why it failed, errored or was skipped
    counts: Counts
    fingerprint: InputFingerprint
    commit: str  # provenance only; freshness is the fingerprint
    dirty: bool
    host: HostInfo
    artifacts: tuple[Artifact, ...] = ()
    started_at: str
    finished_at: str
    duration_s: float
    metrics: Mapping[str, MetricValue] = field(default_factory=dict)
    details: Mapping[str, JsonValue] = field(default_factory=dict)
    log_tail: str = ""
    subjects: tuple[Subject, ...] = ()  # the in-toto subjects: what the check judged

    def __post_init__(self) -> None:
        object.__setattr__(self, "subjects", tuple(self.subjects))
        if self.schema_version != SCHEMA_VERSION:
            raise _bad(
                "schema_version",
                f"version {self.schema_version!r} is not supported (this reader expects {SCHEMA_VERSION})",
            )
        for name in ("cell", "check"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or value != value.strip():
                raise _bad(name, f"must be a non-empty id without surrounding space, got {value!r}")
        try:
            object.__setattr__(self, "status", Status(self.status))
        except ValueError:
            raise _bad("status", f"{self.status!r} is not one of {[s.value for s in Status]}") from None
        object.__setattr__(self, "artifacts", tuple(self.artifacts))
        object.__setattr__(self, "metrics", MappingProxyType(dict(self.metrics)))
        object.__setattr__(self, "details", MappingProxyType(dict(self.details)))
        for name, value in self.metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise _bad(f"metrics.{name}", f"must be a number or string, got {value!r}")
            if isinstance(value, float) and not math.isfinite(value):
                raise _bad(f"metrics.{name}", f"must be finite, got {value!r}")
        try:
            json.dumps(dict(self.details), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise _bad("details", f"must be JSON-serialisable: {exc}") from None
        if (
            isinstance(self.duration_s, bool)
            or not isinstance(self.duration_s, int | float)
            or not (math.isfinite(self.duration_s) and self.duration_s >= 0)
        ):
            raise _bad("duration_s", f"must be a finite number >= 0, got {self.duration_s!r}")
        started = parse_utc(self.started_at, "started_at")
        finished = parse_utc(self.finished_at, "finished_at")
        if finished < started:
            raise _bad("finished_at", f"{self.finished_at!r} is before started_at")

    @property
    def finished(self) -> datetime:
        return parse_utc(self.finished_at, "finished_at")

    def library(self, cell: str) -> Subject | None:
        """The library of `cell` this record names as a subject, if any."""
        return next((s for s in self.subjects if s.role is SubjectRole.LIBRARY and s.cell == cell), None)


def record_filename(cell: str, check: str) -> str:
    """``<cell>__<check>.json`` with anything outside ``[A-Za-z0-9._+-]`` replaced by ``_``."""

    def safe(text: str) -> str:
        cleaned = _UNSAFE_NAME_CHARS.sub("_", text).lstrip(".")
        return cleaned or "_"

    return f"{safe(cell)}{NAME_SEPARATOR}{safe(check)}{RECORD_SUFFIX}"


@dataclass(frozen=True, kw_only=True)
class LoadedRecord:
    """One file found by `read_records`: either a record, or the problem that kept it out.

    `cell` / `check` are filled from the file when it is readable enough to say, so that
    the report can attach a malformed file to its grid entry.
    """

    path: Path
    record: EvidenceRecord | None = None
    problem: str | None = None
    cell: str | None = None
    check: str | None = None
    # The envelope's signatures as the reader checked them; None: not an envelope at all.
    signature: SignatureCheck | None = None
    # The problem is one of trust (unsigned, an old schema, a payload type not ours): the
    # report shows UNTRUSTED rather than INVALID.
    untrusted: bool = False
    raw: bytes = field(default=b"", repr=False)  # the file's bytes, for import-evidence to copy as they are

    @property
    def ok(self) -> bool:
        return self.record is not None
