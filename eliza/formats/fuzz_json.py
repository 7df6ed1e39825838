"""build/fuzz/summary.json, written by `nox -s fuzz`: what ran, on which cell and inputs,
with the executions, corpus size and findings of each target. Read tolerantly: a summary
that is missing is None, one that is malformed is a problem, never an exception."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MAX_SUMMARY_BYTES = 1 << 20


@dataclass(frozen=True, kw_only=True)
class FuzzTarget:
    name: str
    executions: int
    seconds: float
    corpus_files: int
    findings: tuple[str, ...]
    leak_check: str  # "done", "off", "unfinished: ..." or "not recorded" (older summaries)


@dataclass(frozen=True, kw_only=True)
class FuzzSummary:
    cell: str
    finished_at: str
    inputs: str  # content hash of the library's sources and the fuzz targets
    seconds_per_target: int
    targets: tuple[FuzzTarget, ...]


class FuzzSummaryError(ValueError):
    pass


def read_fuzz_summary(path: Path) -> FuzzSummary | None:
    if not path.is_file():
        return None
    try:
        if path.stat().st_size > MAX_SUMMARY_BYTES:
            raise FuzzSummaryError(f"{path}: larger than {MAX_SUMMARY_BYTES} bytes")
        data = json.loads(path.read_text(encoding="utf-8"))
        targets = tuple(
            FuzzTarget(
                name=str(name),
                executions=int(t["executions"]),
                seconds=float(t["seconds"]),
                corpus_files=int(t["corpus_files"]),
                findings=tuple(str(f) for f in t["findings"]),
                leak_check=str(t.get("leak_check", "not recorded")),
            )
            for name, t in sorted(data["targets"].items())
        )
        return FuzzSummary(
            cell=str(data["cell"]),
            finished_at=str(data["finished_at"]),
            inputs=str(data.get("inputs", "")),
            seconds_per_target=int(data["seconds_per_target"]),
            targets=targets,
        )
    except (
        OSError,
        UnicodeDecodeError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        RecursionError,
    ) as exc:
        raise FuzzSummaryError(f"{path}: not a fuzz summary: {type(exc).__name__}: {exc}") from None
