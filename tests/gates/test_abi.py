"""The seam lives below the ABI: every gate build has the no-gate build's ABI."""

from __future__ import annotations

from pathlib import Path

import pytest

from eliza.adapters.abi_tools import abidiff, exported_symbols, foreign_exports
from eliza.core.layout import TEST_KIT_NAME
from tests.gates.conftest import GATED_CELLS, NO_GATE_CELL, cell_id


@pytest.mark.parametrize("cell", GATED_CELLS, ids=cell_id)
def test_abidiff_reports_no_change_against_the_no_gate_build(
    cell: str, gate_libraries: dict[str, Path]
) -> None:
    diff = abidiff(gate_libraries[NO_GATE_CELL], gate_libraries[cell])
    assert not diff.tool_failed, diff.report
    assert diff.exit_code == 0, diff.report


def test_abidiff_sees_a_changed_export_list(gate_libraries: dict[str, Path]) -> None:
    # The check can fail: the test kit exports its eliza_testkit_* functions on top of the C ABI.
    shipped = gate_libraries[NO_GATE_CELL]
    kit = shipped.with_name(TEST_KIT_NAME)
    diff = abidiff(shipped, kit)
    assert not diff.tool_failed, diff.report
    assert diff.changed
    assert "eliza_testkit_select" in diff.report


def test_no_foreign_exports_in_any_gate_build(gate_libraries: dict[str, Path]) -> None:
    for cell, library in gate_libraries.items():
        symbols = exported_symbols(library)
        assert symbols and foreign_exports(symbols) == [], cell
