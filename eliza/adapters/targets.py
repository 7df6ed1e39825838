"""The port target binaries run through (case_runner, the bench tools): here, natively or
under the platform's emulator (LocalTarget), or on a device of a lab
(eliza.adapters.devices.DeviceTarget). A runner names the host files a binary reads and
the files it writes; the target makes them appear where the binary runs and brings what it
wrote back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from eliza.adapters import proc
from eliza.core.target import TargetRunner


class Target(Protocol):
    @property
    def words(self) -> str:
        """How binaries run there, for logs and evidence ("emulated: ...", "device NAME via ssh ...")."""
        ...

    @property
    def timeout_s(self) -> float: ...

    @property
    def emulated(self) -> bool:
        """Binaries run under an emulator there: their timings say nothing of the target."""
        ...

    def place(self, path: Path) -> str:
        """The name under which a binary there reads the host file or directory `path`."""
        ...

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, outputs: Sequence[Path] = ()
    ) -> proc.Completed:
        """Runs argv there with a time limit. Words of argv that name host files or
        directories are what it reads; `outputs` are host paths it writes (named in argv as
        given), back here once it exited 0."""
        ...

    def close(self) -> None:
        """Removes what the run left there."""
        ...


# qemu-user hands a program the host's own /proc/cpuinfo: an arm64 program that reads it
# (the cpuinfo library inside LiteRT-LM's XNNPACK) finds x86 lines and crashes. qemu looks
# a path up under its -L prefix first, so the sysroot is given as an overlay (links to its
# entries) that also holds an arm64 /proc/cpuinfo describing the CPU qemu emulates
# (ARMv8.2-A with the dot product, the platform's ISA floor: a Neoverse N1, part 0xd0c,
# the matrix's `emulator: cpu`, whose hardware capabilities qemu reports alike).
_ARM64_CPU = (
    "BogoMIPS\t: 50.00\n"
    "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc"
    " dcpop asimddp\n"
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n"
)


def arm64_cpuinfo(cpus: int) -> str:
    return "\n".join(f"processor\t: {i}\n{_ARM64_CPU}" for i in range(max(1, cpus)))


def sysroot_overlay(sysroot: Path, folder: Path) -> Path:
    """`folder`/<name>: links to every entry of `sysroot` and proc/cpuinfo of an arm64 CPU,
    made once (whole or not at all)."""
    import hashlib
    import os
    import shutil
    import tempfile

    cpus = os.cpu_count() or 1
    key = hashlib.sha256(f"{sysroot.resolve()}\n{cpus}\n{_ARM64_CPU}".encode()).hexdigest()[:12]
    out = folder / f"{sysroot.name}-{key}"
    if out.is_dir():
        return out
    folder.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(dir=folder, prefix=f".{out.name}."))
    try:
        for entry in sorted(sysroot.iterdir()):
            if entry.name != "proc":
                (staged / entry.name).symlink_to(entry.resolve())
        (staged / "proc").mkdir()
        (staged / "proc" / "cpuinfo").write_text(arm64_cpuinfo(cpus))
        staged.rename(out)
    except OSError:
        shutil.rmtree(staged, ignore_errors=True)
        if not out.is_dir():
            raise
    return out


def with_sysroot_overlay(runner: TargetRunner, folder: Path) -> TargetRunner:
    """The runner with qemu-aarch64's -L sysroot replaced by its overlay (see above)."""
    prefix = list(runner.prefix)
    if not prefix or not Path(prefix[0]).name.startswith("qemu-aarch64") or "-L" not in prefix:
        return runner
    at = prefix.index("-L") + 1
    if at >= len(prefix) or not Path(prefix[at]).is_dir():
        return runner
    prefix[at] = str(sysroot_overlay(Path(prefix[at]), folder))
    return TargetRunner(prefix=tuple(prefix), words=runner.words, timeout_s=runner.timeout_s)


class LocalTarget:
    """This host: natively, or under the emulator prefix of a TargetRunner."""

    def __init__(self, runner: TargetRunner) -> None:
        self.runner = runner

    @property
    def words(self) -> str:
        return self.runner.words

    @property
    def timeout_s(self) -> float:
        return self.runner.timeout_s

    @property
    def emulated(self) -> bool:
        return bool(self.runner.prefix)

    def place(self, path: Path) -> str:
        return str(path)

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, outputs: Sequence[Path] = ()
    ) -> proc.Completed:
        return proc.run(self.runner.argv(list(argv)), extra_env=env, timeout=self.runner.timeout_s)

    def close(self) -> None:
        return None
