"""A device lab: the devices a site owns, named by a lab file (ELIZA_DEVICES or --devices),
and the command plans that reach them.

Devices belong to a site, not to the project, so they are not in matrix.yaml. A device
runs one platform, through one transport (`ssh` to a destination, or `adb` to a serial),
and provides what that platform's run_requires ask for. When a lab declares a device for a
platform, the platform's run-time checks run there.

Pure: the lab model, what a probe found (DeviceState), and every command line a transport
runs (argv lists), so the plans are unit-tested on any host. eliza.adapters.devices runs
them.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from eliza.core.matrix import Requirement

__all__ = [
    "DEFAULT_WORK_DIRS",
    "Device",
    "DeviceState",
    "Lab",
    "Transport",
    "adb_argv",
    "device_words",
    "remote_command",
    "ssh_argv",
]

CONNECT_TIMEOUT_S = 10
STATUS_MARKER = "@eliza-exit-status "
# Where a device keeps its store and run directories when the lab names none.
DEFAULT_WORK_DIRS = {"ssh": "/tmp/eliza-device", "adb": "/data/local/tmp/eliza-device"}
# What a probe runs on the device: its identity (Android: model and build fingerprint too).
IDENTITY_COMMANDS = {
    "ssh": "uname -a",
    "adb": "uname -a; getprop ro.product.model; getprop ro.build.fingerprint",
}


class Transport(StrEnum):
    SSH = "ssh"
    ADB = "adb"


@dataclass(frozen=True, kw_only=True)
class Device:
    name: str
    platform: str  # a matrix platform id
    transport: Transport
    address: str  # ssh: [user@]host; adb: the serial
    provides: tuple[Requirement, ...] = ()
    ssh_options: tuple[str, ...] = ()  # extra `ssh -o` settings, e.g. "Port=2222", "IdentityFile=~/.ssh/lab"
    work_dir: str = ""  # "" : DEFAULT_WORK_DIRS[transport]
    command_prefix: tuple[str, ...] = ()  # what binaries run under on the device (e.g. an emulator)
    line: int = 0  # where the lab file declares it

    @property
    def work(self) -> str:
        return self.work_dir or DEFAULT_WORK_DIRS[self.transport.value]

    @property
    def store(self) -> str:
        """The content-addressed store: one file per sha256, pushed once."""
        return f"{self.work}/store"

    def run_dir(self, key: str) -> str:
        """The per-run directory of one checkout (`key`): replaced by each run, removed after it."""
        return f"{self.work}/runs/{key}"

    def words(self) -> str:
        """ "device NAME via ssh DEST": what evidence's ran_on says."""
        return device_words(self)


def device_words(device: Device) -> str:
    return f"device {device.name} via {device.transport.value} {device.address}"


@dataclass(frozen=True, kw_only=True)
class Lab:
    source: str  # the lab file, as given
    devices: tuple[Device, ...] = ()

    def for_platform(self, platform_id: str) -> Device | None:
        """The device that runs the platform (the first declared)."""
        return next((d for d in self.devices if d.platform == platform_id), None)


@dataclass(frozen=True, kw_only=True)
class DeviceState:
    """What probing a device found: reachable with its identity, or why not."""

    device: Device
    reachable: bool
    identity: Mapping[str, str] = field(default_factory=dict)  # uname, model, fingerprint
    error: str = ""  # why it is not reachable (the transport's own words)

    def describe(self) -> str:
        if self.reachable:
            return f"{self.device.words()}: reachable ({self.identity.get('uname', '')})"
        return f"{self.device.words()}: unreachable: {self.error}"

    def details(self) -> dict[str, str]:
        """The identity facts evidence records carry."""
        return {
            "name": self.device.name,
            "transport": self.device.transport.value,
            "address": self.device.address,
            **self.identity,
        }


def parse_identity(transport: Transport, output: str) -> dict[str, str]:
    """The identity a probe printed (IDENTITY_COMMANDS): uname, then Android's model and
    build fingerprint."""
    lines = [line.strip() for line in output.strip().splitlines()]
    facts = {"uname": lines[0] if lines else ""}
    if transport is Transport.ADB:
        facts["model"] = lines[1] if len(lines) > 1 else ""
        facts["fingerprint"] = lines[2] if len(lines) > 2 else ""
    return facts


