"""The file helpers every writer and hasher shares: atomic writes, file and tree hashes.

Readers of what we write (a report rendered while checks still run, a CI upload, a
second session) must see the old file or the new one, never a torn one; and every
content hash of the project is computed the same way, so two hashes of one tree agree.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from eliza.core import weight_cache

# Never part of a source tree's content: written by tools inside the tree.
_IGNORED_NAMES = frozenset({"CMakeUserPresets.json", "__pycache__", ".pytest_cache"})
# Nor of a bundle's: a runtime's own cache beside its model (LiteRT-LM's packed weights,
# eliza.core.weight_cache), which its first run writes.
_IGNORED_SUFFIXES = (weight_cache.SUFFIX,)


TEMP_SUFFIX = ".tmp"
# A temporary of an atomic write: ".<target name>.<pid of the writer>.<random>.tmp".
_TEMPORARY = re.compile(r"^\.(?P<target>.+)\.(?P<pid>[0-9]+)\.[A-Za-z0-9_]+\.tmp$")


def _temporary_prefix(path: Path) -> str:
    return f".{path.name}.{os.getpid()}."


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def stale_temporaries(directory: Path) -> list[Path]:
    """Temporaries of atomic writes under `directory` whose writer is gone (killed in the
    middle of a write: `kill -9`, a power cut). Symbolic links are not followed."""
    found: list[Path] = []
    if not directory.is_dir():
        return found
    for root, dirs, files in os.walk(directory, followlinks=False):
        dirs[:] = sorted(dirs)
        for name in sorted(files):
            match = _TEMPORARY.match(name)
            if match and not _process_alive(int(match["pid"])):
                found.append(Path(root) / name)
    return found


def remove_stale_temporaries(directories: Iterable[Path]) -> list[Path]:
    """Removes what `stale_temporaries` finds; returns the paths removed. The targets
    themselves are whole (the old file or the new one): a rename is the only way in."""
    removed: list[Path] = []
    for directory in directories:
        for tmp in stale_temporaries(directory):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
                removed.append(tmp)
    return removed


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write via a private temporary file in the same directory, fsync, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=_temporary_prefix(path), suffix=TEMP_SUFFIX)
    tmp = Path(tmp_name)
    try:
        # mkstemp creates 0600; evidence and reports are shared (CI artifacts, a web server),
        # so keep an existing file's mode or use the usual 0644.
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_directory(path.parent)
    return path


def file_identity(path: Path) -> tuple[int, int, int]:
    """(size, modification time in ns, inode): what tells a file's bytes changed without
    reading them (a rewrite gets a new mtime, an atomic replace a new inode)."""
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


def remembered_sha256(path: Path, memo: Path) -> str:
    """The file's sha256, hashed once per file identity (size, mtime, inode): `memo` (a JSON
    file) keeps what was hashed, so a pin of a few hundred MB that nothing rewrote is
    checked without reading it again. A file that changed in any of the three is hashed
    anew; a memo that cannot be read or written only costs the hash."""
    key = str(path.resolve())
    identity = list(file_identity(path))
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    entry = known.get(key)
    if isinstance(entry, list) and len(entry) == 4 and entry[:3] == identity:
        return str(entry[3])
    digest = sha256_file(path)
    known[key] = [*identity, digest]
    with contextlib.suppress(OSError):
        atomic_write_text(memo, json.dumps(known, sort_keys=True) + "\n")
    return digest


# The file in the project's cache that remembers sha256 by file identity (IdentityHashes,
# remembered_sha256): the bundle pins and the artifacts the evidence names.
HASH_MEMO = "sha256-by-identity.json"


class IdentityHashes:
    """remembered_sha256 for many files of one invocation: the memo is read once, and written
    again only when a file had to be hashed. Threads may share one."""

    def __init__(self, memo: Path) -> None:
        self._memo = memo
        self._known: dict[str, list[object]] | None = None
        self._lock = threading.Lock()

    def sha256(self, path: Path) -> str:
        key = str(path.resolve())
        identity: list[object] = list(file_identity(path))
        with self._lock:
            if self._known is None:
                try:
                    loaded = json.loads(self._memo.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    loaded = {}
                self._known = loaded if isinstance(loaded, dict) else {}
            entry = self._known.get(key)
            if isinstance(entry, list) and len(entry) == 4 and entry[:3] == identity:
                return str(entry[3])
        digest = sha256_file(path)
        with self._lock:
            assert self._known is not None
            self._known[key] = [*identity, digest]
            with contextlib.suppress(OSError):
                atomic_write_text(self._memo, json.dumps(self._known, sort_keys=True) + "\n")
        return digest


def atomic_write_text(path: Path, text: str) -> Path:
    """UTF-8 text with "\\n" line ends, written as `atomic_write_bytes` does."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_with(path: Path, write: Callable[[Path], None]) -> Path:
    """For writers that need a path (a GGUF writer): `write` fills a temporary file beside
    `path`, which then replaces it; on failure nothing is left behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=_temporary_prefix(path), suffix=TEMP_SUFFIX)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return path


def atomic_write_directory(path: Path, fill: Callable[[Path], None]) -> Path:
    """For outputs read as one whole of several files (a weights directory and the record of
    what it was made from): `fill` writes them into a private temporary directory beside
    `path`, which then takes its place. A reader sees the old directory or the new one (or,
    for the instant between two renames, none), never a mix; a failed `fill` leaves nothing
    behind, and the temporaries of a writer that was killed are removed by the next write of
    the same target. `path` itself must be a directory or absent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in _stale_directory_temporaries(path):
        with contextlib.suppress(FileNotFoundError):
            _remove_tree(stale)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=_temporary_prefix(path), suffix=TEMP_SUFFIX))
    old: Path | None = None
    try:
        fill(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes 0700; the directory is shared like any output
        _fsync_directory(tmp)
        if path.is_dir() and not path.is_symlink():
            # POSIX rename replaces an empty directory only: the old one steps aside first.
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=_temporary_prefix(path), suffix=TEMP_SUFFIX))
            os.replace(path, old)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old, path)
                old = None
                raise
        else:
            os.replace(tmp, path)
    except BaseException:
        for leftover in (tmp, old):
            if leftover is not None:
                with contextlib.suppress(FileNotFoundError):
                    _remove_tree(leftover)
        raise
    _fsync_directory(path.parent)
    if old is not None:
        _remove_tree(old)
    return path


