"""Shared fixtures. Native tests build (or reuse) the linux-cpu no-gate cell and the tiny
bundle through the same eliza functions the nox sessions use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eliza.adapters.ffi import Library


@pytest.fixture(scope="session")
def tiny_bundle() -> Path:
    from eliza.app.bundle import ensure_tiny_bundle

    return ensure_tiny_bundle()


@pytest.fixture(scope="session")
def library_path() -> Path:
    """The library of ELIZA_TEST_CELL (default linux-cpu.none): verify runs the native and
    selector suites once per cell this way."""
    from eliza.app.build import ensure_cell_built

    return ensure_cell_built(os.environ.get("ELIZA_TEST_CELL", "linux-cpu.none")).library


@pytest.fixture(scope="session")
def lib(library_path: Path):
    from eliza.adapters.ffi import Library

    return Library(library_path)


@pytest.fixture()
def ctx(lib: Library, tiny_bundle: Path):
    with lib.open_context(tiny_bundle) as context:
        yield context
