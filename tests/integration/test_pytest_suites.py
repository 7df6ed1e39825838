"""A suite that a check runs under pytest (selector, gate-fallthrough, native-suite) and that
hangs or crashes in the library ends as an error with what it printed, never as a job that
waits for the CI runner's limit or a check with zero cases called passed
(eliza.adapters.pytest_runner)."""

from __future__ import annotations

from pathlib import Path

from eliza.adapters.pytest_runner import run_pytest

SUITE = """
import os, signal, time

def test_quick():
    pass

def test_the_one_that_misbehaves():
    how = os.environ["HOW"]
    if how == "hang":
        time.sleep(600)
    if how == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    assert how == "pass"
"""


def suite(tmp_path: Path) -> Path:
    (tmp_path / "test_suite.py").write_text(SUITE)
    return tmp_path / "junit.xml"


def test_a_suite_that_hangs_is_stopped_and_named(tmp_path: Path) -> None:
    junit = suite(tmp_path)
    result = run_pytest(tmp_path, ["test_suite.py"], junit, {"HOW": "hang"}, timeout_s=3)
    assert result.cases == []
    assert result.error == "pytest test_suite.py did not finish within 3 s: a test hangs"
    assert "did not finish within 3 s" in result.log


def test_a_suite_that_crashes_has_no_results_and_says_how_it_ended(tmp_path: Path) -> None:
    junit = suite(tmp_path)
    result = run_pytest(tmp_path, ["test_suite.py"], junit, {"HOW": "crash"}, timeout_s=60)
    assert result.cases == []
    assert result.error == "pytest test_suite.py exited -11 without results"


def test_a_suite_that_finishes_is_judged_by_its_cases(tmp_path: Path) -> None:
    junit = suite(tmp_path)
    for how, verdicts in (("pass", [True, True]), ("fail", [True, False])):
        result = run_pytest(tmp_path, ["test_suite.py"], junit, {"HOW": how}, timeout_s=60)
        assert result.error == ""
        assert [c.passed for c in result.cases] == verdicts
