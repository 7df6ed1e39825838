"""Evidence records as JSON files: the codec, the schema check, atomic writes and a
tolerant reader (`read_records` never raises for a bad file: it reports it)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from eliza.core.evidence import NAME_SEPARATOR as _NAME_SEPARATOR
from eliza.core.evidence import (
    RECORD_SUFFIX,
    SCHEMA_VERSION,
    UNSIGNED_SCHEMA_VERSION,
    Artifact,
    Counts,
    EvidenceError,
    EvidenceRecord,
    HostInfo,
    InputFingerprint,
    JsonValue,
    LoadedRecord,
    Status,
    Subject,
    SubjectRole,
    record_filename,
)
from eliza.formats import attestation
from eliza.formats.attestation import AttestationError, SigningKey
from eliza.formats.files import atomic_write_text, file_identity
from eliza.formats.json_schema import load_jsonschema

if TYPE_CHECKING:
    import jsonschema

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
    """The bare record (the predicate), indented: for reading, never what is written as evidence."""
    return json.dumps(record_to_dict(record), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def subject_to_dict(subject: Subject) -> dict[str, JsonValue]:
    annotations: dict[str, str] = {"role": subject.role.value}
    if subject.cell:
        annotations["cell"] = subject.cell
    return {"name": subject.name, "digest": {"sha256": subject.sha256}, "annotations": annotations}


def inputs_subject(record: EvidenceRecord) -> Subject:
    """Every Statement's first subject: the input fingerprint (its key is a sha256 of the parts)."""
    return Subject(
        name=f"inputs:{record.cell}/{record.check}", sha256=record.fingerprint.key, role=SubjectRole.INPUTS
    )


def record_to_statement(record: EvidenceRecord) -> dict[str, JsonValue]:
    subjects = [inputs_subject(record), *(s for s in record.subjects if s.role is not SubjectRole.INPUTS)]
    return attestation.statement([subject_to_dict(s) for s in subjects], record_to_dict(record))


def signed_json(record: EvidenceRecord, key: SigningKey) -> str:
    """The record as written: a DSSE envelope of its in-toto Statement, signed with `key`."""
    payload = attestation.to_json_bytes(record_to_statement(record))
    return json.dumps(attestation.envelope(payload, key), indent=2) + "\n"


@cache
def _schema_validator() -> jsonschema.protocols.Validator:
    # Imported here, which records already found schema-valid never need (read_records'
    # `memo`), and without the IRI grammars no evidence schema asks for (eliza.formats.json_schema).
    load_jsonschema()
    from jsonschema.validators import validator_for

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator_cls = validator_for(schema)
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


def record_from_dict(
    data: JsonValue, source: str = "<record>", *, schema_checked: bool = False
) -> EvidenceRecord:
    """The record of a parsed file. `schema_checked`: these bytes passed the schema before
    (read_records' memo), so only the model's own invariants are checked again."""
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
    schema_error = None if schema_checked else _first_schema_error(data, source)
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


def write_record(directory: Path, record: EvidenceRecord, key: SigningKey) -> Path:
    """`<directory>/<cell>__<check>.json`, signed with `key`, written atomically."""
    return atomic_write_text(
        Path(directory) / record_filename(record.cell, record.check), signed_json(record, key)
    )


def _subjects(items: JsonValue, source: str) -> tuple[Subject, ...]:
    subjects: list[Subject] = []
    for i, item in enumerate(items):
        where = f"subject[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise EvidenceError(source, where, "must be an object with a string 'name'")
        digest = item.get("digest")
        sha = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(sha, str):
            raise EvidenceError(source, f"{where}.digest.sha256", "required field is missing")
        given = item.get("annotations")
        annotations: dict[str, JsonValue] = given if isinstance(given, dict) else {}
        role = annotations.get("role", "")
        cell = annotations.get("cell", "")
        if not isinstance(role, str) or not isinstance(cell, str):
            raise EvidenceError(source, f"{where}.annotations", "role and cell must be strings")
        if role not in _ROLES:
            raise EvidenceError(
                source, f"{where}.annotations.role", f"{role!r} is not one of {sorted(_ROLES)}"
            )
        try:
            subjects.append(Subject(name=item["name"], sha256=sha, role=SubjectRole(role), cell=cell))
        except EvidenceError as exc:
            raise EvidenceError(
                source, f"{where}.{exc.field.removeprefix('subject.')}", exc.problem
            ) from None
    return tuple(subjects)


