"""Shared fixtures. Native tests build (or reuse) the cell of ELIZA_TEST_CELL and the tiny
bundle through the same eliza functions the nox sessions use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eliza.adapters.ffi import Context, Library
from tests.selection import test_cell, test_cells, test_platform

# Checked as the suites load, before anything is collected or built.
TEST_CELL = test_cell()
test_cells(test_platform())


@pytest.fixture(scope="session")
def tiny_bundle() -> Path:
    from eliza.app.services.bundle import ensure_tiny_bundle

    return ensure_tiny_bundle()


@pytest.fixture(scope="session")
def library_path() -> Path:
    """The library of ELIZA_TEST_CELL (default: the first no-gate cell): verify runs the
    native and selector suites once per cell this way."""
    from eliza.app.services.build import ensure_cell_built

    return ensure_cell_built(TEST_CELL).library


@pytest.fixture(scope="session")
def lib(library_path: Path) -> Library:
    return Library(library_path)


@pytest.fixture()
def ctx(lib: Library, tiny_bundle: Path) -> Iterator[Context]:
    with lib.open_context(tiny_bundle) as context:
        yield context
