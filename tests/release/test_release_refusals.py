"""What makes `nox -s release` refuse a cell, in a copy of this checkout that holds its
verified linux-cpu.none (the build folder and the evidence, copied): a library changed by
one byte after verify, a check whose fresh evidence failed, and evidence signed by a key
the release does not trust. Each refusal names why, and nothing of the cell is written."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from eliza.core.c_abi import abi_version
from eliza.formats.files import sha256_file
from tests.ci.helpers import copy_tree
from tests.release.helpers import line_of

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CELL = "linux-cpu.none"
VERSION = f"{abi_version((REPO / 'native/include/eliza-inference-ffi.h').read_text())}.0.0"
LIBRARY = Path("build/linux-cpu/none/build") / f"libelizainference.so.{VERSION}"

# The project's own recording code writes a fresh, signed selector record of the cell that
# failed one case of two (what a real failing run records).
FAIL_SELECTOR = textwrap.dedent(
    """
    from eliza.app.project import current, host_facts, load_project_matrix
    from eliza.app.services.bundle import ensure_tiny_bundle
    from eliza.app.services.clock import Stopwatch
    from eliza.app.services.run import start_run
    from eliza.core.cell_id import CellId
    from eliza.core.outcome import outcome

    cell = "linux-cpu.none"
    run = start_run(current(), load_project_matrix(), host_facts(), print, bundle=ensure_tiny_bundle())
    library = run.project.repo / "build" / "linux-cpu" / "none" / "build" / "libelizainference.so"
    done = [outcome(cell, "selector", ran=2, passed=1, span=Stopwatch().span())]
    run.record(done, {(cell, "selector"): {CellId.parse(cell): library}})
    """
)


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    if not (REPO / "build" / "evidence" / f"{CELL}__build.json").is_file():
        pytest.skip(f"no evidence of {CELL} in this checkout (run `nox -s verify` first): nothing to release")
    root = tmp_path_factory.mktemp("refusals")
    repo = copy_tree(root / "repo")
    shutil.copytree(
        REPO / "build" / "linux-cpu" / "none", repo / "build" / "linux-cpu" / "none", symlinks=True
    )
    shutil.copytree(REPO / "build" / "evidence", repo / "build" / "evidence")
    env = {k: v for k, v in os.environ.items() if k not in ("ELIZA_MATRIX", "ELIZA_TEST_CELL")}
    env["PYTHONPATH"] = str(repo)
    yield repo, env


def release(repo: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    argv = ["-m", "nox", "-s", "release", "--", "--version", VERSION, "--cell", CELL, *extra]
    return subprocess.run(
        [sys.executable, *argv], cwd=repo, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_copy_ships_before_anything_is_changed(copy: tuple[Path, dict[str, str]]) -> None:
    # What the refusals below are measured against: unchanged, the cell ships.
    repo, env = copy
    done = release(repo, env, "--dry-run")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{CELL}: ships" in line_of(CELL, done)


def test_a_library_changed_by_one_byte_after_verify_is_refused_and_nothing_is_written(
    copy: tuple[Path, dict[str, str]],
) -> None:
    repo, env = copy
    library = repo / LIBRARY
    original = library.read_bytes()
    verified = hashlib.sha256(original).hexdigest()
    changed = bytearray(original)
    changed[len(changed) // 2] ^= 0x01
    library.write_bytes(bytes(changed))
    out = repo / "build" / "release" / VERSION
    try:
        done = release(repo, env)
    finally:
        library.write_bytes(original)
    assert done.returncode == 1, done.stderr[-3000:]
    line = line_of(CELL, done)
    assert "refused" in line and hashlib.sha256(changed).hexdigest() in line and verified in line
    # Neither the release folder nor a temporary of it: nothing of the cell was written.
    assert not out.parent.exists() or not any(out.parent.iterdir())


def test_a_check_whose_evidence_failed_is_refused_naming_it(copy: tuple[Path, dict[str, str]]) -> None:
    repo, env = copy
    record = repo / "build" / "evidence" / f"{CELL}__selector.json"
    kept = record.read_bytes()
    written = subprocess.run(
        [sys.executable, "-c", FAIL_SELECTOR], cwd=repo, env=env, capture_output=True, text=True
    )
    assert written.returncode == 0, written.stderr[-3000:]
    assert record.read_bytes() != kept
    try:
        done = release(repo, env, "--dry-run")
    finally:
        record.write_bytes(kept)
    line = line_of(CELL, done)
    assert "refused" in line and "selector: FAILED" in line and "1 of 2 failed" in line


def test_evidence_signed_by_a_key_the_release_does_not_trust_is_refused(
    copy: tuple[Path, dict[str, str]],
) -> None:
    repo, env = copy
    # Another machine's key: the copy's records are signed by this one, which it no longer trusts.
    other = base64.b64encode(hashlib.sha256(b"another machine").digest()).decode()
    done = release(repo, {**env, "ELIZA_SIGNING_KEY": other}, "--dry-run")
    line = line_of(CELL, done)
    assert "refused" in line and "UNTRUSTED" in line and "trust policy does not name" in line
    assert sha256_file(repo / LIBRARY) == sha256_file(REPO / LIBRARY)
