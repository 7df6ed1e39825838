"""Which sanitizer reports fail the native-suite check: every ASan/UBSan error, and the
leaks allocated by the library or the bench tools, not those of the interpreter or of the
programs a test starts (which inherit the preloaded runtime)."""

from __future__ import annotations

from pathlib import Path

from eliza.adapters.sanitizer import Findings, findings, of_ours
from eliza.app.checks.native_suite import unfinished_leak_checks
from eliza.app.sessions.fuzz import leak_checker_died

PYTHON_EXIT_LEAKS = """\
=================================================================
==123==ERROR: LeakSanitizer: detected memory leaks

Direct leak of 56 byte(s) in 1 object(s) allocated from:
    #0 0x7f in __interceptor_malloc ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:69
    #1 0x7f in gc_alloc Modules/gcmodule.c:2283

Indirect leak of 24 byte(s) in 1 object(s) allocated from:
    #0 0x7f in __interceptor_malloc ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:69
    #1 0x7f in PyFloat_FromDouble Objects/floatobject.c:149

SUMMARY: AddressSanitizer: 80 byte(s) leaked in 2 allocation(s).
"""

LIBRARY_LEAK = """\
==124==ERROR: LeakSanitizer: detected memory leaks

Direct leak of 4096 byte(s) in 1 object(s) allocated from:
    #0 0x7f in operator new(unsigned long) ../../../../src/libsanitizer/asan/asan_new_delete.cpp:95
    #1 0x7f in LlamaStream::open /eliza/native/src/llama_stream.cpp:120
    #2 0x7f in eliza_inference_llm_stream_open (/x/build/libelizainference.so.9+0x1234)
    #3 0x7f in ffi_call_unix64 (/usr/lib/libffi.so.8+0x7)
    #4 0x7f in _PyEval_EvalFrameDefault Python/ceval.c:5000

SUMMARY: AddressSanitizer: 4096 byte(s) leaked in 1 allocation(s).
"""

HEAP_OVERFLOW = """\
==125==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602 at pc 0x7f bp 0x7f sp 0x7f
WRITE of size 1 at 0x602 thread T0
    #0 0x7f in eliza::finish_step /eliza/native/src/llama_stream.cpp:900
    #1 0x7f in eliza_inference_llm_stream_next (/x/libelizainference.so.9+0x99)
SUMMARY: AddressSanitizer: heap-buffer-overflow /eliza/native/src/llama_stream.cpp:900
"""

UBSAN = "/eliza/native/src/context.cpp:12:5: runtime error: signed integer overflow\n"

# As LeakSanitizer wrote it when its tracer crashed in a native-suite run of this project.
TRACER_CRASH = """\
Tracer caught signal 11: addr=0x48 pc=0x7f0ddb0e80f0 sp=0x7f0dc8cbad10
==28160==LeakSanitizer has encountered a fatal error.
==28160==HINT: For debugging, try setting environment variable LSAN_OPTIONS=verbosity=1:log_threads=1
==28160==HINT: LeakSanitizer does not work under ptrace (strace, gdb, etc)
"""


def test_interpreter_leaks_are_left_aside_library_leaks_and_errors_count(tmp_path: Path) -> None:
    (tmp_path / "report.123").write_text(PYTHON_EXIT_LEAKS)
    (tmp_path / "report.124").write_text(LIBRARY_LEAK)
    (tmp_path / "report.125").write_text(HEAP_OVERFLOW)
    (tmp_path / "report.126").write_text(UBSAN)
    (tmp_path / "report.127").write_text("")  # a process that wrote nothing
    (tmp_path / "other.txt").write_text(HEAP_OVERFLOW)  # not a report file
    found = findings(tmp_path)
    counted, ignored = found.counted, found.foreign_leaks
    assert found.incomplete_leak_checks == ()
    assert ignored == 2
    assert len(counted) == 3
    assert (
        counted[0].startswith("report.124: Direct leak of 4096 byte(s)") and "LlamaStream::open" in counted[0]
    )
    assert "heap-buffer-overflow" in counted[1] and "finish_step" in counted[1]
    assert "runtime error: signed integer overflow" in counted[2]


