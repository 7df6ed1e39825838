"""Where a plan's libraries come from: `ConanBuilder` builds them here (a no-op when nothing
changed), `PrebuiltBuilder` takes them from a CI build job's unpacked artifact and
compiles nothing. Both implement eliza.app.executor.Builder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eliza.app.context import Context
from eliza.app.services.baseline import baseline_library
from eliza.app.services.build import build_cells, platform_env
from eliza.app.services.built import BuiltCell
from eliza.app.services.prebuilt import load_prebuilt
from eliza.core.layout import library_path
from eliza.core.matrix import Cell
from eliza.core.target import library_file


def located(ctx: Context, cell: Cell) -> Path:
    """Where a cell's library is once built; OSError when it is not there."""
    library = library_path(cell.id, ctx.project.repo, library_file(cell.platform))
    if not library.is_file():
        raise FileNotFoundError(f"{cell.id}: no library at {library} (build it: nox -s build-{cell.id})")
    return library


@dataclass(frozen=True, kw_only=True)
class ConanBuilder:
    ctx: Context
    verbose: bool = False

    def build(self, cell: Cell) -> BuiltCell:
        [built] = build_cells(
            (cell,),
            self.ctx.matrix,
            echo=self.verbose,
            on_progress=None if self.verbose else self.ctx.log,
        )
        return built

    def locate(self, cell: Cell) -> Path:
        return located(self.ctx, cell)

    def baseline(self, commit: str, cell: Cell) -> Path:
        library, built_now = baseline_library(commit, cell, platform_env(cell.platform))
        if built_now:
            self.ctx.log(f"baseline {commit[:12]}: built {library}")
        return library


@dataclass(frozen=True, kw_only=True)
class PrebuiltBuilder:
    """A CI check job: every library from the build job's artifact, nothing compiled."""

    ctx: Context

    def build(self, cell: Cell) -> BuiltCell:
        return load_prebuilt(cell)

    def locate(self, cell: Cell) -> Path:
        return load_prebuilt(cell).library

    def baseline(self, commit: str, cell: Cell) -> Path:
        library, _ = baseline_library(commit, cell, platform_env(cell.platform))
        return library
