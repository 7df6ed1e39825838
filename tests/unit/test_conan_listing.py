"""Which llama.cpp packages the Conan cache holds is listed once per state of the cache's
database: a verify with nothing to build does not start Conan to learn it again, and any
change to the cache (a package added or removed rewrites the database) lists again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from eliza.adapters import conan, proc
from eliza.core.matrix import Platform
from eliza.formats.matrix_yaml import load_matrix

ROOT = Path(__file__).resolve().parents[2]


def test_the_listing_is_remembered_until_the_cache_database_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    platform: Platform = load_matrix(ROOT / "matrix.yaml").platform("linux-cpu")
    database = conan.conan_home(tmp_path) / "p" / "cache.sqlite3"
    database.parent.mkdir(parents=True)
    database.write_bytes(b"state 1")
    options = dict(a.split(":", 1)[1].split("=", 1) for a in conan.llama_option_args(platform) if a != "-o")
    package = {"info": {"options": options}}
    listing = {"Local Cache": {"llama-cpp/1": {"revisions": {"r": {"packages": {"p": package}}}}}}
    calls: list[tuple[str, ...]] = []

    def fake_conan(cache: Path, *args: str, **_: object) -> proc.Completed:
        calls.append(args)
        return proc.Completed(argv=("conan", *args), returncode=0, stdout=json.dumps(listing), stderr="")

    monkeypatch.setattr(conan, "_conan", fake_conan)
    first = conan.cached_llama_variants(tmp_path, [platform], "1")
    assert first == {("linux-cpu", "none")} and len(calls) == 1
    assert conan.cached_llama_variants(tmp_path, [platform], "1") == first and len(calls) == 1
    database.write_bytes(b"state 2, another size")
    os.utime(database, ns=(1, 1))
    assert conan.cached_llama_variants(tmp_path, [platform], "1") == first and len(calls) == 2
    assert conan.cached_llama_variants(tmp_path, [platform], "2") == first and len(calls) == 3
