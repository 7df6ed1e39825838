"""Evidence records: one JSON file per (cell, check) run, the only input the report trusts.

The model is pure; the I/O edge is small: `write_record` (atomic) and `read_records`
(never raises for a bad file — it reports it). The record's shape is described by
`eliza/schema/evidence.schema.json` and documented in `docs/evidence.md`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jsonschema

SCHEMA_VERSION = 1

SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "evidence.schema.json"

# Producers and readers must agree on this name pattern; `read_records` only picks up
# files that look like records so that a report written next to evidence is not misread.
RECORD_SUFFIX = ".json"
_NAME_SEPARATOR = "__"
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


def utc_timestamp(moment: datetime | None = None) -> str:
    """ISO 8601 in UTC with a ``Z`` suffix, millisecond precision."""
    moment = datetime.now(UTC) if moment is None else moment
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

    def __post_init__(self) -> None:
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


# --------------------------------------------------------------------------- JSON form


def record_to_dict(record: EvidenceRecord) -> dict[str, JsonValue]:
    return {
        "schema_version": record.schema_version,
        "cell": record.cell,
        "check": record.check,
        "status": record.status.value,
        "reason": record.reason,
        "counts": {"ran": record.counts.ran, "passed": record.counts.passed, "failed": record.counts.failed},
        "fingerprint": {
            "key": record.fingerprint.key,
            "parts": dict(sorted(record.fingerprint.parts.items())),
        },
        "commit": record.commit,
        "dirty": record.dirty,
        "host": {
            "os": record.host.os,
            "cpu": record.host.cpu,
            "gpu": record.host.gpu,
            "compiler": record.host.compiler,
            "cuda": record.host.cuda,
            "tools": dict(sorted(record.host.tools.items())),
        },
        "artifacts": [{"path": a.path, "sha256": a.sha256} for a in record.artifacts],
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "duration_s": record.duration_s,
        "metrics": dict(sorted(record.metrics.items())),
        "details": dict(record.details),
        "log_tail": record.log_tail,
    }


def to_json(record: EvidenceRecord) -> str:
    return json.dumps(record_to_dict(record), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


@cache
def _schema_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator_cls = jsonschema.validators.validator_for(schema)
    validator_cls.check_schema(schema)
    validator: jsonschema.protocols.Validator = validator_cls(schema)
    return validator


def _field_path(path: Iterable[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _first_schema_error(data: JsonValue, source: str) -> EvidenceError | None:
    errors = sorted(
        _schema_validator().iter_errors(data),
        key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path], e.message),
    )
    if not errors:
        return None
    error = errors[0]
    path = _field_path(error.absolute_path)
    problem = error.message
    if error.validator == "required" and isinstance(error.instance, dict):
        required: list[str] = list(error.validator_value)  # type: ignore[arg-type]
        missing = [name for name in required if name not in error.instance]
        if missing:
            path = f"{path}.{missing[0]}" if path else missing[0]
            problem = "required field is missing"
    if len(errors) > 1:
        problem += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return EvidenceError(source, path, problem)


def record_from_dict(data: JsonValue, source: str = "<record>") -> EvidenceRecord:
    if not isinstance(data, dict):
        raise EvidenceError(source, "", f"expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    # Checked before the schema so an old or newer file says so, instead of failing on
    # whichever field happened to change.
    if "schema_version" in data and version != SCHEMA_VERSION:
        raise EvidenceError(
            source,
            "schema_version",
            f"version {version!r} is not supported by this reader (expects {SCHEMA_VERSION}); "
            "re-run the check to produce current evidence",
        )
    schema_error = _first_schema_error(data, source)
    if schema_error is not None:
        raise schema_error
    try:
        counts = data["counts"]
        fp = data["fingerprint"]
        host = data["host"]
        return EvidenceRecord(
            schema_version=data["schema_version"],
            cell=data["cell"],
            check=data["check"],
            status=Status(data["status"]),
            reason=data.get("reason", ""),
            counts=Counts(ran=counts["ran"], passed=counts["passed"], failed=counts["failed"]),
            fingerprint=InputFingerprint(key=fp["key"], parts=fp["parts"]),
            commit=data["commit"],
            dirty=data["dirty"],
            host=HostInfo(
                os=host["os"],
                cpu=host["cpu"],
                gpu=host["gpu"],
                compiler=host["compiler"],
                cuda=host["cuda"],
                tools=host["tools"],
            ),
            artifacts=tuple(Artifact(path=a["path"], sha256=a["sha256"]) for a in data.get("artifacts", [])),
            started_at=data["started_at"],
            finished_at=data["finished_at"],
            duration_s=data["duration_s"],
            metrics=data.get("metrics", {}),
            details=data.get("details", {}),
            log_tail=data.get("log_tail", ""),
        )
    except EvidenceError as exc:
        # Model invariants are raised without knowing the file; attach it here.
        raise EvidenceError(source, exc.field, exc.problem) from None


def from_json(text: str, source: str = "<string>") -> EvidenceRecord:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvidenceError(source, "", _json_problem(exc)) from None
    return record_from_dict(data, source)


def _json_problem(exc: json.JSONDecodeError) -> str:
    return f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"


# --------------------------------------------------------------------------- files


def record_filename(cell: str, check: str) -> str:
    """``<cell>__<check>.json`` with anything outside ``[A-Za-z0-9._+-]`` replaced by ``_``."""

    def safe(text: str) -> str:
        cleaned = _UNSAFE_NAME_CHARS.sub("_", text).lstrip(".")
        return cleaned or "_"

    return f"{safe(cell)}{_NAME_SEPARATOR}{safe(check)}{RECORD_SUFFIX}"


def atomic_write_text(path: Path, text: str) -> Path:
    """Write via a temp file in the same directory, fsync, then `os.replace`.

    Readers (a report running while checks still write, a CI upload) see either the old
    file or the new one, never a torn one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        # mkstemp creates 0600; evidence and reports are shared (CI artifacts, a web server),
        # so keep an existing file's mode or use the usual 0644.
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
        os.chmod(tmp, mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_directory(path.parent)
    return path


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable on POSIX; not supported everywhere, and not needed
    # for correctness of readers, so failures are ignored.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def write_record(directory: Path, record: EvidenceRecord) -> Path:
    return atomic_write_text(Path(directory) / record_filename(record.cell, record.check), to_json(record))


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

    @property
    def ok(self) -> bool:
        return self.record is not None


def _is_record_file(path: Path, root: Path) -> bool:
    relative = path.relative_to(root)
    if any(part.startswith(".") for part in relative.parts):
        return False
    return path.name.endswith(RECORD_SUFFIX) and _NAME_SEPARATOR in path.name and path.is_file()


def _hint(data: JsonValue, name: str) -> str | None:
    if isinstance(data, dict):
        value = data.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def load_record(path: Path) -> LoadedRecord:
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return LoadedRecord(path=path, problem=f"{source}: cannot read: {exc}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return LoadedRecord(path=path, problem=f"{source}: {_json_problem(exc)}")
    try:
        record = record_from_dict(data, source)
    except EvidenceError as exc:
        return LoadedRecord(path=path, problem=str(exc), cell=_hint(data, "cell"), check=_hint(data, "check"))
    return LoadedRecord(path=path, record=record, cell=record.cell, check=record.check)


def read_records(directories: Iterable[Path]) -> list[LoadedRecord]:
    """Every ``*__*.json`` under the directories (recursively, hidden entries skipped).

    CI artifacts arrive as one subdirectory per job, hence the recursion. A directory that
    is missing, or a file that is unreadable or invalid, becomes a `LoadedRecord` with a
    `problem` rather than an exception: one bad file must not hide the rest of the evidence.
    """
    loaded: list[LoadedRecord] = []
    seen: set[Path] = set()
    for directory in directories:
        root = Path(directory)
        if not root.is_dir():
            what = "is not a directory" if root.exists() else "does not exist"
            loaded.append(LoadedRecord(path=root, problem=f"{root}: evidence directory {what}"))
            continue
        for path in sorted(root.rglob(f"*{RECORD_SUFFIX}")):
            if not _is_record_file(path, root):
                continue
            resolved = path.resolve()
            if resolved in seen:
                continue
            seen.add(resolved)
            loaded.append(load_record(path))
    return loaded
