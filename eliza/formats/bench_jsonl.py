"""Bench record files (JSON Lines written by the bench tools) read into BenchRun."""

from __future__ import annotations

from pathlib import Path

from eliza.core.bench_records import BenchFormatError, BenchRun, parse_run


def load_run(path: Path) -> BenchRun:
    try:
        return parse_run(path.read_text(encoding="utf-8"), str(path))
    except OSError as exc:
        raise BenchFormatError(f"{path}: cannot read bench records ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise BenchFormatError(f"{path}: not UTF-8 text at byte {exc.start}") from exc
