"""The one way this package runs a program: captured text output, an explicit
environment, an optional time limit, and no exception for a non-zero exit status.

A program that cannot start or does not finish in time is a `Completed` with
returncode -1 and the reason in stderr, so callers handle one shape of failure.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# Descriptors every child inherits: the checkout's lock (eliza.adapters.checkout_lock), so
# a build that a killed session leaves running keeps the checkout locked until it ends.
_inherited: set[int] = set()


def inherit_in_children(fd: int) -> None:
    _inherited.add(fd)


def stop_inheriting(fd: int) -> None:
    _inherited.discard(fd)


# Laid over the environment of every child started meanwhile, under what its caller names:
# a verify's decode threads per process while its checks run side by side.
_overlay: dict[str, str] = {}


@contextmanager
def children_environment(values: Mapping[str, str]) -> Iterator[None]:
    """While the block runs, every program started gets `values` in its environment (a
    caller's own `extra_env` still wins)."""
    before = dict(_overlay)
    _overlay.update(values)
    try:
        yield
    finally:
        _overlay.clear()
        _overlay.update(before)


@dataclass(frozen=True, kw_only=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run(
    argv: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> Completed:
    """Runs argv to completion. `env` replaces the environment (default: this process's);
    `extra_env` is laid over it."""
    words = tuple(str(a) for a in argv)
    environment = {**(os.environ if env is None else env), **_overlay, **(extra_env or {})}
    try:
        done = subprocess.run(
            words,
            cwd=cwd,
            env=environment,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
            pass_fds=tuple(sorted(_inherited)),
        )
    except subprocess.TimeoutExpired as exc:
        # What the killed program wrote before it stopped says how far it got.
        raw = exc.stdout or b""
        partial = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        return Completed(
            argv=words,
            returncode=-1,
            stdout=partial,
            stderr=f"{words[0]} did not finish within {timeout:.0f} s",
            timed_out=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return Completed(argv=words, returncode=-1, stdout="", stderr=f"{words[0]} could not run: {exc}")
    return Completed(
        argv=words, returncode=done.returncode, stdout=done.stdout or "", stderr=done.stderr or ""
    )


def stream(
    argv: Sequence[str | Path],
    *,
    env: Mapping[str, str],
    stdout_to: Path,
    on_stderr_line: Callable[[str], None],
) -> int:
    """Runs argv with its stdout written to a file and each stderr line handed to
    `on_stderr_line` as it comes (a long build's progress); returns the exit status."""
    with stdout_to.open("w") as out:
        child = subprocess.Popen(
            [str(a) for a in argv],
            env={**env, **_overlay},
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            pass_fds=tuple(sorted(_inherited)),
        )
        assert child.stderr is not None
        for line in child.stderr:
            on_stderr_line(line)
        return child.wait()
