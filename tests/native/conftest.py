"""The native suite decodes with one thread unless ELIZA_N_THREADS is set: it checks
behaviour, not speed, and a multi-threaded ggml decode on a busy machine spends most of its
time spinning at barriers. Tests of thread pools and the thread budget set their own."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.silence import pytest_runtest_makereport  # noqa: F401  (the silence check, for every test here)


@pytest.fixture(scope="session", autouse=True)
def one_decode_thread_by_default() -> Iterator[None]:
    if os.environ.get("ELIZA_N_THREADS"):
        yield
        return
    os.environ["ELIZA_N_THREADS"] = "1"
    try:
        yield
    finally:
        os.environ.pop("ELIZA_N_THREADS", None)
