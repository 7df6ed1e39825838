"""Evidence records as JSON files: the codec, the schema check, atomic writes and a
tolerant reader (`read_records` never raises for a bad file: it reports it)."""

from __future__ import annotations

import json
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
