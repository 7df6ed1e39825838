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
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.errors import ToolError

# The exit status a sanitizer gives a process it stops, distinct from pytest's own.
ASAN_EXIT = 86
UBSAN_EXIT = 87

_RUNTIMES = {"address": "libasan.so", "undefined": "libubsan.so"}


class SanitizerError(ToolError):
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


def cxx_runtime(compiler: str = "c++") -> Path:
    """The C++ runtime the compiler links (libstdc++)."""
    done = proc.run([compiler, "-print-file-name=libstdc++.so"])
    path = Path(done.stdout.strip()) if done.ok else Path("libstdc++.so")
    if not path.is_absolute() or not path.exists():
        raise SanitizerError(f"{compiler} has no libstdc++.so: {done.output.strip()}")
    return path.resolve()


def runtime_env(
    sanitizers: Sequence[str], report_dir: Path, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What a process needs to load a library built with `sanitizers`: the runtime
    preloaded (ASan must come first; it includes UBSan's handlers when both are on), leak
    checking on, the first error ends the process, reports written under report_dir.

    Leaks are judged from the reports, not the exit status (LeakSanitizer's exit code is
    0): every process inherits the preload, and the interpreter and the tools a test
    starts (bash, git) leak at exit by design; `findings` counts a leak only when the
    library, llama.cpp or the bench tools allocated it. PYTHONMALLOC=malloc lets the leak
    checker see pointers held by Python objects."""
    if not sanitizers:
        return {}
    report_dir.mkdir(parents=True, exist_ok=True)
    base = dict(os.environ if env is None else env)
    first = "address" if "address" in sanitizers else sanitizers[0]
    # libstdc++ too: ASan finds the real __cxa_throw when it starts; in a process that
    # loads the C++ runtime only later (Python dlopening the library), every C++
    # exception thrown inside the library would end in an ASan CHECK failure.
    preload = [str(runtime_library(first)), str(cxx_runtime())]
    if base.get("LD_PRELOAD"):
        preload.append(base["LD_PRELOAD"])
    # log_exe_name: report files are report.<program>.<pid>, so a report names its process
    common = f"halt_on_error=1:print_stacktrace=1:log_exe_name=1:log_path={report_dir / 'report'}"
    return {
        "LD_PRELOAD": ":".join(preload),
        # exitcode is one flag shared by ASan, LSan and UBSan in one runtime: set once, 0,
        # so leaks at exit do not fail processes; errors still halt them and are counted
        # from the report files (and from the output, see findings_in_output).
        # intercept_tls_get_addr=0: this host's runtime (GCC 12's libasan on glibc 2.36)
        # records a bogus dynamic-TLS range for a dlopen'ed library and LeakSanitizer's
        # tracer crashes scanning it at every leak check of e2e_loop_bench. Without the
        # interception, dynamic TLS blocks are still roots as allocations of the loader
        # (use_ld_allocations, on by default).
        "ASAN_OPTIONS": f"{common}:detect_leaks=1:abort_on_error=0:intercept_tls_get_addr=0",
        "LSAN_OPTIONS": "exitcode=0",
        "UBSAN_OPTIONS": common,
        "PYTHONMALLOC": "malloc",
        "ELIZA_SANITIZERS": ",".join(sanitizers),
    }


# Frames that make a leak ours: the library (llama.cpp and ggml are linked into it), its
# sources as the prefix maps name them, and the bench tools.
OURS = ("libelizainference", "/eliza/native/", "/llama-cpp/", "e2e_loop_bench", "reference_runner")


def report_files(report_dir: Path) -> list[Path]:
    """Report files the runtime wrote (report.<pid>) with something in them."""
    if not report_dir.is_dir():
        return []
    return sorted(p for p in report_dir.iterdir() if p.name.startswith("report.") and p.stat().st_size > 0)


def clear_reports(report_dir: Path) -> None:
    for path in report_files(report_dir):
        path.unlink()


def _leak_blocks(text: str) -> list[str]:
    """Each "Direct/Indirect leak of ..." paragraph of a LeakSanitizer report."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(("Direct leak", "Indirect leak")):
            if current:
                blocks.append("\n".join(current))
            current = [line]
        elif current is not None:
            if line.strip():
                current.append(line)
            else:
                blocks.append("\n".join(current))
                current = None
    if current:
        blocks.append("\n".join(current))
    return blocks


# What LeakSanitizer prints when its stop-the-world tracer dies while scanning the
# process (an intermittent failure of the runtime itself: google/sanitizers#1353). The
# leak check of that process did not run: neither a clean result nor a leak.
TRACER_FAILED = "LeakSanitizer has encountered a fatal error"


@dataclass(frozen=True)
class Findings:
    counted: tuple[str, ...]
    """reports that count: every ASan or UBSan error, and leaks a frame of ours allocated"""
    foreign_leaks: int
    """leak reports left aside: allocated by the interpreter or a program a test started"""
    incomplete_leak_checks: tuple[str, ...]
    """report files of processes whose leak check LeakSanitizer could not finish"""


def findings(report_dir: Path) -> Findings:
    """Every report file of report_dir, sorted into what counts, foreign leaks, and leak
    checks that could not finish (OURS decides whose a leak is)."""
    counted: list[str] = []
    foreign = 0
    incomplete: list[str] = []
    for path in report_files(report_dir):
        text = path.read_text(encoding="utf-8", errors="replace")
        errors = [
            ln.strip()
            for ln in text.splitlines()
            if ("ERROR: AddressSanitizer" in ln or "runtime error:" in ln or "ERROR: UndefinedBehavior" in ln)
        ]
        if errors:
            frames = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("#")][:6]
            counted.append(f"{path.name}: {errors[0]} | " + " | ".join(frames))
        for block in _leak_blocks(text):
            if any(mark in block for mark in OURS):
                counted.append(f"{path.name}: " + " | ".join(block.splitlines()[:8]))
            else:
                foreign += 1
        if TRACER_FAILED in text:
            incomplete.append(path.name)
    return Findings(tuple(counted), foreign, tuple(incomplete))


# Programs whose leak check matters: the interpreter that loads the library through
# ctypes, and the tools linked against it (report.<program>.<pid>, see log_exe_name).
HOSTS_OF_OURS = ("python", "e2e_loop_bench", "reference_runner", "case_runner")


def of_ours(report_name: str) -> bool:
    program = report_name.removeprefix("report.").rsplit(".", 1)[0]
    return program.startswith(HOSTS_OF_OURS)


def findings_in_output(text: str) -> list[str]:
    """Sanitizer errors a process printed instead of logging them to a file."""
    return [
        f"output: {ln.strip()[:400]}"
        for ln in text.splitlines()
        if "runtime error:" in ln or "ERROR: AddressSanitizer" in ln or "ERROR: UndefinedBehavior" in ln
    ]


def summary(found: Sequence[str], limit: int = 3000) -> str:
    return "\n".join(found)[:limit]
