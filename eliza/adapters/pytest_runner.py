"""pytest as a check runner: runs a suite in a child process and reads its JUnit XML, so
a check's counts are the test cases that really executed."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters import proc
from eliza.core.outcome import CaseResult


def read_junit(path: Path) -> list[CaseResult]:
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        cases.append(
            CaseResult(
                name=f"{case.get('classname', '')}::{case.get('name', '')}",
                passed=failure is None and case.find("skipped") is None,
                skipped=case.find("skipped") is not None,
                message=(failure.get("message", "") if failure is not None else ""),
            )
        )
    return cases


@dataclass(frozen=True, kw_only=True)
class PytestRun:
    cases: list[CaseResult]
    log: str
    error: str = ""  # pytest did not finish with results (crash, collection error, kill, hang)


# The longest suite, the native one under ASan, takes about 5 minutes on two cores. A test
# that hangs in the library must still end as a failed check with a reason, before the CI
# job's own limit kills the job and with it the evidence of every other check.
SUITE_TIMEOUT_S = 1800.0


def run_pytest(
    repo: Path,
    paths: Sequence[str],
    junit: Path,
    env: Mapping[str, str],
    *,
    timeout_s: float = SUITE_TIMEOUT_S,
) -> PytestRun:
    """Runs a suite and reads its JUnit XML. Only pytest's own verdicts (exit 0 or 1) with a
    fresh XML count: an old file from an earlier run is removed first."""
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)
    done = proc.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *paths],
        cwd=repo,
        extra_env=env,
        timeout=timeout_s,
    )
    log = done.output[-4000:]
    suite = " ".join(paths)
    if done.timed_out:
        return PytestRun(
            cases=[], log=log, error=f"pytest {suite} did not finish within {timeout_s:.0f} s: a test hangs"
        )
    if done.returncode not in (0, 1) or not junit.is_file():
        return PytestRun(cases=[], log=log, error=f"pytest {suite} exited {done.returncode} without results")
    return PytestRun(cases=read_junit(junit), log=log)
