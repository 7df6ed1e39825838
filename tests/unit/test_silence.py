"""The silence check of the native suites (tests/silence.py): a test during which
something writes to fd 1 or 2 fails, quoting it, in the same run as the suite's cases; a
silent one passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from eliza.core.layout import REPO_ROOT

CONFTEST = "from tests.silence import pytest_runtest_makereport  # noqa: F401\n"
TESTS = """import os


def test_silent() -> None:
    assert os.getpid() > 0


def test_writes_to_fd_1() -> None:
    os.write(1, b"ggml: hello from native code\\n")


def test_writes_to_fd_2_in_setup(noisy: None) -> None:
    assert noisy is None
"""
FIXTURE = """import os

import pytest


@pytest.fixture()
def noisy() -> None:
    os.write(2, b"llama_model_load: loading\\n")
"""


def test_writes_to_fds_fail_the_test_that_made_them(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST + FIXTURE.replace("import pytest\n", ""))
    (tmp_path / "conftest.py").write_text(
        "import os\n\nimport pytest\n\n" + CONFTEST + FIXTURE.split("import pytest\n", 1)[1]
    )
    (tmp_path / "test_native_like.py").write_text(TESTS)
    argv = [sys.executable, "-m", "pytest", str(tmp_path), "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*argv, "--rootdir", str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 1, out
    # the call's write fails the test, the fixture's write is an error of its setup
    assert "1 failed, 1 passed, 1 error" in out, out
    assert "FAILED test_native_like.py::test_writes_to_fd_1" in out
    assert "ERROR test_native_like.py::test_writes_to_fd_2_in_setup" in out
    assert "ggml: hello from native code" in out and "llama_model_load: loading" in out
    assert "the C ABI must print nothing" in out
