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
