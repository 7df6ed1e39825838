"""Evidence records as JSON files: the codec, the schema check, atomic writes and a
tolerant reader (`read_records` never raises for a bad file: it reports it)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import jsonschema

from eliza.core.evidence import NAME_SEPARATOR as _NAME_SEPARATOR
from eliza.core.evidence import (
    RECORD_SUFFIX,
    SCHEMA_VERSION,
    Artifact,
    Counts,
    EvidenceError,
    EvidenceRecord,
    HostInfo,
    InputFingerprint,
    JsonValue,
    LoadedRecord,
    Status,
    record_filename,
)
from eliza.formats.files import atomic_write_text

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schema" / "evidence.schema.json"


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


def write_record(directory: Path, record: EvidenceRecord) -> Path:
    return atomic_write_text(Path(directory) / record_filename(record.cell, record.check), to_json(record))


def _hint(data: JsonValue, name: str) -> str | None:
    if isinstance(data, dict):
        value = data.get(name)
        if isinstance(value, str) and value:
            return value
    return None


# A record is a few KiB; anything far larger is not one (and is not read into memory).
MAX_RECORD_BYTES = 8 * 1024 * 1024
# Deeper than any record this package writes; deeper structures are refused before the
# schema check (whose recursion a hostile file could otherwise exhaust).
MAX_RECORD_DEPTH = 64


def _read_regular_file(path: Path) -> bytes:
    """The bytes of a regular file, refusing anything else without blocking on it (a FIFO,
    a device, a symbolic link) and anything larger than a record can be."""
    flags = os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if path.is_symlink():
            raise _Refused("is a symbolic link; evidence must be a regular file") from None
        raise _Refused(f"cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Refused("is not a regular file")
        if info.st_size > MAX_RECORD_BYTES:
            raise _Refused(
                f"is {info.st_size} bytes, larger than a record may be ({MAX_RECORD_BYTES} bytes); not read"
            )
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > MAX_RECORD_BYTES:  # grew while being read
                raise _Refused(f"is larger than a record may be ({MAX_RECORD_BYTES} bytes); not read")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise _Refused(f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


class _Refused(Exception):
    pass


def _depth_and_text_problem(data: JsonValue) -> str | None:
    """Too deep a structure, or a string that is not valid Unicode (a lone surrogate from a
    `\\ud800` escape cannot be written into a UTF-8 report)."""
    stack: list[tuple[JsonValue, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_RECORD_DEPTH:
            return f"nested deeper than {MAX_RECORD_DEPTH} levels"
        if isinstance(value, dict):
            for key, item in value.items():
                if _bad_text(key):
                    return "a key is not valid Unicode (an unpaired surrogate)"
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, str) and _bad_text(value):
            return "a string is not valid Unicode (an unpaired surrogate)"
    return None


def _bad_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def load_record(path: Path) -> LoadedRecord:
    """One file as a record, or as a load problem that names it: never an exception,
    whatever the file holds."""
    source = str(path)
    try:
        raw = _read_regular_file(path)
    except _Refused as exc:
        return LoadedRecord(path=path, problem=f"{source}: {exc}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"{source}: cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})"
        return LoadedRecord(path=path, problem=problem)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return LoadedRecord(path=path, problem=f"{source}: {_json_problem(exc)}")
    except RecursionError:
        return LoadedRecord(path=path, problem=f"{source}: not a record: nested too deeply to parse")
    except ValueError as exc:  # e.g. an integer longer than Python converts
        return LoadedRecord(path=path, problem=f"{source}: not valid JSON: {exc}")
    shape = _depth_and_text_problem(data)
    if shape is not None:
        return LoadedRecord(path=path, problem=f"{source}: not a record: {shape}")
    try:
        record = record_from_dict(data, source)
    except EvidenceError as exc:
        return LoadedRecord(path=path, problem=str(exc), cell=_hint(data, "cell"), check=_hint(data, "check"))
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:
        return LoadedRecord(
            path=path,
            problem=f"{source}: not a record: {type(exc).__name__}: {exc}",
            cell=_hint(data, "cell"),
            check=_hint(data, "check"),
        )
    return LoadedRecord(path=path, record=record, cell=record.cell, check=record.check)


def _record_files(root: Path, problems: list[LoadedRecord]) -> list[Path]:
    """Candidate record files under root, in path order: names ``*__*.json``, hidden
    entries skipped, symbolic links to directories not followed (a link loop, or a link
    out of an artifact folder, must not take the walk elsewhere). An unreadable
    directory becomes a load problem."""
    found: list[Path] = []

    def unreadable(exc: OSError) -> None:
        where = exc.filename or root
        problem = f"{where}: cannot list the directory: {exc.strerror}"
        problems.append(LoadedRecord(path=Path(where), problem=problem))

    for current, dirs, files in os.walk(root, onerror=unreadable, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if name.startswith(".") or not name.endswith(RECORD_SUFFIX) or _NAME_SEPARATOR not in name:
                continue
            found.append(Path(current) / name)
        # A link to a directory shows in `dirs` and is not descended; one named like a
        # record is worth a problem rather than silence.
        for name in dirs:
            link = Path(current) / name
            if link.is_symlink() and name.endswith(RECORD_SUFFIX) and _NAME_SEPARATOR in name:
                found.append(link)
    return sorted(found)


def read_records(directories: Iterable[Path]) -> list[LoadedRecord]:
    """Every ``*__*.json`` under the directories (recursively, hidden entries skipped).

    CI artifacts arrive as one subdirectory per job, hence the recursion. A directory that
    is missing or unreadable, or a file that is unreadable, not a regular file, too large,
    too deep or invalid, becomes a `LoadedRecord` with a `problem` rather than an
    exception: one bad file must not hide the rest of the evidence.
    """
    loaded: list[LoadedRecord] = []
    seen: set[Path] = set()
    for directory in directories:
        root = Path(directory)
        if not root.is_dir():
            what = "is not a directory" if root.exists() else "does not exist"
            loaded.append(LoadedRecord(path=root, problem=f"{root}: evidence directory {what}"))
            continue
        problems: list[LoadedRecord] = []
        for path in _record_files(root, problems):
            if not path.is_symlink():  # a link is a load problem of its own, never a duplicate
                resolved = Path(os.path.realpath(path))
                if resolved in seen:
                    continue
                seen.add(resolved)
            loaded.append(load_record(path))
        loaded.extend(problems)
    return loaded
