"""The C ABI never prints (its header's contract): a hook for the suites that load the
library. pytest captures fds 1 and 2 around every test's setup, call and teardown, so
whatever native code writes there lands in the test's report; a test that passed while
something was written fails, quoting it. One run of the suite checks both its cases and
its silence."""

from __future__ import annotations

from collections.abc import Generator

import pytest

STREAMS = ("Captured stdout", "Captured stderr")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, object, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if item.config.getoption("capture") != "fd" or not report.passed:
        return  # with -s nothing is captured, so silence cannot be judged here
    # Sections accumulate over the phases: judge only what this phase captured.
    printed = [
        (name, text)
        for name, text in report.sections
        if name.startswith(STREAMS) and name.endswith(report.when) and text
    ]
    if printed:
        report.outcome = "failed"
        report.longrepr = "the C ABI must print nothing, but this was written during the test:\n" + "\n".join(
            f"--- {name}\n{text[:2000]}" for name, text in printed
        )
