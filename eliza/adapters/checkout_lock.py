"""One writer per checkout: the sessions that build cells and write evidence or the report
(`verify`, `build-*`, `bench-*`) hold an exclusive lock on `build/.eliza.lock` while they run.

A second session on the same checkout waits for the first, saying which session holds the
lock (its pid, command and start time), and then runs: two sessions are serialized, never
interleaved. The lock is an `flock` on an open file, so the kernel releases it when its
holder dies in any way (`kill -9` included): a stale lock file never blocks anybody.

Builds also hold the lock of their Conan home (`conan_home_lock`) while Conan runs: its
cache is not safe for two processes at once, and checkouts may share one home.

Within one process the lock is re-entrant (a verify that builds cells holds it once). The
programs a session starts inherit the lock (`eliza.adapters.proc`): when a session is
killed while Conan builds, the checkout stays locked until that orphaned build ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.errors import ToolError

Log = Callable[[str], None]

LOCK_NAME = ".eliza.lock"

_held: dict[Path, int] = {}  # lock path -> nesting depth in this process


class LockTimeout(ToolError):
    """The lock was not free within the time given (only with `timeout_s`)."""


def lock_path(build_root: Path) -> Path:
    return build_root / LOCK_NAME


def _holder_line(what: str) -> str:
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    command = " ".join(sys.argv[:6]) or "python"
    return f"pid {os.getpid()} ({what}: {command}) since {started}\n"


def _describe_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return text or "another process"


@contextlib.contextmanager
def checkout_lock(
    build_root: Path,
    what: str,
    log: Log,
    *,
    timeout_s: float | None = None,
    poll_s: float = 0.2,
) -> Iterator[Path]:
    """Holds the checkout's lock for the block. Waits (saying for whom) while another
    process holds it; with `timeout_s`, raises `LockTimeout` after that long instead."""
    rule = ("session", "sessions on one checkout run one at a time")
    with _exclusive(lock_path(build_root), what, log, rule, timeout_s=timeout_s, poll_s=poll_s) as path:
        yield path


@contextlib.contextmanager
def conan_home_lock(home: Path, what: str, log: Log) -> Iterator[Path]:
    """Holds the lock of a Conan home for the block: Conan's cache is not safe for two
    processes at once, and two checkouts (or a test and its copies) may share one home."""
    rule = ("build", "builds that share a Conan home run one at a time")
    with _exclusive(home / LOCK_NAME, what, log, rule) as path:
        yield path


@contextlib.contextmanager
def _exclusive(
    path: Path,
    what: str,
    log: Log,
    rule: tuple[str, str],
    *,
    timeout_s: float | None = None,
    poll_s: float = 0.2,
) -> Iterator[Path]:
    depth = _held.get(path, 0)
    if depth:
        _held[path] = depth + 1
        try:
            yield path
        finally:
            _held[path] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder, why = rule
            whom = _describe_holder(fd)
            log(f"{what}: waiting for the {holder} that holds {path} to finish ({whom}); {why}")
            _wait(fd, path, timeout_s, poll_s)
            log(f"{what}: the lock is free, running")
        os.ftruncate(fd, 0)
        os.pwrite(fd, _holder_line(what).encode("utf-8"), 0)
        _held[path] = 1
        proc.inherit_in_children(fd)
        try:
            yield path
        finally:
            proc.stop_inheriting(fd)
            _held.pop(path, None)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _wait(fd: int, path: Path, timeout_s: float | None, poll_s: float) -> None:
    if timeout_s is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise LockTimeout(
                    f"{path} is still held after {timeout_s:.0f} s ({_describe_holder(fd)})"
                ) from None
            time.sleep(poll_s)
