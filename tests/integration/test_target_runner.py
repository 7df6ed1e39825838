"""A target binary that crashes, hangs or lies under its runner is a failed run with its
output, never a hang or a pass (eliza.app.checks.target_cases). The "emulator" here is a
shell script standing in for qemu: what is tested is how its exits are judged."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from eliza.adapters.targets import LocalTarget
from eliza.app.checks.target_cases import _run_cases
from eliza.core.target import TargetRunner


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "case_runner"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# A runner prefix like qemu's: it execs the binary it is given.
EMULATOR = LocalTarget(
    TargetRunner(prefix=("sh", "-c", 'exec "$@"', "emulator"), words="emulated: test", timeout_s=5)
)


def test_a_run_that_reports_every_case_is_trusted(tmp_path: Path) -> None:
    binary = script(tmp_path, 'echo "ok a"; echo "FAIL b: expected chosen x"; echo "summary 2 1"; exit 1\n')
    report, log, error = _run_cases(EMULATOR, [str(binary)], "selector::")
    assert error == ""
    assert [(c.name, c.passed) for c in report.cases] == [("selector::a", True), ("selector::b", False)]
    assert report.cases[1].message == "expected chosen x"
    assert "[emulated: test]" in log and "summary 2 1" in log  # the log names how it ran


def test_a_crash_under_the_emulator_is_an_error_with_the_output_tail(tmp_path: Path) -> None:
    binary = script(tmp_path, 'echo "ok a"; echo "qemu: uncaught target signal 11" >&2; kill -SEGV $$\n')
    report, log, error = _run_cases(EMULATOR, [str(binary)], "")
    assert "exited -11 under emulated: test before its summary" in error
    assert "uncaught target signal 11" in error
    assert [c.name for c in report.cases] == ["a"] and "ok a" in log


def test_a_hang_is_cut_off_by_the_time_limit(tmp_path: Path) -> None:
    binary = script(tmp_path, 'echo "ok a"; exec sleep 60\n')
    quick = LocalTarget(TargetRunner(prefix=EMULATOR.runner.prefix, words=EMULATOR.words, timeout_s=1))
    _, _, error = _run_cases(quick, [str(binary)], "")
    assert "did not finish within 1 s" in error


@pytest.mark.parametrize(
    "body",
    [
        'echo "ok a"; exit 0\n',  # no summary line: stopped early
        'echo "ok a"; echo "summary 3 3"; exit 0\n',  # a summary its case lines do not add up to
    ],
)
def test_a_run_whose_summary_is_missing_or_wrong_is_not_trusted(tmp_path: Path, body: str) -> None:
    _, _, error = _run_cases(EMULATOR, [str(script(tmp_path, body))], "")
    assert error != ""


def test_a_missing_emulator_is_an_error_not_an_exception(tmp_path: Path) -> None:
    binary = script(tmp_path, 'echo "summary 0 0"\n')
    absent = LocalTarget(
        TargetRunner(prefix=(str(tmp_path / "no-such-qemu"),), words="emulated: none", timeout_s=5)
    )
    _, _, error = _run_cases(absent, [str(binary)], "")
    assert "no-such-qemu could not run" in error and "before its summary" in error
