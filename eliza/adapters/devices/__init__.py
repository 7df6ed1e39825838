"""Devices of a lab as targets: probe one (reachable? its identity), and run target
binaries there (DeviceTarget) through its link (ssh or adb, eliza.adapters.devices.links).

What a run does on the device:
- every host file a binary reads (its own file, the library, case tables, the bundle) is
  pushed once into the device's store under its sha256: an unchanged file is not pushed
  again, by this run or the next;
- the run directory (work_dir/runs/KEY, one per checkout) is replaced by links (or copies)
  of those files under their own names, so a binary sees the layout it was given;
- each binary runs there, in the run directory, under the device's command prefix and a
  time limit; what it writes under out/ is read back;
- close() removes the run directory. A run that broke off leaves one that the next replaces.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.devices.links import DeviceError, Link, link_for
from eliza.core.lab import (
    IDENTITY_COMMANDS,
    Device,
    DeviceState,
    parse_identity,
    present_script,
    remote_command,
    split_status,
    stage_script,
)

__all__ = ["DeviceError", "DeviceTarget", "probe"]

PROBE_TIMEOUT_S = 30.0
STEP_TIMEOUT_S = 300.0


def probe(device: Device, link: Link | None = None) -> DeviceState:
    """Reachable, with its identity (uname -a; Android's model and build fingerprint), or why not."""
    link = link or link_for(device)
    try:
        done = link.shell(IDENTITY_COMMANDS[device.transport.value], timeout=PROBE_TIMEOUT_S, step="probe")
    except DeviceError as exc:
        return DeviceState(device=device, reachable=False, error=str(exc).split(": probe failed: ", 1)[-1])
    if not done.ok or not done.stdout.strip():
        why = done.stderr.strip() or f"uname -a exited {done.returncode} and printed nothing"
        return DeviceState(device=device, reachable=False, error=why[-500:])
    return DeviceState(device=device, reachable=True, identity=parse_identity(device.transport, done.stdout))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class DeviceTarget:
    """A Target (eliza.adapters.targets) on a device of the lab."""

    def __init__(
        self, state: DeviceState, key: str, *, link: Link | None = None, timeout_s: float = 600.0
    ) -> None:
        self.device = state.device
        self.state = state
        self.link = link or link_for(state.device)
        self.run_dir = self.device.run_dir(key)
        self._timeout_s = timeout_s
        self._placed: dict[Path, str] = {}  # host path -> its name in the run directory
        self._staged: set[str] = set()  # names in the run directory already linked
        self._present: set[str] = set()  # sha256s known to be in the store
        self._hashes: dict[tuple[Path, int, int], str] = {}
        self._fresh = True  # the run directory is still to be replaced
        self.pushed_files = 0  # files this target sent (the tests count them)
        self.pushed_bytes = 0

    @property
    def words(self) -> str:
        return self.device.words()

    @property
    def timeout_s(self) -> float:
        return self._timeout_s

    @property
    def emulated(self) -> bool:
        return bool(self.device.command_prefix)

    def place(self, path: Path) -> str:
        host = path.resolve()
        if host not in self._placed:
            tag = hashlib.sha256(str(host).encode()).hexdigest()[:12]
            self._placed[host] = f"in/{tag}/{host.name}"
        return f"{self.run_dir}/{self._placed[host]}"

    def _files(self) -> dict[str, Path]:
        """Every name the run directory must hold -> the host file."""
        out: dict[str, Path] = {}
        for host, name in self._placed.items():
            if host.is_dir():
                for item in sorted(p for p in host.rglob("*") if p.is_file()):
                    out[f"{name}/{item.relative_to(host).as_posix()}"] = item
            elif host.is_file():
                out[name] = host
        return out

    def _hash(self, path: Path) -> str:
        st = path.stat()
        key = (path, st.st_mtime_ns, st.st_size)
        if key not in self._hashes:
            self._hashes[key] = _sha256(path)
        return self._hashes[key]

    def _stage(self) -> None:
        wanted = {name: (self._hash(p), p) for name, p in self._files().items() if name not in self._staged}
        if not wanted and not self._fresh:
            return
        shas = sorted({sha for sha, _ in wanted.values()} - self._present)
        if shas:
            done = self.link.shell(
                present_script(self.device.store, shas), timeout=STEP_TIMEOUT_S, step="push"
            )
            self._present |= set(done.stdout.split()) & set(shas)
        missing = {sha: p for sha, p in wanted.values() if sha not in self._present}
        if missing:
            self.link.push(missing, timeout=STEP_TIMEOUT_S)
            self._present |= set(missing)
            self.pushed_files += len(missing)
            self.pushed_bytes += sum(p.stat().st_size for p in missing.values())
        links = [(sha, name) for name, (sha, _) in sorted(wanted.items())]
        script = stage_script(self.device.store, self.run_dir, links, replace=self._fresh)
        done = self.link.shell(script, timeout=STEP_TIMEOUT_S, step="staging the run directory")
        if not done.ok:
            raise DeviceError(self.device, "staging the run directory", done.stderr or done.stdout)
        self._fresh = False
        self._staged |= set(wanted)

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, outputs: Sequence[Path] = ()
    ) -> proc.Completed:
        words = []
        outs: dict[str, Path] = {}
        for word in argv:
            path = Path(word)
            if word in {str(o) for o in outputs}:
                remote = f"{self.run_dir}/out/{len(outs)}-{path.name}"
                outs[remote] = path
                words.append(remote)
            elif "/" in word and not word.startswith(self.run_dir) and path.exists():
                words.append(self.place(path))
            else:
                words.append(word)
        self._stage()
        line = remote_command(self.device, self.run_dir, words, timeout_s=self._timeout_s, env=env)
        step = f"running {Path(argv[0]).name}"
        done = self.link.shell(line, timeout=self._timeout_s + 60, step=step)
        status, stderr = split_status(done.stderr)
        if status is None:  # the connection broke before the program's status came
            raise DeviceError(self.device, step, stderr or f"the transport exited {done.returncode}")
        done = proc.Completed(argv=done.argv, returncode=status, stdout=done.stdout, stderr=stderr)
        if done.ok:
            for remote, host in outs.items():
                host.parent.mkdir(parents=True, exist_ok=True)
                self.link.read(remote, host, timeout=STEP_TIMEOUT_S)
        return done

    def close(self) -> None:
        """Removes the run directory; a device gone by now leaves it for the next run to replace."""
        with contextlib.suppress(DeviceError):
            self.link.shell(
                f"rm -rf '{self.run_dir}'", timeout=PROBE_TIMEOUT_S, step="removing the run directory"
            )
