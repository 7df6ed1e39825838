"""The sanitizer runtime of a build variant: where it is, the environment that loads it
into a process that is not instrumented itself (Python, for the ctypes suites), and the
reports it leaves behind.

Every report goes to a file under one directory (`log_path`), whichever process wrote it
(the suite, a child it started, a bench tool), so a run's reports are counted by listing
that directory, not by parsing interleaved output.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from eliza.adapters import proc

# The exit status a sanitizer gives a process it stops, distinct from pytest's own.
ASAN_EXIT = 86
UBSAN_EXIT = 87

_RUNTIMES = {"address": "libasan.so", "undefined": "libubsan.so"}


class SanitizerError(RuntimeError):
    pass


def runtime_library(name: str, compiler: str = "c++") -> Path:
    """The shared runtime the compiler links for a sanitizer (`-print-file-name`)."""
    library = _RUNTIMES[name]
    done = proc.run([compiler, f"-print-file-name={library}"])
    path = Path(done.stdout.strip()) if done.ok else Path(library)
    if not path.is_absolute() or not path.exists():
        raise SanitizerError(
            f"{compiler} has no {library} (the {name} sanitizer's runtime): {done.output.strip()}"
        )
    return path.resolve()


def runtime_env(
    sanitizers: Sequence[str], report_dir: Path, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What a process needs to load a library built with `sanitizers`: the runtime
    preloaded (ASan must come first; it includes UBSan's handlers when both are on), leak
    checking on, the first report ends the process, reports written under report_dir."""
    if not sanitizers:
        return {}
    report_dir.mkdir(parents=True, exist_ok=True)
    base = dict(os.environ if env is None else env)
    first = "address" if "address" in sanitizers else sanitizers[0]
    preload = [str(runtime_library(first))]
    if base.get("LD_PRELOAD"):
        preload.append(base["LD_PRELOAD"])
    common = f"halt_on_error=1:print_stacktrace=1:log_path={report_dir / 'report'}"
    return {
        "LD_PRELOAD": ":".join(preload),
        "ASAN_OPTIONS": f"{common}:detect_leaks=1:exitcode={ASAN_EXIT}:abort_on_error=0",
        "LSAN_OPTIONS": f"exitcode={ASAN_EXIT}:print_suppressions=0",
        "UBSAN_OPTIONS": f"{common}:exitcode={UBSAN_EXIT}",
        "ELIZA_SANITIZERS": ",".join(sanitizers),
    }


def reports(report_dir: Path) -> list[Path]:
    """Report files the runtime wrote (report.<pid>) with something in them."""
    if not report_dir.is_dir():
        return []
    return sorted(p for p in report_dir.iterdir() if p.name.startswith("report.") and p.stat().st_size > 0)


def clear_reports(report_dir: Path) -> None:
    for path in reports(report_dir):
        path.unlink()


def summary(paths: Sequence[Path], limit: int = 3000) -> str:
    """The first lines of each report, for evidence."""
    parts = []
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = [
            ln for ln in text.splitlines() if "ERROR:" in ln or "runtime error:" in ln or "SUMMARY:" in ln
        ]
        parts.append(f"{path.name}: " + (" | ".join(lines[:4]) or text[:300]))
    return "\n".join(parts)[:limit]
