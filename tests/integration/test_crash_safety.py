"""Crash safety of the orchestration: sessions on one checkout are serialized by a lock
that a killed holder releases, `kill -9` in the middle of an evidence write leaves the old
record whole, and the next run removes the temporaries a killed writer left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from eliza.adapters.git import copy_working_tree
from eliza.core.evidence import Status
from eliza.core.layout import REPO_ROOT
from eliza.formats.evidence_json import read_records
from eliza.formats.files import remove_stale_temporaries, stale_temporaries
from tests.ci.helpers import seeded_cache
from tests.signing import write_signed
from tests.unit.test_evidence import make_record

ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}


def _spawn(code: str, *args: str, cwd: Path = REPO_ROOT) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=cwd,
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _read_until(child: subprocess.Popen[str], marker: str) -> list[str]:
    """Lines of the child's output up to the one containing marker (it must come)."""
    assert child.stdout is not None
    lines: list[str] = []
    for line in child.stdout:
        lines.append(line)
        if marker in line:
            return lines
    raise AssertionError(f"{marker!r} never came; output: {''.join(lines)}")


HOLD = """
    import sys
    from pathlib import Path
    from eliza.adapters import checkout_lock
    lock = {"checkout": checkout_lock.checkout_lock, "conan-home": checkout_lock.conan_home_lock}
    with lock[sys.argv[1]](Path(sys.argv[2]), sys.argv[3], print):
        print("acquired", flush=True)
        sys.stdin.read()  # until the parent closes stdin (or kills us)
    print("released", flush=True)
"""


def _hold(kind: str, where: Path, holder: str) -> subprocess.Popen[str]:
    """A process holding the lock of `kind` ("checkout" or "conan-home") on `where`."""
    return _spawn(HOLD, kind, str(where), holder)


