"""The CI build job past a cell that does not build: the other cells are built, packed and
their llama.cpp binaries (a sanitizer variant's too) uploaded; the failed cell travels as
a note of why; then the job fails, naming it."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from eliza.adapters import conan_remote
from eliza.adapters.conan import BuildError
from eliza.app import project as project_module
from eliza.app.context import Context
from eliza.app.errors import BuildFailed
from eliza.app.project import Project, host_facts, load_project_matrix
from eliza.app.services import build as build_service
from eliza.app.services import prebuilt
from eliza.app.services.built import BuiltCell
from eliza.app.sessions import ci
from eliza.core.binary_remote import URL_VARIABLE, remote_from_env
from eliza.core.layout import cell_build_dir, library_path
from eliza.core.matrix import Cell, Matrix
from eliza.core.target import library_file

MATRIX = load_project_matrix()
CELLS = MATRIX.cells_of("linux-cpu")
BROKEN = next(c for c in CELLS if c.key != "none" and c.variant is None)


def _package_id(cell: Cell) -> str:
    """The sanitizer variant links a llama.cpp of its own."""
    return ("a" if cell.variant is None else "b") * 40


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Context, list[str], list[str]]:
    here = Project.from_environment({}, repo=tmp_path)
    monkeypatch.setattr(project_module, "current", lambda: here)
    monkeypatch.setattr(prebuilt, "current", lambda: here)
    remote = remote_from_env({URL_VARIABLE: "http://127.0.0.1:9"})
    monkeypatch.setattr(build_service, "binary_remote", lambda: remote)

    def build_cells(
        cells: tuple[Cell, ...],
        matrix: Matrix,
        *,
        on_built: Callable[[BuiltCell], None],
        on_progress: Callable[[str], None],
        on_failed: Callable[[Cell, BaseException], None],
    ) -> list[BuiltCell]:
        built = []
        for cell in cells:
            if cell.id == BROKEN.id:
                on_failed(cell, BuildError(f"{cell.id}: mlx_module.cpp:12: error: planted"))
                continue
            library = library_path(cell.id, tmp_path, library_file(cell.platform))
            library.parent.mkdir(parents=True)
            library.write_bytes(b"\x7fELF " + cell.id.encode())
            built.append(
                BuiltCell(
                    cell_id=cell.id,
                    library=library,
                    llama_built_now=True,
                    llama_package=Path(),
                    llama_package_id=_package_id(cell),
                    seconds=1.0,
                    log=library.parent / "conan-build.log",
                )
            )
        return built

    def built_llama(output: Path) -> conan_remote.LlamaBinary:
        cell = next(
            c for c in CELLS if output == library_path(c.id, tmp_path, library_file(c.platform)).parent
        )
        return conan_remote.LlamaBinary(ref="llama-cpp/1#r", package_id=_package_id(cell), binary="Build")

    uploaded: list[str] = []
    monkeypatch.setattr(ci, "build_cells", build_cells)
    monkeypatch.setattr(conan_remote, "built_llama", built_llama)
    monkeypatch.setattr(
        conan_remote, "upload_llama", lambda b, cache, r: uploaded.append(b.package_id) or "up"
    )
    lines: list[str] = []
    ctx = Context(project=here, matrix=MATRIX, host=host_facts(), log=lines.append)
    return ctx, lines, uploaded


def test_a_cell_that_fails_to_build_leaves_the_others_packed_and_fails_the_job(
    job: tuple[Context, list[str], list[str]], tmp_path: Path
) -> None:
    ctx, lines, uploaded = job
    with pytest.raises(
        BuildFailed, match=rf"1 of {len(CELLS)} cell\(s\) of linux-cpu failed to build: {BROKEN.id}\."
    ):
        ci.run_build(ci.CiBuildOptions(platform="linux-cpu", out=Path("out")), ctx)
    assert any(line.startswith(f"{BROKEN.id}: build failed; the other cells build on") for line in lines)
    with tarfile.open(tmp_path / "out" / "cells-linux-cpu.tar.gz") as tar:
        names = set(tar.getnames())
    for cell in CELLS:
        folder = str(cell_build_dir(cell.id, tmp_path).relative_to(tmp_path))
        if cell.id == BROKEN.id:
            assert (
                f"{folder}/{prebuilt.FAILED_NOTE}" in names and f"{folder}/{prebuilt.MANIFEST}" not in names
            )
        else:
            assert f"{folder}/{prebuilt.MANIFEST}" in names
    # every distinct llama.cpp the built cells link goes to the remote, once
    assert sorted(uploaded) == sorted({_package_id(c) for c in CELLS if c.id != BROKEN.id})
    assert len(uploaded) == 2
