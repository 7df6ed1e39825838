"""The suite's verdict does not depend on where the repository was cloned: the tests that
start a process as another user (marked `as_other_user`) pass from a copy of the checkout
under a directory only its owner may enter (`mktemp -d`, /root, a 0700 home), where that
user can read nothing of the checkout or of a Python installed beside it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci.helpers import copy_tree
from tests.conftest import AS_OTHER_USER


@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="only root can start a process as another user: as a user, these tests read as that user",
)
def test_other_user_cases_pass_from_a_checkout_under_a_private_directory(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)  # whatever the umask
    repo = copy_tree(private / "checkout")
    pytest_argv = ["-q", "-p", "no:cacheprovider", "-n", "0", "--tier", "all", "-m", AS_OTHER_USER, "tests"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_argv],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, tail
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed is not None and int(passed.group(1)) >= 1, tail  # zero run is never a pass
    assert not re.search(r"\d+ (failed|error)", done.stdout), tail