# --------------------------------------------------------------------------- command plans


def ssh_argv(device: Device, command: str, *, connect_timeout: int = CONNECT_TIMEOUT_S) -> list[str]:
    """ssh that never prompts (BatchMode, first, so nothing overrides it: ssh keeps the first
    value of each setting), then the lab's options, then defaults they may override: give up
    connecting after connect_timeout, take a new host key on first contact and refuse a
    changed one, notice a device gone within 15 s, print ssh's errors only."""
    argv = ["ssh", "-o", "BatchMode=yes"]
    for option in device.ssh_options:
        argv += ["-o", option]
    for option in (
        f"ConnectTimeout={connect_timeout}",
        "StrictHostKeyChecking=accept-new",
        "ServerAliveInterval=5",
        "ServerAliveCountMax=3",
        "LogLevel=ERROR",
    ):
        argv += ["-o", option]
    return [*argv, device.address, "--", command]


def adb_argv(device: Device, *words: str) -> list[str]:
    """adb addressed to the device's serial: `adb -s SERIAL push|pull|shell ...`."""
    return ["adb", "-s", device.address, *words]


def remote_command(
    device: Device,
    run_dir: str,
    argv: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> str:
    """The shell line that runs argv on the device: in its run directory, with env, under the
    device's command prefix, killed by `timeout` (when the device has it) after timeout_s.
    Its exit status comes last on stderr (STATUS_MARKER): without that line, the connection
    broke, whatever status ssh or adb ended with."""
    words = [*device.command_prefix, *argv]
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted((env or {}).items()))
    program = " ".join(shlex.quote(w) for w in words)
    limit = max(1, int(timeout_s))
    run = f"env {assignments} {program}" if assignments else program
    return (
        f"cd {shlex.quote(run_dir)} || exit 97; if command -v timeout >/dev/null 2>&1; "
        f'then timeout -k 5 {limit} {run}; else {run}; fi; echo "{STATUS_MARKER}$?" >&2'
    )


def split_status(stderr: str) -> tuple[int | None, str]:
    """(the program's exit status, stderr without the marker line); None: no marker came."""
    head, marker, tail = stderr.rpartition(STATUS_MARKER)
    if not marker:
        return None, stderr
    status, _, rest = tail.partition("\n")
    try:
        return int(status.strip()), head + rest
    except ValueError:
        return None, stderr


def stage_script(store: str, run_dir: str, links: Sequence[tuple[str, str]], *, replace: bool = True) -> str:
    """Replaces (or, not `replace`, adds to) the run directory with each (sha256, relative
    path) of the store: a hard link, or a copy where the file system has none."""
    q = shlex.quote
    lines = [f"rm -rf {q(run_dir)}"] if replace else []
    lines.append(f"mkdir -p {q(run_dir)}/out")
    dirs = sorted({rel.rsplit("/", 1)[0] for _, rel in links if "/" in rel})
    if dirs:
        lines.append("mkdir -p " + " ".join(q(f"{run_dir}/{d}") for d in dirs))
    for sha, rel in links:
        src, dst = q(f"{store}/{sha}"), q(f"{run_dir}/{rel}")
        lines.append(f"{{ ln {src} {dst} 2>/dev/null || cp {src} {dst}; }}")
    return " && ".join(lines)


def receive_script(store: str, incoming: str) -> str:
    """Unpacks a tar of sha256-named files from stdin into the store: into a directory of its
    own first, moved into place only when the whole archive arrived, so an interrupted push
    leaves no half-written file under a sha256 name."""
    q = shlex.quote
    return (
        f"mkdir -p {q(store)} && rm -rf {q(incoming)} && mkdir -p {q(incoming)} && "
        f'tar -x -f - -C {q(incoming)} && for f in {q(incoming)}/*; do mv -f "$f" {q(store)}/; done && '
        f"rmdir {q(incoming)}"
    )


def present_script(store: str, shas: Sequence[str]) -> str:
    """Prints the sha256 names the store already holds, of those asked about."""
    names = " ".join(shas)
    return f'cd {shlex.quote(store)} 2>/dev/null && for f in {names}; do [ -f "$f" ] && echo "$f"; done; true'
