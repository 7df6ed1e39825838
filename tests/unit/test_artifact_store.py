"""The store of the files evidence names (eliza.app.services.artifact_store): a check's
outputs under build/ are named by a copy of their bytes that no later run writes again;
build outputs (a library) are named where they are; copies no record names are collected."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from eliza.app.services import artifact_store
from eliza.app.services.recording import artifact
from eliza.core.layout import is_check_output
from eliza.formats.files import stale_temporaries


def test_a_check_output_is_named_by_a_copy_a_later_run_cannot_write(tmp_path: Path) -> None:
    junit = tmp_path / "build" / "junit" / "gates-linux-cpu.xml"
    junit.parent.mkdir(parents=True)
    junit.write_text("<testsuite tests='3'/>")
    first = artifact(junit, tmp_path)
    digest = hashlib.sha256(b"<testsuite tests='3'/>").hexdigest()
    assert (first.path, first.sha256) == (f"build/artifacts/{digest}/gates-linux-cpu.xml", digest)
    junit.write_text("<testsuite tests='4'/>")  # another cell's run writes the shared file again
    assert (tmp_path / first.path).read_text() == "<testsuite tests='3'/>"
    second = artifact(junit, tmp_path)
    assert second.path != first.path and (tmp_path / second.path).read_text() == "<testsuite tests='4'/>"
    junit.write_text("<testsuite tests='3'/>")  # the same bytes again: the same copy
    assert artifact(junit, tmp_path) == first
    assert not stale_temporaries(tmp_path / "build") and not [
        p for p in (tmp_path / "build" / "artifacts").iterdir() if p.is_file()
    ]


def test_build_outputs_and_sources_are_named_where_they_are(tmp_path: Path) -> None:
    library = tmp_path / "build" / "linux-cpu" / "none" / "build" / "libelizainference.so"
    baseline = tmp_path / "build" / "baseline" / "808e7c1" / "linux-cpu-85d5" / "build" / "lib.so"
    cases = tmp_path / "native" / "cases" / "selector.cases"
    for path in (library, baseline, cases):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"\x7fELF")
        assert artifact(path, tmp_path).path == path.relative_to(tmp_path).as_posix()
    assert not (tmp_path / "build" / "artifacts").exists()
    assert is_check_output(
        tmp_path / "build" / "baseline" / "808e7c1" / "linux-cpu-85d5" / "bench-1.jsonl", tmp_path
    )
    assert not is_check_output(tmp_path / "build" / "report.json", tmp_path)  # not in a check's folder


def test_copies_no_record_names_are_collected(tmp_path: Path) -> None:
    outputs = tmp_path / "build" / "bench" / "linux-cpu" / "none"
    outputs.mkdir(parents=True)
    named = []
    for name, text in (("ffi.jsonl", "a"), ("reference.jsonl", "b"), ("ffi.jsonl", "c")):
        (outputs / name).write_text(text)
        named.append(artifact(outputs / name, tmp_path).path)
    removed = artifact_store.collect(tmp_path, named[1:])  # the first record was written again
    assert [p.relative_to(tmp_path).as_posix() for p in removed] == [named[0]]
    assert not (tmp_path / named[0]).parent.exists()  # its folder too
    assert all((tmp_path / p).is_file() for p in named[1:])
    assert (
        artifact_store.collect(tmp_path, [str(tmp_path / p) for p in named[1:]]) == []
    )  # absolute names too
    assert artifact_store.collect(tmp_path, []) and not list((tmp_path / "build" / "artifacts").iterdir())


def test_a_killed_copy_leaves_only_a_temporary_the_crash_cleanup_removes(tmp_path: Path) -> None:
    store = tmp_path / "build" / "artifacts"
    store.mkdir(parents=True)
    dead = 2**22 + 12345  # no such process
    left = store / f".ffi.jsonl.{dead}.abc123.tmp"
    left.write_text("half")
    assert os.path.basename(left) in {p.name for p in stale_temporaries(tmp_path / "build")}
    assert artifact_store.collect(tmp_path, []) == [] and left.is_file()  # not the store's to remove