def test_no_reports_no_findings(tmp_path: Path) -> None:
    assert findings(tmp_path / "missing") == Findings((), 0, ())
    (tmp_path / "report.1").write_text(PYTHON_EXIT_LEAKS)
    assert findings(tmp_path) == Findings((), 2, ())


def test_a_crashed_leak_tracer_is_an_unfinished_check_not_a_report(tmp_path: Path) -> None:
    """The leak check of that process never ran: it neither passes nor counts as a
    library report, and the file names the process it happened in."""
    (tmp_path / "report.python3.11.28160").write_text(TRACER_CRASH)
    (tmp_path / "report.bash.28161").write_text(TRACER_CRASH)
    (tmp_path / "report.python3.11.28162").write_text(PYTHON_EXIT_LEAKS)
    found = findings(tmp_path)
    assert found.counted == ()
    assert found.foreign_leaks == 2
    assert found.incomplete_leak_checks == ("report.bash.28161", "report.python3.11.28160")
    assert [of_ours(name) for name in found.incomplete_leak_checks] == [False, True]
    assert of_ours("report.e2e_loop_bench.7") and of_ours("report.case_runner.8")
    assert not of_ours("report.git.9")
    # the native-suite check has no verdict on leaks for the Python process: an error
    why = unfinished_leak_checks(found)
    assert "report.python3.11.28160" in why and "report.bash" not in why and "run the check again" in why
    assert unfinished_leak_checks(Findings((), 0, ("report.bash.1",))) == ""


def test_a_fuzz_crash_input_is_the_tracers_only_when_nothing_else_ended_the_run(tmp_path: Path) -> None:
    (tmp_path / "report.python.1").write_text(TRACER_CRASH)
    tracer_only = findings(tmp_path)
    assert leak_checker_died(tracer_only, "MS: 0 ; base unit: 0000\nTest unit written to crash-da39")
    assert not leak_checker_died(tracer_only, "==1== ERROR: libFuzzer: deadly signal")
    assert not leak_checker_died(tracer_only, "=== Uncaught Python exception: ===\nViolation: x")
    (tmp_path / "report.python.2").write_text(HEAP_OVERFLOW)
    assert not leak_checker_died(findings(tmp_path), "Test unit written to crash-da39")
    assert not leak_checker_died(findings(tmp_path / "none"), "Test unit written to crash-da39")


def test_the_runtime_env_preloads_asan_first_and_the_cxx_runtime(tmp_path: Path) -> None:
    """A Python host loads libstdc++ only with the library: unless it is preloaded, ASan
    cannot find the real __cxa_throw and the first C++ exception inside the library ends
    in an ASan CHECK failure (found by the bundle fuzz target on an empty GGUF)."""
    from eliza.adapters.sanitizer import runtime_env

    env = runtime_env(("address", "undefined"), tmp_path / "reports", {"LD_PRELOAD": "/x/libfoo.so"})
    preload = env["LD_PRELOAD"].split(":")
    assert "libasan.so" in preload[0] and "libstdc++.so" in preload[1] and preload[2] == "/x/libfoo.so"
    assert "detect_leaks=1" in env["ASAN_OPTIONS"] and "halt_on_error=1" in env["ASAN_OPTIONS"]
    assert "log_exe_name=1" in env["ASAN_OPTIONS"]  # report files name their process
    # without it LeakSanitizer's tracer crashes on a bogus dynamic-TLS range (known-issues.md)
    assert "intercept_tls_get_addr=0" in env["ASAN_OPTIONS"]
    assert "halt_on_error=1" in env["UBSAN_OPTIONS"]
    assert env["LSAN_OPTIONS"] == "exitcode=0" and env["PYTHONMALLOC"] == "malloc"
    # exitcode is shared by the three runtimes: set anywhere else, it would override LSan's
    assert "exitcode" not in env["ASAN_OPTIONS"] and "exitcode" not in env["UBSAN_OPTIONS"]
    assert runtime_env((), tmp_path) == {}
