"""verify with a lab: a real sshd on 127.0.0.1 (tests/sshd.py) is the linux-arm64 device,
its command prefix running the cell's binaries under qemu-aarch64. The platform's run-time
checks run over ssh and are VERIFIED with ran_on naming the device; the server stopped in
the middle of a run gives error records naming it, and the next run is clean."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from eliza.app.services.lab import run_key
from eliza.core.lab import device_words
from eliza.core.layout import default_prompts
from eliza.formats.lab_yaml import load_lab
from eliza.formats.matrix_yaml import load_matrix
from tests.ci.helpers import env_for, history_clone, run_only
from tests.signing import predicate
from tests.sshd import QEMU_PREFIX, Sshd, sshd  # noqa: F401  (the fixture)

CELL = "linux-arm64.none"
# A check through the native case runner and one through the bench tools: the two ways a
# check runs on a device (the other run-time checks take one of them).
ON_DEVICE = ("selector", "byte-identity-reference")


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = history_clone(tmp_path_factory.mktemp("devices") / "repo")
    run_only(repo, ("build", *ON_DEVICE), platform="linux-arm64")
    # One short multi-byte prompt instead of the default eight with their long one: every
    # token is decoded under qemu, and the multi-byte text is what the device path could
    # mangle on its way back.
    prompts = default_prompts(repo)
    kept = [line for line in prompts.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    assert any(ord(c) > 127 for c in kept[3]), kept[3]
    prompts.write_text(f"{kept[3]}\n", encoding="utf-8")
    return repo


def verify(repo: Path, lab: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "nox", "-s", "verify", "--", "--cell", CELL, *args],
        cwd=repo,
        env=env_for(repo, ELIZA_DEVICES=str(lab)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finished(process: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = process.communicate(timeout=1800)
    return process.returncode, out


def records(repo: Path) -> dict[str, dict[str, Any]]:
    found = {}
    for path in (repo / "build" / "evidence").glob(f"{CELL}__*.json"):
        data = predicate(path)
        found[str(data["check"])] = data
    return found


def sha256_named(store: Path) -> set[str]:
    return {p.name for p in store.iterdir() if len(p.name) == 64}


def states(repo: Path) -> dict[str, str]:
    report = json.loads((repo / "build" / "report" / "report.json").read_text())
    row = next(r for r in report["rows"] if r["cell"] == CELL)
    return {e["check"]: e["state"] for e in row["entries"]}


# The slow tier: the target's path over ssh (files pushed once, results back, a device gone
# mid-run an error naming it and the next run clean) is tests/integration/test_device_ssh.py,
# against the same sshd, in seconds; this runs a whole verify of the platform through it.
@pytest.mark.slow
def test_linux_arm64_checks_run_on_the_device_and_survive_it_going_away(
    clone: Path,
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    lab = tmp_path / "lab.yaml"
    lab.write_text(sshd.lab("linux-arm64", prefix=QEMU_PREFIX, provides=("arm64-cpu",)))
    device = load_lab(lab, load_matrix(clone / "matrix.yaml")).devices[0]
    uname = subprocess.run(["uname", "-a"], capture_output=True, text=True, check=True).stdout.strip()

    status, out = finished(verify(clone, lab))
    assert status == 0, out[-3000:]
    found = records(clone)
    for check in ON_DEVICE:
        details = found[check]["details"]
        assert found[check]["status"] == "passed", (check, found[check]["reason"])
        assert isinstance(details, dict) and details["ran_on"] == device_words(device)
        assert details["device"]["uname"] == uname  # the device's identity, as it said it
    assert found["build"]["details"].get("ran_on") is None  # built here, not on the device
    judged = states(clone)
    assert all(judged[c] == "verified" for c in ON_DEVICE), judged
    run_dir = Path(device.run_dir(run_key(clone)))
    assert not run_dir.exists()  # removed after the run
    stored = sha256_named(Path(device.store))

    # The server goes away while the checks run on it: error records naming the device.
    # The device checks' records are removed, so this verify runs them (and not the build).
    for check in ON_DEVICE:
        (clone / "build" / "evidence" / f"{CELL}__{check}.json").unlink()
    build_record = (clone / "build" / "evidence" / f"{CELL}__build.json").read_bytes()
    running = verify(clone, lab)
    deadline = time.monotonic() + 600
    while not (run_dir / "in").exists() and running.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    sshd.stop()
    status, out = finished(running)
    assert status == 1, out[-3000:]
    assert "Traceback" not in out
    assert (clone / "build" / "evidence" / f"{CELL}__build.json").read_bytes() == build_record
    broken = [r for r in records(clone).values() if r["status"] == "error"]
    assert broken and all(device_words(device) in str(r["reason"]) for r in broken), out[-3000:]
    for check in ON_DEVICE:  # each either finished before the server went, or names it
        record = records(clone)[check]
        assert record["status"] == "passed" or device_words(device) in str(record["reason"]), record

    # Back again: the next run replaces the run directory left behind and verifies.
    sshd.start()
    status, out = finished(verify(clone, lab))
    assert status == 0, out[-3000:]
    judged = states(clone)
    assert all(judged[c] == "verified" for c in ON_DEVICE), judged
    assert not run_dir.exists()
    assert sha256_named(Path(device.store)) == stored  # nothing new was pushed
