"""A build job's cells as its check jobs take them: a cell packed with its manifest loads
only as the manifest says, and a cell the build job could not build travels as a note of
why, which loading it reports (as a tool error: its checks record it as theirs)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from eliza.adapters import conan_remote
from eliza.adapters.errors import ToolError
from eliza.app import project as project_module
from eliza.app.project import Project
from eliza.app.services import prebuilt
from eliza.app.services.built import BuiltCell
from eliza.core.layout import REPO_ROOT, cell_build_dir, library_path
from eliza.core.target import library_file
from eliza.formats.matrix_yaml import load_matrix

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
BUILT, BROKEN = MATRIX.cells_of("linux-cpu")[:2]
LLAMA = conan_remote.LlamaBinary(ref="llama-cpp/1#r", package_id="p" * 40, binary="Build")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    here = Project.from_environment({}, repo=tmp_path / "build-job")
    monkeypatch.setattr(prebuilt, "current", lambda: here)
    monkeypatch.setattr(project_module, "current", lambda: here)
    return here.repo


def _build(repo: Path) -> Path:
    library = library_path(BUILT.id, repo, library_file(BUILT.platform))
    library.parent.mkdir(parents=True)
    library.write_bytes(b"\x7fELF the library")
    (library.parent / "build-info.json").write_text("{}")
    done = BuiltCell(
        cell_id=BUILT.id,
        library=library,
        llama_built_now=True,
        llama_package=Path(),
        llama_package_id=LLAMA.package_id,
        seconds=1.0,
        log=library,
    )
    prebuilt.write_manifest(done, BUILT, repo, LLAMA)
    prebuilt.write_failure_note(BROKEN, repo, "BuildError: mlx_backend.cpp:12: error: planted")
    return prebuilt.pack_cells([BUILT], repo, repo / "out" / "cells-linux-cpu.tar.gz", failed=[BROKEN])


def test_a_cell_that_did_not_build_travels_as_why(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _build(repo)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert str((cell_build_dir(BROKEN.id, repo) / prebuilt.FAILED_NOTE).relative_to(repo)) in names
    assert not any(
        n.startswith(str(cell_build_dir(BROKEN.id, repo).relative_to(repo)) + "/build") for n in names
    )

    check_job = Project.from_environment({}, repo=tmp_path / "check-job")
    monkeypatch.setattr(prebuilt, "current", lambda: check_job)
    prebuilt.unpack_cells(archive.parent, check_job.repo, lambda _: None)
    assert prebuilt.load_prebuilt(BUILT).library.read_bytes() == b"\x7fELF the library"
    with pytest.raises(prebuilt.PrebuiltError, match=r"could not build it: BuildError: .*planted"):
        prebuilt.load_prebuilt(BROKEN)
    assert issubclass(prebuilt.PrebuiltError, ToolError)  # the executor makes it the checks' error


def test_a_cell_not_as_the_manifest_says_is_refused(repo: Path) -> None:
    _build(repo)
    library = library_path(BUILT.id, repo, library_file(BUILT.platform))
    library.write_bytes(b"\x7fELF another library")
    with pytest.raises(prebuilt.PrebuiltError, match="differs from the build job's manifest"):
        prebuilt.load_prebuilt(BUILT)


def test_a_cell_that_builds_again_loses_its_failure_note(repo: Path) -> None:
    _build(repo)
    note = cell_build_dir(BROKEN.id, repo) / prebuilt.FAILED_NOTE
    assert note.is_file()
    library = library_path(BROKEN.id, repo, library_file(BROKEN.platform))
    library.parent.mkdir(parents=True)
    library.write_bytes(b"\x7fELF")
    done = BuiltCell(
        cell_id=BROKEN.id, library=library, llama_built_now=False, llama_package=Path(),
        llama_package_id=LLAMA.package_id, seconds=1.0, log=library,
    )  # fmt: skip
    prebuilt.write_manifest(done, BROKEN, repo, LLAMA)
    assert not note.exists()
    assert prebuilt.load_prebuilt(BROKEN).library == library