def _stale_directory_temporaries(path: Path) -> list[Path]:
    found: list[Path] = []
    try:
        entries = sorted(path.parent.iterdir())
    except FileNotFoundError:
        return found
    for entry in entries:
        match = _TEMPORARY.match(entry.name)
        if (
            match
            and match["target"] == path.name
            and entry.is_dir()
            and not entry.is_symlink()
            and not _process_alive(int(match["pid"]))
        ):
            found.append(entry)
    return found


def _remove_tree(root: Path) -> None:
    # The formats layer may not import shutil (it runs nothing); a tree of plain files and
    # folders is all an atomic directory write ever leaves. Links are removed, not followed.
    for current, dirs, files in os.walk(root, topdown=False, followlinks=False):
        for name in files:
            os.unlink(os.path.join(current, name))
        for name in dirs:
            child = os.path.join(current, name)
            if os.path.islink(child):
                os.unlink(child)
            else:
                os.rmdir(child)
    os.rmdir(root)


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable on POSIX; not supported everywhere, and not needed
    # for correctness of readers, so failures are ignored.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_hash(
    root: Path,
    entries: Iterable[str],
    exclude: Iterable[str] = (),
    *,
    file_sha256: Callable[[Path], str] = sha256_file,
) -> str:
    """sha256 over (relative path, content hash) of every file under the given entries of
    root, in path order; an entry may be a file or a directory, a missing one adds nothing.
    `exclude`: folders (relative to root) left out, with everything under them.
    `file_sha256`: how a file's hash is had (a memo of hashes by file identity, for large files)."""
    digest = hashlib.sha256()
    left_out = tuple(Path(e).parts for e in exclude)
    for entry in sorted(entries):
        base = root / entry
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for f in files:
            relative = f.relative_to(root)
            if _IGNORED_NAMES.intersection(relative.parts) or relative.name.endswith(_IGNORED_SUFFIXES):
                continue
            if any(relative.parts[: len(parts)] == parts for parts in left_out):
                continue
            digest.update(relative.as_posix().encode() + b"\0")
            digest.update(bytes.fromhex(file_sha256(f)))
    return digest.hexdigest()
