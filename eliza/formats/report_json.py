"""The report as plain JSON data (report.json): the frozen model, enums as their values."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

from eliza.core.evidence import SCHEMA_VERSION as EVIDENCE_SCHEMA_VERSION
from eliza.core.report import REPORT_SCHEMA_VERSION, Report
from eliza.core.report.compare import ReportFormatError, check_format


def _jsonable(value: object) -> Any:
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report as plain JSON data; state values are the `GridState` values."""
    body: dict[str, Any] = _jsonable(report)
    body["legend"] = [{"state": s.value, "label": s.label, "meaning": s.meaning} for s in report.legend]
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "evidence_schema_version": EVIDENCE_SCHEMA_VERSION,
        **body,
    }


def read_report(path: Path) -> Mapping[str, Any]:
    """An older report.json to compare with; ReportFormatError names the file and what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportFormatError(f"{path}: no such file (give a report.json a report session wrote)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportFormatError(f"{path}: cannot be read ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportFormatError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    return check_format(data, str(path), REPORT_SCHEMA_VERSION)
