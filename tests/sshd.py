"""A real OpenSSH server on 127.0.0.1 for the device-lab tests: a free port, its own host
key, a throwaway user key, stopped by its fixture. The tests run as root, so the server
lets root log in with that key only (prohibit-password), and reads the key from a file of
its own (StrictModes no, no PAM)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"
# The loopback "device" is this machine, whose other CPUs run other tests: its programs
# decode with one thread (ggml's threads spin at barriers, and under qemu a descheduled
# one costs seconds per step).
QEMU_PREFIX = (
    "env",
    "ELIZA_N_THREADS=1",
    "qemu-aarch64",
    "-cpu",
    "neoverse-n1",
    "-L",
    "/usr/aarch64-linux-gnu",
)


@dataclass
class Sshd:
    root: Path
    port: int
    key: Path
    known_hosts: Path
    config: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def destination(self) -> str:
        return "root@127.0.0.1"

    @property
    def options(self) -> list[str]:
        return [f"Port={self.port}", f"IdentityFile={self.key}", f"UserKnownHostsFile={self.known_hosts}",
                "IdentitiesOnly=yes"]  # fmt: skip

    def start(self) -> None:
        # -D: in the foreground, so the fixture owns the process; -e: its log on stderr.
        log = (self.root / "sshd.log").open("ab")
        self.process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                return
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"sshd exited {self.process.returncode}: {(self.root / 'sshd.log').read_text()}"
                )
            time.sleep(0.1)
        raise RuntimeError("sshd did not listen within 10 s")

    def stop(self) -> None:
        """The server and every session it serves (its descendants, by process id): a device
        that goes away."""
        if self.process is None:
            return
        if self.process.poll() is None:
            for pid in [*_descendants(self.process.pid), self.process.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def lab(self, platform: str, *, name: str = "loopback", prefix: tuple[str, ...] = (),
            provides: tuple[str, ...] = (), work_dir: Path | None = None) -> str:  # fmt: skip
        """A lab file's text declaring this server as a device of `platform`."""
        lines = [
            "version: 1",
            "devices:",
            f"  - name: {name}",
            f"    platform: {platform}",
            "    transport:",
            "      ssh:",
            f"        destination: {self.destination}",
            f"        options: [{', '.join(self.options)}]",
            f"    provides: [{', '.join(provides)}]",
            f"    work_dir: {work_dir or self.root / 'device'}",
        ]
        if prefix:
            lines.append(f"    command_prefix: [{', '.join(prefix)}]")
        return "\n".join(lines) + "\n"


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_sshd(root: Path) -> Sshd:
    if not Path(SSHD).is_file() or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("needs OpenSSH's sshd, ssh and ssh-keygen (bash ci/setup.sh installs openssh-server)")
    if os.geteuid() != 0:
        pytest.skip("the test sshd logs in as the user running it; it is set up for root (CI runs as root)")
    root.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)], check=True)
    authorized = root / "authorized_keys"
    shutil.copy(root / "user_key.pub", authorized)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # its privilege-separation directory
    port = _free_port()
    config = root / "sshd_config"
    config.write_text(
        "\n".join([
            f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {root / 'host_key'}",
            f"PidFile {root / 'sshd.pid'}", f"AuthorizedKeysFile {authorized}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "StrictModes no", "UsePAM no",
        ]) + "\n"
    )  # fmt: skip
    return Sshd(root=root, port=port, key=root / "user_key", known_hosts=root / "known_hosts", config=config)


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    server = make_sshd(tmp_path / "sshd")
    server.start()
    try:
        yield server
    finally:
        server.stop()
