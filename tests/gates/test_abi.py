"""The seam lives below the ABI: every gate build has the no-gate build's ABI."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from eliza.adapters.abi_tools import abidiff, abidw, exported_symbols, foreign_exports
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


def test_an_abidw_dump_is_read_back_for_the_same_bytes_only(
    gate_libraries: dict[str, Path], tmp_path: Path
) -> None:
    library = tmp_path / "a" / "libelizainference.so"
    library.parent.mkdir()
    shutil.copy2(gate_libraries[NO_GATE_CELL], library)
    memo = tmp_path / "memo"
    dumped = abidw(library, memo=memo)
    assert "eliza_inference_" in dumped and abidw(library) == dumped  # the same as without a memo
    (kept,) = memo.glob("*.json")
    assert json.loads(kept.read_text())["dump"] == dumped
    marker = "<abi-corpus>read back</abi-corpus>"
    kept.write_text(json.dumps({"sha256": hashlib.sha256(marker.encode()).hexdigest(), "dump": marker}))
    copy = tmp_path / "b" / "libelizainference.so"  # the same bytes elsewhere: read back
    copy.parent.mkdir()
    shutil.copy2(library, copy)
    assert abidw(copy, memo=memo) == marker
    # A damaged memo (its text no longer has its digest, or cut short) is dumped again.
    for damaged in (json.dumps({"sha256": "0" * 64, "dump": marker}), kept.read_text()[:40]):
        kept.write_text(damaged)
        assert abidw(copy, memo=memo) == dumped
        assert json.loads(kept.read_text())["dump"] == dumped
    # Other bytes (another build): dumped, not read back.
    other = gate_libraries[
        next(c for c in GATED_CELLS if gate_libraries[c].read_bytes() != library.read_bytes())
    ]
    assert abidw(other, memo=memo) == abidw(other)
    assert len(list(memo.glob("*.json"))) == 2
