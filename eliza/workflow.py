"""Compositions the nox sessions and the test fixtures call: load the matrix, decide what
this host can do, build cells, lay out the tiny bundle, generate text."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from eliza import conan
from eliza.build import CellBuildPlan, plan_cell_build
from eliza.matrix.model import Cell, Matrix
from eliza.paths import REPO_ROOT, tiny_bundle_dir

MATRIX_PATH = REPO_ROOT / "matrix.yaml"


@functools.cache
def load_project_matrix(path: Path = MATRIX_PATH) -> Matrix:
    from eliza.matrix.loader import load_matrix

    return load_matrix(path)


def plan_for(cell: Cell, matrix: Matrix, llama_version: str) -> CellBuildPlan:
    return plan_cell_build(
        cell,
        repo=REPO_ROOT,
        all_gate_options=tuple(g.conan_option for g in matrix.gates),
        llama_version=llama_version,
        with_test_kit=True,
    )


@dataclass(frozen=True, kw_only=True)
class BuiltCell:
    cell_id: str
    library: Path
    llama_built_now: bool
    seconds: float


def build_cells(cells: tuple[Cell, ...], matrix: Matrix, *, echo: bool = True) -> list[BuiltCell]:
    conan.prepare_conan_home(REPO_ROOT)
    source = conan.resolve_llama_source()
    built: list[BuiltCell] = []
    for cell in cells:
        result = conan.run_build(plan_for(cell, matrix, source.version), source, echo=echo)
        built.append(BuiltCell(cell_id=cell.id, library=result.library, llama_built_now=result.llama_binary == "Build",
                               seconds=result.seconds))
    return built


def ensure_cell_built(cell_id: str) -> BuiltCell:
    """Builds the cell (a no-op rebuild when nothing changed) and returns it."""
    matrix = load_project_matrix()
    return build_cells((matrix.cell(cell_id),), matrix, echo=False)[0]


def ensure_tiny_bundle(bundle_dir: Path | None = None) -> Path:
    from eliza.sources import vocab_gguf
    from eliza.tinymodel import write_tiny_bundle

    bundle = bundle_dir or tiny_bundle_dir()
    if not (bundle / "manifest.json").is_file():
        write_tiny_bundle(bundle, vocab_gguf())
    return bundle


def generate_text(library: Path, bundle: Path, prompt: str, max_tokens: int = 32) -> tuple[list[int], bytes]:
    from eliza.ffi import Library, greedy_config

    lib = Library(library)
    with lib.open_context(bundle) as ctx, ctx.open_stream(greedy_config(max_tokens)) as stream:
        stream.prefill(ctx.tokenize(prompt))
        return stream.generate()
