"""Compositions the nox sessions and the test fixtures call: load the matrix, decide what
this host can do, build cells, lay out the tiny bundle, generate text."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from eliza import conan
from eliza.build import CellBuildPlan, plan_cell_build
from eliza.host import Capability, HostFacts, decide
from eliza.matrix.model import Cell, Matrix, Platform
from eliza.paths import REPO_ROOT, tiny_bundle_dir

# ELIZA_MATRIX points every session at another matrix file (e.g. a trimmed one for a branch).
MATRIX_PATH = Path(os.environ.get("ELIZA_MATRIX") or REPO_ROOT / "matrix.yaml")


class NotBuildableHere(RuntimeError):
    """This host lacks what a platform needs; the message says what and why."""


def _build_errors() -> tuple[type[BaseException], ...]:
    from eliza.conan import BuildError
    from eliza.cuda import CudaError
    from eliza.sources import SourceError

    return (BuildError, CudaError, SourceError)


# What a build can fail with, each carrying a message that names the cell and the log.
BUILD_ERRORS = _build_errors()


@functools.cache
def load_project_matrix(path: Path = MATRIX_PATH) -> Matrix:
    from eliza.matrix.loader import load_matrix

    return load_matrix(path)


@functools.cache
def host_facts() -> HostFacts:
    from eliza.host_probe import probe_host

    return probe_host()


def capability(platform: Platform) -> Capability:
    return decide(host_facts(), platform)


def plan_for(cell: Cell, matrix: Matrix, llama_version: str, env: dict[str, str]) -> CellBuildPlan:
    plan = plan_cell_build(
        cell,
        repo=REPO_ROOT,
        all_gate_options=tuple(g.conan_option for g in matrix.gates),
        llama_version=llama_version,
        with_test_kit=True,
    )
    return replace(plan, env=env)


@dataclass(frozen=True, kw_only=True)
class BuiltCell:
    cell_id: str
    library: Path
    llama_built_now: bool
    llama_package: Path
    llama_package_id: str
    seconds: float
    log: Path


def platform_env(platform: Platform) -> dict[str, str]:
    if platform.llama_backend == "cuda":
        from eliza.cuda import prepare_toolkit

        return prepare_toolkit().build_env()
    return {}


def build_cells(
    cells: tuple[Cell, ...],
    matrix: Matrix,
    *,
    echo: bool = True,
    on_built: Callable[[BuiltCell], None] | None = None,
) -> list[BuiltCell]:
    """Builds cells in order. Cells of one platform share one llama.cpp package: the first
    builds it if the Conan cache lacks it, the others reuse it."""
    for platform in {c.platform.id: c.platform for c in cells}.values():
        can = capability(platform)
        if not can.can_build:
            raise NotBuildableHere(f"{platform.id} cannot be built on this host: {can.build_reason}")
    conan.prepare_conan_home(REPO_ROOT)
    source = conan.resolve_llama_source()
    built: list[BuiltCell] = []
    envs: dict[str, dict[str, str]] = {}
    for cell in cells:
        env = envs.setdefault(cell.platform.id, platform_env(cell.platform))
        result = conan.run_build(plan_for(cell, matrix, source.version, env), source, echo=echo)
        done = BuiltCell(
            cell_id=cell.id,
            library=result.library,
            llama_built_now=result.llama_binary == "Build",
            llama_package=result.llama_package_folder,
            llama_package_id=result.llama_package_id,
            seconds=result.seconds,
            log=result.log,
        )
        built.append(done)
        if on_built:
            on_built(done)
    return built


def ensure_cell_built(cell_id: str) -> BuiltCell:
    """Builds the cell (a no-op rebuild when nothing changed) and returns it."""
    matrix = load_project_matrix()
    return build_cells((matrix.cell(cell_id),), matrix, echo=False)[0]


def describe_build(cell: BuiltCell) -> str:
    how = "built now" if cell.llama_built_now else "reused from the Conan cache"
    package = cell.llama_package_id[:12]
    return f"{cell.cell_id}: {cell.library} ({cell.seconds:.1f}s; llama.cpp {how}: package {package})"


def tiny_bundle_default() -> Path:
    return tiny_bundle_dir()


def ensure_tiny_bundle(bundle_dir: Path | None = None) -> Path:
    from eliza.sources import vocab_gguf
    from eliza.tinymodel import bundle_is_current, write_tiny_bundle

    bundle = bundle_dir or tiny_bundle_dir()
    if not bundle_is_current(bundle):
        write_tiny_bundle(bundle, vocab_gguf())
    return bundle


def generate_text(library: Path, bundle: Path, prompt: str, max_tokens: int = 32) -> tuple[list[int], bytes]:
    from eliza.ffi import Library, greedy_config

    lib = Library(library)
    with lib.open_context(bundle) as ctx, ctx.open_stream(greedy_config(max_tokens)) as stream:
        stream.prefill(ctx.tokenize(prompt))
        return stream.generate()
