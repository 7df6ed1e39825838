"""The ssh transport against a real OpenSSH server on 127.0.0.1 (tests/sshd.py): probing,
content-addressed pushes, runs with a time limit, results fetched, and each fault (server
gone, refused login, full disk, a hang, a crash) as NOT RUNNABLE HERE or an error naming
the device and the step, after which the next run is clean."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from eliza.adapters.devices import DeviceError, DeviceTarget, probe
from eliza.app.checks.target_cases import _run_cases
from eliza.core.lab import Device, Transport
from eliza.core.matrix import Requirement
from tests.sshd import Sshd, sshd  # noqa: F401  (the fixture)


def device_of(server: Sshd, work: Path, *, options: list[str] | None = None) -> Device:
    return Device(
        name="loopback",
        platform="linux-cpu",
        transport=Transport.SSH,
        address=server.destination,
        ssh_options=tuple(options if options is not None else server.options),
        provides=(Requirement.X86_64_V3_CPU,),
        work_dir=str(work),
    )


def tool(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_a_reachable_server_is_probed_with_its_identity(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    state = probe(device_of(sshd, tmp_path / "work"))
    here = subprocess.run(["uname", "-a"], capture_output=True, text=True, check=True).stdout.strip()
    assert state.reachable, state.error
    assert state.identity["uname"] == here  # the same machine, seen over ssh


def test_files_are_pushed_once_and_results_come_back(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    device = device_of(sshd, tmp_path / "work")
    state = probe(device)
    data = tmp_path / "host" / "data.txt"
    data.parent.mkdir()
    data.write_text("four words of input\n")
    reader = tool(tmp_path / "host" / "reader", 'wc -w < "$1" > "$2"; echo "ran in $PWD"\n')
    out = tmp_path / "host" / "out" / "count.txt"

    first = DeviceTarget(state, "k1")
    done = first.run([str(reader), str(data), str(out)], outputs=(out,))
    assert done.ok, done.stderr
    assert out.read_text().strip() == "4"
    assert f"ran in {device.run_dir('k1')}" in done.stdout  # on the device, in its run directory
    assert first.pushed_files == 2
    first.close()
    assert not Path(device.run_dir("k1")).exists()  # the run directory is removed

    second = DeviceTarget(state, "k1")
    assert second.run([str(reader), str(data), str(out)], outputs=(out,)).ok
    assert second.pushed_files == 0  # unchanged files are in the store already
    data.write_text("now five words of input\n")
    third = DeviceTarget(state, "k1")
    assert third.run([str(reader), str(data), str(out)], outputs=(out,)).ok
    assert third.pushed_files == 1 and out.read_text().strip() == "5"
    stored = sorted(p.name for p in Path(device.store).iterdir())
    assert len(stored) == 3 and all(len(n) == 64 for n in stored)  # sha256 names, no partial file


def test_a_stopped_server_is_unreachable_with_ssh_s_words(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    device = device_of(sshd, tmp_path / "work")
    sshd.stop()
    state = probe(device)
    assert not state.reachable
    assert "Connection refused" in state.error and str(sshd.port) in state.error


def test_a_refused_login_is_unreachable_never_a_prompt(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    options = [o if not o.startswith("IdentityFile=") else f"IdentityFile={other}" for o in sshd.options]
    state = probe(device_of(sshd, tmp_path / "work", options=options))
    assert not state.reachable and "Permission denied" in state.error


def test_a_device_gone_mid_run_is_an_error_naming_it_and_the_next_run_is_clean(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    device = device_of(sshd, tmp_path / "work")
    state = probe(device)
    started = tmp_path / "started"  # the loopback device shares this file system
    slow = tool(tmp_path / "slow", f'touch {started}; echo "ok a"; sleep 30; echo "summary 1 1"\n')
    target = DeviceTarget(state, "gone")

    def pull_the_plug() -> None:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        sshd.stop()

    threading.Thread(target=pull_the_plug, daemon=True).start()
    with pytest.raises(DeviceError) as caught:
        target.run([str(slow)])
    assert "device loopback via ssh root@127.0.0.1" in str(caught.value)
    assert "running slow failed" in str(caught.value)
    target.close()  # the device is gone: nothing to remove, and no exception
    sshd.start()
    quick = tool(tmp_path / "quick", 'echo "ok a"; echo "summary 1 1"\n')
    again = DeviceTarget(probe(device), "gone")
    report, _, error = _run_cases(again, [str(quick)], "")
    assert error == "" and [c.passed for c in report.cases] == [True]
    assert sorted(p.name for p in (Path(device.run_dir("gone"))).iterdir()) == ["in", "out"]  # replaced


def test_a_hang_is_cut_off_on_the_device_and_a_crash_is_an_error(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    state = probe(device_of(sshd, tmp_path / "work"))
    hang = tool(tmp_path / "hang", 'echo "ok a"; exec sleep 60\n')
    started = time.monotonic()
    _, _, error = _run_cases(DeviceTarget(state, "h", timeout_s=2), [str(hang)], "")
    assert "exited 124 under device loopback via ssh" in error  # timeout(1)'s status
    assert time.monotonic() - started < 30
    crash = tool(tmp_path / "crash", 'echo "ok a"; kill -SEGV $$\n')
    _, _, error = _run_cases(DeviceTarget(state, "c"), [str(crash)], "")
    assert "before its summary" in error and "device loopback" in error


def test_a_full_disk_on_the_device_is_an_error_naming_the_push(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    work = tmp_path / "small"
    work.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(work)], check=False).returncode:
        pytest.skip("cannot mount a small tmpfs here to fill")
    try:
        state = probe(device_of(sshd, work))
        big = tmp_path / "big.bin"
        big.write_bytes(b"\0" * 256 * 1024)
        reader = tool(tmp_path / "reader", 'wc -c < "$1"\n')
        with pytest.raises(DeviceError) as caught:
            DeviceTarget(state, "full").run([str(reader), str(big)])
        said = str(caught.value)
        assert "push of 2 file(s) failed" in said and ("No space left" in said or "Wrote only" in said)
        assert not [p for p in (work / "store").iterdir() if p.name != ".incoming"]  # nothing half-written
    finally:
        subprocess.run(["umount", str(work)], check=False)