def _nox_in(checkout: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "nox", *args],
        cwd=checkout,
        env={**ENV, "PYTHONPATH": str(checkout), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@contextmanager
def _killed_after() -> Iterator[list[subprocess.Popen[str]]]:
    """A list to put children in: whichever still runs at the end is killed and reaped."""
    children: list[subprocess.Popen[str]] = []
    try:
        yield children
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


def test_second_holder_waits_with_a_clear_message_until_kill_9_frees_the_lock(tmp_path: Path) -> None:
    with _killed_after() as children:
        first = _hold("checkout", tmp_path, "first session")
        children.append(first)
        _read_until(first, "acquired")
        second = _hold("checkout", tmp_path, "second session")
        children.append(second)
        waiting = "".join(_read_until(second, "waiting"))
        # who waits, for whom, and why
        assert "second session: waiting for the session that holds" in waiting
        assert f"pid {first.pid} (first session" in waiting
        assert "one at a time" in waiting
        first.send_signal(signal.SIGKILL)  # the holder dies without any cleanup
        first.wait()
        after = "".join(_read_until(second, "acquired"))
        assert "the lock is free" in after
        assert second.stdin is not None
        second.stdin.close()
        assert second.wait(timeout=60) == 0


def test_a_build_in_another_checkout_waits_for_the_conan_home_it_shares(tmp_path: Path) -> None:
    """Conan's cache is not safe for two processes at once: a build in a second checkout
    with the same cache waits for the first one's Conan, saying so, before Conan runs."""
    cache = seeded_cache(tmp_path / "cache")
    checkout = copy_working_tree(REPO_ROOT, tmp_path / "checkout")
    with _killed_after() as children:
        holder = _hold("conan-home", cache / "conan2", "build linux-cpu.none")
        children.append(holder)
        _read_until(holder, "acquired")
        build = _nox_in(checkout, "-s", "build-linux-cpu.none", env={"ELIZA_CACHE_DIR": str(cache)})
        children.append(build)
        said = "".join(_read_until(build, "waiting for the build"))
        assert f"waiting for the build that holds {cache / 'conan2' / '.eliza.lock'}" in said
        assert f"pid {holder.pid}" in said and "share a Conan home" in said
        assert not (cache / "conan2" / "profiles").exists()  # Conan has not run


def test_verify_waits_for_the_checkout_lock(tmp_path: Path) -> None:
    """The real session: a `nox -s verify` on a checkout whose lock is held says so and
    waits (it is killed while waiting: nothing of it ran)."""
    checkout = copy_working_tree(REPO_ROOT, tmp_path / "checkout")
    with _killed_after() as children:
        holder = _hold("checkout", checkout / "build", "nox -s verify")
        children.append(holder)
        _read_until(holder, "acquired")
        verify = _nox_in(checkout, "-s", "verify", "--", "--no-bench", "--cell", "linux-cpu.none", env={})
        children.append(verify)
        said = "".join(_read_until(verify, "waiting for the session"))
        lock = checkout / "build" / ".eliza.lock"
        assert f"nox -s verify: waiting for the session that holds {lock}" in said
        assert f"pid {holder.pid}" in said
        assert not (checkout / "build" / "evidence").exists()  # nothing written while waiting


WRITER = """
    import os, sys
    from pathlib import Path
    from eliza.formats import files
    from tests.signing import write_signed
    from tests.unit.test_evidence import make_record

    def stall(fd):  # the bytes are in the temporary; the rename has not happened
        print("mid-write", flush=True)
        sys.stdin.read()

    files.os.fsync = stall
    write_signed(Path(sys.argv[1]), make_record(cell="linux-cpu.none", check="build", reason="new"))
"""


def test_kill_9_in_the_middle_of_an_evidence_write(tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    old = write_signed(evidence, make_record(cell="linux-cpu.none", check="build", reason="old"))
    before = old.read_bytes()
    writer = _spawn(WRITER, str(evidence))
    try:
        _read_until(writer, "mid-write")
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    finally:
        if writer.poll() is None:
            writer.kill()
    # the record is the old one, whole; the killed writer's temporary is there
    assert old.read_bytes() == before
    leftovers = stale_temporaries(evidence)
    assert len(leftovers) == 1 and leftovers[0].name.startswith(f".{old.name}.{writer.pid}.")
    assert leftovers[0].stat().st_size > 0
    loaded = read_records([evidence], {})
    assert [(item.ok, item.record.reason if item.record else None) for item in loaded] == [(True, "old")]
    # the next run cleans it up
    assert remove_stale_temporaries([tmp_path]) == leftovers
    assert sorted(p.name for p in evidence.iterdir()) == [old.name]


def test_a_live_writers_temporary_is_not_stale(tmp_path: Path) -> None:
    mine = tmp_path / f".x__y.json.{os.getpid()}.abcd1234.tmp"
    mine.write_text("in progress", encoding="utf-8")
    other = tmp_path / "sub" / ".x__y.json.4194999.abcd1234.tmp"  # above pid_max: gone
    other.parent.mkdir()
    other.write_text("left behind", encoding="utf-8")
    unrelated = tmp_path / ".hidden.tmp"
    unrelated.write_text("not ours", encoding="utf-8")
    assert stale_temporaries(tmp_path) == [other]
    assert remove_stale_temporaries([tmp_path]) == [other]
    assert mine.exists() and unrelated.exists()


@pytest.mark.parametrize("target", ["report.json", "eliza-tiny.gguf"])
def test_atomic_temporaries_carry_the_writers_pid(tmp_path: Path, target: str) -> None:
    code = """
        import sys
        from pathlib import Path
        from eliza.formats import files
        files.os.fsync = lambda fd: (print("mid-write", flush=True), sys.stdin.read())
        files.os.replace = lambda a, b: (print("mid-write", flush=True), sys.stdin.read())
        if sys.argv[1].endswith(".gguf"):
            files.atomic_write_with(Path(sys.argv[2]) / sys.argv[1], lambda p: p.write_bytes(b"GGUF"))
        else:
            files.atomic_write_text(Path(sys.argv[2]) / sys.argv[1], "{}")
    """
    child = _spawn(code, target, str(tmp_path))
    try:
        _read_until(child, "mid-write")
        child.kill()
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    assert not (tmp_path / target).exists()
    assert [p.name.split(".")[-3] for p in stale_temporaries(tmp_path)] == [str(child.pid)]


def test_exclusive_removes_stale_temporaries_of_the_checkout(tmp_path: Path) -> None:
    checkout = copy_working_tree(REPO_ROOT, tmp_path / "checkout")
    stale = checkout / "build" / "report" / ".report.html.4194999.zz9_zz9.tmp"
    stale.parent.mkdir(parents=True)
    stale.write_text("<html", encoding="utf-8")
    code = """
        from eliza.app.services.exclusive import exclusive
        with exclusive("nox -s verify", print):
            print("inside", flush=True)
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=checkout,
        env={**ENV, "PYTHONPATH": str(checkout)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "removed 1 temporary file(s) an interrupted run left: build/report/.report.html" in done.stdout
    assert not stale.exists()
    assert json.dumps(done.stdout).count("inside") == 1


def test_kill_9_in_the_middle_of_a_build_then_the_next_build_recovers(
    library_path: Path, tmp_path: Path
) -> None:
    """A build session killed with its whole process group (Conan, CMake, Ninja, the
    compilers) in the middle of compiling the library: the next build in that checkout
    succeeds and gives the same bytes as an undisturbed build, and nothing half-written is
    left as evidence."""
    from eliza.formats.files import sha256_file

    checkout = copy_working_tree(REPO_ROOT, tmp_path / "checkout")
    argv = [sys.executable, "-m", "nox", "-s", "build-linux-cpu.none"]
    env = {**ENV, "PYTHONPATH": str(checkout)}
    build = subprocess.Popen(
        argv,
        cwd=checkout,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    objects = checkout / "build" / "linux-cpu" / "none" / "build"
    try:
        import time

        deadline = time.monotonic() + 900
        while build.poll() is None and time.monotonic() < deadline:
            if any(objects.rglob("*.o")):  # compiling has begun
                break
            time.sleep(0.2)
        assert build.poll() is None, "the build ended before it could be killed"
        os.killpg(build.pid, signal.SIGKILL)
        build.wait()
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
            build.wait()
    evidence = checkout / "build" / "evidence"
    # The build's records are written when it ends: the killed one left none, whole or
    # half-written (a temporary of an atomic write included).
    left = sorted(p.name for p in evidence.iterdir()) if evidence.is_dir() else []
    assert left == [], f"the killed build left evidence files: {left}"
    again = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=1800)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    rebuilt = checkout / "build" / "linux-cpu" / "none" / "build" / "libelizainference.so"
    assert sha256_file(rebuilt) == sha256_file(library_path)
    loaded = read_records([evidence], {})
    assert [item.problem for item in loaded if not item.ok] == []
    records = {(r.cell, r.check): r for r in (item.record for item in loaded) if r is not None}
    assert sorted(records) == [("linux-cpu.none", "abi"), ("linux-cpu.none", "build")]
    assert {key: r.status for key, r in records.items()} == dict.fromkeys(records, Status.PASSED)
    # the build record names the library the second build made, with its hash
    library = str(rebuilt.resolve().relative_to(checkout.resolve()))
    artifacts = {a.path: a.sha256 for a in records["linux-cpu.none", "build"].artifacts}
    assert artifacts.get(library) == sha256_file(rebuilt), artifacts
    assert not stale_temporaries(checkout / "build")