_ROLES = frozenset(r.value for r in SubjectRole)


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


def _name_hint(path: Path) -> tuple[str | None, str | None]:
    """(cell, check) as the file's name spells them, for a file too broken to say itself."""
    stem = path.name.removesuffix(RECORD_SUFFIX)
    cell, sep, check = stem.partition(_NAME_SEPARATOR)
    return (cell or None, check or None) if sep else (None, None)


def load_record(path: Path, keys: Mapping[str, bytes], *, schema_checked: bool = False) -> LoadedRecord:
    """One file as a record, or as a load problem that names it: never an exception,
    whatever the file holds. `keys` (key id -> raw ed25519 public key) are the keys whose
    signatures are checked; the report decides which of them it trusts for what.
    `schema_checked`: the file, as it is now, passed the schema before."""
    source = str(path)
    try:
        raw = _read_regular_file(path)
    except _Refused as exc:
        return LoadedRecord(path=path, problem=f"{source}: {exc}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        why = f"{source}: cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})"
        return LoadedRecord(path=path, problem=why)
    data, problem = _parse_json(text, source)
    if problem is not None:
        return LoadedRecord(path=path, problem=problem)
    if attestation.is_envelope(data):
        return _from_envelope(path, raw, data, keys, schema_checked)
    cell, check = _hint(data, "cell"), _hint(data, "check")
    if isinstance(data, dict) and data.get("schema_version") == UNSIGNED_SCHEMA_VERSION:
        why = (
            f"{source}: a schema {UNSIGNED_SCHEMA_VERSION} record, from before evidence was signed: it names "
            "no artifact it judged and no key vouches for it; re-run the check"
        )
        return LoadedRecord(path=path, problem=why, cell=cell, check=check, untrusted=True)
    loaded = _from_predicate(path, data, source, (), schema_checked)
    # A bare record is readable but signed by no one: the report shows it UNTRUSTED.
    return replace(loaded, raw=raw)


def _parse_json(text: str, source: str) -> tuple[JsonValue, str | None]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"{source}: {_json_problem(exc)}"
    except RecursionError:
        return None, f"{source}: not a record: nested too deeply to parse"
    except ValueError as exc:  # e.g. an integer longer than Python converts
        return None, f"{source}: not valid JSON: {exc}"
    shape = _depth_and_text_problem(data)
    if shape is not None:
        return None, f"{source}: not a record: {shape}"
    return data, None


def _from_envelope(
    path: Path, raw: bytes, data: JsonValue, keys: Mapping[str, bytes], schema_checked: bool
) -> LoadedRecord:
    source = str(path)
    cell, check = _name_hint(path)
    try:
        kind, payload, signatures = attestation.open_envelope(data)
    except AttestationError as exc:
        return LoadedRecord(
            path=path, problem=f"{source}: malformed envelope: {exc}", cell=cell, check=check, untrusted=True
        )
    if kind != attestation.PAYLOAD_TYPE:
        why = f"{source}: the envelope's payload type {kind!r} is not ours ({attestation.PAYLOAD_TYPE!r})"
        return LoadedRecord(path=path, problem=why, cell=cell, check=check, untrusted=True)
    try:
        statement = attestation.decode_statement(payload)
    except AttestationError as exc:
        return LoadedRecord(
            path=path, problem=f"{source}: not evidence: {exc}", cell=cell, check=check, untrusted=True
        )
    shape = _depth_and_text_problem(statement)
    if shape is not None:
        return LoadedRecord(path=path, problem=f"{source}: not a record: {shape}", cell=cell, check=check)
    signature = attestation.check_signatures(kind, payload, signatures, keys)
    try:
        subjects = _subjects(statement["subject"], source)
    except EvidenceError as exc:
        return LoadedRecord(path=path, problem=str(exc), cell=cell, check=check)
    loaded = _from_predicate(path, statement["predicate"], source, subjects, schema_checked)
    if loaded.problem is not None and not signature.verified:
        # What no key vouches for is untrusted first: its content's problems come second.
        why = f"{source}: {signature.problem} (and {loaded.problem.removeprefix(source + ': ')})"
        return replace(loaded, problem=why, untrusted=True, signature=signature)
    return replace(loaded, signature=signature, raw=raw)


