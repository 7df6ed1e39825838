"""sha256 remembered by file identity across invocations (IdentityHashes): a file nothing
rewrote is not read again; a rewrite (new size, mtime or inode) is hashed anew."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from eliza.formats import files
from eliza.formats.files import IdentityHashes


def test_a_file_is_hashed_once_per_identity_across_instances(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memo, lib = tmp_path / "memo.json", tmp_path / "lib.so"
    lib.write_bytes(b"one")
    read: list[Path] = []
    real = files.sha256_file

    def counting(path: Path) -> str:
        read.append(path)
        return real(path)

    monkeypatch.setattr(files, "sha256_file", counting)
    assert IdentityHashes(memo).sha256(lib) == hashlib.sha256(b"one").hexdigest()
    assert IdentityHashes(memo).sha256(lib) == hashlib.sha256(b"one").hexdigest()
    assert len(read) == 1
    lib.write_bytes(b"two")
    os.utime(lib, ns=(5, 5))
    assert IdentityHashes(memo).sha256(lib) == hashlib.sha256(b"two").hexdigest()
    assert len(read) == 2
    memo.write_text("not json")
    assert IdentityHashes(memo).sha256(lib) == hashlib.sha256(b"two").hexdigest()  # a bad memo costs a hash
    assert len(read) == 3
