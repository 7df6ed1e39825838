from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eliza.core.layout import TEST_KIT_NAME
from tests.selector.kit import TestKit


@pytest.fixture(scope="session")
def testkit_library(library_path: Path) -> Path:
    path = library_path.with_name(TEST_KIT_NAME)
    assert path.is_file(), f"{path} missing: the cell was built without the test kit"
    return path


@pytest.fixture()
def kit(testkit_library: Path) -> Iterator[TestKit]:
    kit = TestKit(testkit_library)
    kit.clear()
    yield kit
    kit.clear()