def _from_predicate(
    path: Path, data: JsonValue, source: str, subjects: tuple[Subject, ...], schema_checked: bool
) -> LoadedRecord:
    try:
        record = record_from_dict(data, source, schema_checked=schema_checked)
    except EvidenceError as exc:
        return LoadedRecord(path=path, problem=str(exc), cell=_hint(data, "cell"), check=_hint(data, "check"))
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:
        return LoadedRecord(
            path=path,
            problem=f"{source}: not a record: {type(exc).__name__}: {exc}",
            cell=_hint(data, "cell"),
            check=_hint(data, "check"),
        )
    inputs = [s for s in subjects if s.role is SubjectRole.INPUTS]
    if subjects and (len(inputs) != 1 or inputs[0].sha256 != record.fingerprint.key):
        why = f"{source}: field 'subject': the inputs subject does not name the record's fingerprint key"
        return LoadedRecord(path=path, problem=why, cell=record.cell, check=record.check)
    expected = record_filename(record.cell, record.check)
    if path.name != expected:
        # A record copied under another cell's or check's name: the file claims one entry,
        # its content another.
        why = (
            f"{source}: the file is named for another entry than the record it holds "
            f"({record.cell} · {record.check}, whose file is {expected})"
        )
        cell, check = _name_hint(path)
        return LoadedRecord(path=path, problem=why, cell=cell, check=check)
    record = replace(record, subjects=tuple(s for s in subjects if s.role is not SubjectRole.INPUTS))
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


def read_records(
    directories: Iterable[Path], keys: Mapping[str, bytes], memo: Path | None = None
) -> list[LoadedRecord]:
    """Every ``*__*.json`` under the directories (recursively, hidden entries skipped).

    CI artifacts arrive as one subdirectory per job, hence the recursion. A directory that
    is missing or unreadable, or a file that is unreadable, not a regular file, too large,
    too deep or invalid, becomes a `LoadedRecord` with a `problem` rather than an
    exception: one bad file must not hide the rest of the evidence.

    `memo` (a JSON file) remembers which files passed the schema, by file identity (size,
    mtime, inode): such a file is not schema-checked again until it changes. Signatures
    are always checked (a key may have been revoked since).
    """
    valid_before = _schema_memo(memo)
    valid_now: dict[str, list[int]] = {}
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
            try:
                identity = list(file_identity(path)) if not path.is_symlink() else None
            except OSError:
                identity = None
            checked = identity is not None and valid_before.get(str(path)) == identity
            record = load_record(path, keys, schema_checked=checked)
            if identity is not None and record.record is not None:
                valid_now[str(path)] = identity
            loaded.append(record)
        loaded.extend(problems)
    if memo is not None and valid_now != valid_before:
        # an unwritable memo costs the schema checks next time, nothing else
        with contextlib.suppress(OSError):
            atomic_write_text(memo, json.dumps({"schema": _schema_digest(), "files": valid_now}) + "\n")
    return loaded


@cache
def _schema_digest() -> str:
    return hashlib.sha256(SCHEMA_PATH.read_bytes()).hexdigest()


def _schema_memo(memo: Path | None) -> dict[str, list[int]]:
    """path -> file identity of the files that passed this schema, as `memo` remembers."""
    if memo is None:
        return {}
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(known, dict) or known.get("schema") != _schema_digest():
        return {}
    files = known.get("files")
    return {str(k): v for k, v in files.items() if isinstance(v, list)} if isinstance(files, dict) else {}
