"""The two transports to a device, each one program: OpenSSH's `ssh` (with tar over the
connection for pushes) and `adb -s SERIAL`. A link runs a shell line there, pushes
sha256-named files into the device's store, and reads a file back. The command lines come
from eliza.core.lab; a failure of the transport itself (no route, refused login, a device
gone) is a DeviceError naming the device and the step."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from eliza.adapters import proc
from eliza.adapters.errors import ToolError
from eliza.core.lab import Device, Transport, adb_argv, receive_script, ssh_argv

# ssh's own exit status when the connection failed (the remote command's status otherwise).
SSH_FAILED = 255


class DeviceError(ToolError):
    """A step on a device failed; the message names the device, the step and the cause."""

    def __init__(self, device: Device, step: str, cause: str) -> None:
        self.device = device
        self.step = step
        super().__init__(f"{device.words()}: {step} failed: {cause.strip()[-800:] or 'no reason given'}")


def _call(
    argv: list[str], *, timeout: float, stdin: Path | None = None, stdout: Path | None = None
) -> proc.Completed:
    """argv with stdin from a file and stdout to a file (binary), or captured as text."""
    try:
        with stdin.open("rb") if stdin else open("/dev/null", "rb") as source:
            if stdout is not None:
                with stdout.open("wb") as sink:
                    done = subprocess.run(
                        argv, stdin=source, stdout=sink, stderr=subprocess.PIPE, timeout=timeout, check=False
                    )
                return proc.Completed(
                    argv=tuple(argv),
                    returncode=done.returncode,
                    stdout="",
                    stderr=done.stderr.decode("utf-8", "replace"),
                )
            done = subprocess.run(argv, stdin=source, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return proc.Completed(
            argv=tuple(argv),
            returncode=-1,
            stdout="",
            stderr=f"{argv[0]} did not finish within {timeout:.0f} s",
        )
    except OSError as exc:
        return proc.Completed(
            argv=tuple(argv), returncode=-1, stdout="", stderr=f"{argv[0]} could not run: {exc}"
        )
    return proc.Completed(
        argv=tuple(argv),
        returncode=done.returncode,
        stdout=done.stdout.decode("utf-8", "replace"),
        stderr=done.stderr.decode("utf-8", "replace"),
    )


class Link(Protocol):
    device: Device

    def shell(self, command: str, *, timeout: float, step: str) -> proc.Completed:
        """The shell line's result; DeviceError when the transport itself failed."""
        ...

    def push(self, files: Mapping[str, Path], *, timeout: float) -> None:
        """sha256 -> host file: each into the store, whole or not at all."""
        ...

    def read(self, remote: str, local: Path, *, timeout: float) -> None: ...


def _program(name: str, device: Device) -> None:
    if shutil.which(name) is None:
        package = {"ssh": "openssh-client", "adb": "adb"}[name]
        raise DeviceError(device, "connect", f"{name} is not on PATH (install the Debian package {package})")


class SshLink:
    def __init__(self, device: Device, connect_timeout: int = 10) -> None:
        self.device = device
        self.connect_timeout = connect_timeout

    def _argv(self, command: str) -> list[str]:
        return ssh_argv(self.device, command, connect_timeout=self.connect_timeout)

    def shell(self, command: str, *, timeout: float, step: str) -> proc.Completed:
        """255 is ssh's own failure, or a remote program killed by a signal: a program's run
        tells them apart by its status line (eliza.core.lab.remote_command)."""
        _program("ssh", self.device)
        done = _call(self._argv(command), timeout=timeout)
        if done.returncode == -1 or (done.returncode == SSH_FAILED and not step.startswith("running ")):
            raise DeviceError(self.device, step, done.stderr)
        return done

    def push(self, files: Mapping[str, Path], *, timeout: float) -> None:
        if not files:
            return
        with tempfile.TemporaryDirectory(prefix="eliza-push-") as tmp:
            archive = Path(tmp) / "push.tar"
            with tarfile.open(archive, "w") as tar:
                for sha, path in files.items():
                    info = tar.gettarinfo(str(path), arcname=sha)
                    info.mode = 0o755
                    with path.open("rb") as data:
                        tar.addfile(info, data)
            incoming = f"{self.device.store}/.incoming"
            _program("ssh", self.device)
            done = _call(
                self._argv(receive_script(self.device.store, incoming)), timeout=timeout, stdin=archive
            )
        if not done.ok:
            raise DeviceError(self.device, f"push of {len(files)} file(s)", done.stderr)

    def read(self, remote: str, local: Path, *, timeout: float) -> None:
        done = _call(self._argv(f"cat {shlex.quote(remote)}"), timeout=timeout, stdout=local)
        if not done.ok:
            raise DeviceError(self.device, f"fetch of {remote}", done.stderr)


class AdbLink:
    """adb: `adb -s SERIAL shell` runs a line, `push` and `pull` move files. Not run against a
    real device on the machines this project is tested on (docs/devices.md)."""

    def __init__(self, device: Device) -> None:
        self.device = device

    @staticmethod
    def _call(argv: list[str], timeout: float) -> proc.Completed:
        """adb's own server chatter ("* daemon not running; starting now ...") left out."""
        done = _call(argv, timeout=timeout)
        said = "".join(line for line in done.stderr.splitlines(keepends=True) if not line.startswith("* "))
        return replace(done, stderr=said)

    def _failed(self, done: proc.Completed) -> bool:
        said = done.stderr.strip().lower()
        return done.returncode == -1 or said.startswith(("error:", "adb: error", "adb: device"))

    def shell(self, command: str, *, timeout: float, step: str) -> proc.Completed:
        _program("adb", self.device)
        done = self._call(adb_argv(self.device, "shell", command), timeout)
        if self._failed(done) and not (step.startswith("running ") and done.returncode != -1):
            raise DeviceError(self.device, step, done.stderr)
        return done

    def push(self, files: Mapping[str, Path], *, timeout: float) -> None:
        incoming = f"{self.device.store}/.incoming"
        self.shell(f"mkdir -p {incoming}", timeout=timeout, step="push")
        for sha, path in files.items():
            done = self._call(adb_argv(self.device, "push", str(path), f"{incoming}/{sha}"), timeout)
            if not done.ok:
                raise DeviceError(self.device, f"push of {path.name}", done.stderr or done.stdout)
            moved = self.shell(
                f"chmod 755 {incoming}/{sha} && mv -f {incoming}/{sha} {self.device.store}/{sha}",
                timeout=timeout,
                step="push",
            )
            if not moved.ok:
                raise DeviceError(self.device, f"push of {path.name}", moved.stderr or moved.stdout)

    def read(self, remote: str, local: Path, *, timeout: float) -> None:
        done = self._call(adb_argv(self.device, "pull", remote, str(local)), timeout)
        if not done.ok:
            raise DeviceError(self.device, f"fetch of {remote}", done.stderr or done.stdout)


def link_for(device: Device) -> Link:
    return SshLink(device) if device.transport is Transport.SSH else AdbLink(device)
