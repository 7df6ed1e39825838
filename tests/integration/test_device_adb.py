"""The adb transport with Debian's adb and no device attached: the probe ends with adb's
one line, never a prompt or a traceback. (No real device has been attached here: the
command plans are unit-tested in tests/unit/test_lab.py.) The adb server runs on a port of
its own and is stopped after."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator

import pytest

from eliza.adapters.devices import probe
from eliza.core.lab import Device, Transport
from eliza.core.matrix import Requirement


@pytest.fixture
def own_adb_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if shutil.which("adb") is None:
        pytest.skip("needs adb (Debian package adb; bash ci/setup.sh installs it when it can)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", port)
    try:
        yield port
    finally:
        subprocess.run(["adb", "-P", port, "kill-server"], capture_output=True, check=False, timeout=30)


def test_no_device_attached_is_one_clear_line(own_adb_server: str) -> None:
    device = Device(name="phone", platform="android-arm64", transport=Transport.ADB, address="NO0SUCH0SERIAL",
                    provides=(Requirement.ANDROID_DEVICE,))  # fmt: skip
    state = probe(device)
    assert not state.reachable
    assert state.error == "error: device 'NO0SUCH0SERIAL' not found"
