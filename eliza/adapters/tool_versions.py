"""What a program said to `--version`, remembered per executable file, so every session does
not start a JVM (`javac --version`) or another runtime only to hear the same answer.

An answer is kept under the program's path as found, its resolved file, that file's identity
(device, inode, size, modification and change times) and the arguments: a reinstalled,
upgraded or rebuilt program is a new file, and is asked again. Only a native executable
(ELF) whose resolved file has the name it was called by is remembered. A script can
dispatch elsewhere without its own file changing (a pyenv shim, a wrapper exec-ing another
toolkit), and so can a binary called by another name (a ccache masquerade link, a
multi-call binary); both are always asked. Only an exit status of 0 is remembered.

The memo is one JSON file in the project's cache; a missing, unreadable or foreign file is
an empty memo, and a write that fails leaves the next session to ask again.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from eliza.formats.files import atomic_write_text

FORMAT = "eliza-tool-versions/1"
_ELF = b"\x7fELF"

Ask = Callable[[list[str]], tuple[int, str]]  # a version question: argv -> (status, output)


def program_identity(called: str) -> list[object] | None:
    """[path as called, resolved file, its device, inode, size, mtime and ctime] of a native
    executable known by its own name; None for a script, a renamed link or a missing file
    (what a program of that path answers can then change without its file changing)."""
    try:
        real = os.path.realpath(called)
        if os.path.basename(real) != os.path.basename(called):
            return None
        with open(real, "rb") as f:
            if f.read(4) != _ELF:
                return None
            st = os.fstat(f.fileno())
    except OSError:
        return None
    return [called, real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _identity(argv: Sequence[str]) -> str | None:
    """The memo key of running argv, or None when its answer must not be remembered."""
    program = program_identity(argv[0])
    return None if program is None else json.dumps([*program, *argv[1:]])


def _still_there(key: str) -> bool:
    """Whether the file an answer was heard from is still that file (else the answer goes)."""
    try:
        heard = json.loads(key)[:7]
    except ValueError:
        return False
    return bool(heard) and program_identity(str(heard[0])) == heard


class ToolVersions:
    """Answers of programs to their version flags, read from and saved to `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._answers = self._read()  # key -> output; only exit status 0 is remembered
        self._new: dict[str, str] = {}

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        answers = data.get("answers") if isinstance(data, dict) and data.get("format") == FORMAT else None
        if not isinstance(answers, dict):
            return {}
        return {key: output for key, output in answers.items() if isinstance(output, str)}

    def ask(self, argv: list[str], run: Ask) -> tuple[int, str]:
        """`run(argv)`'s (exit status, output), from the memo when argv's program is the same
        file that answered before. Safe to call from several threads."""
        key = _identity(argv)
        if key is not None:
            with self._lock:
                known = self._answers.get(key)
            if known is not None:
                return 0, known
        rc, output = run(argv)
        if key is not None and rc == 0:
            with self._lock:
                self._answers[key] = self._new[key] = output
        return rc, output

    def save(self) -> None:
        """Writes the answers heard this time beside those another session saved meanwhile."""
        with self._lock:
            if not self._new:
                return
            merged = {k: v for k, v in {**self._read(), **self._new}.items() if _still_there(k)}
            self._new = {}
        text = json.dumps(
            {"format": FORMAT, "answers": dict(sorted(merged.items()))},
            indent=1,
        )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, text + "\n")
        except OSError:
            pass  # the next session asks again
