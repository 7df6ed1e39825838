"""The FFI's backend branch of every stream function, driven through the test kit's fake
backend: native/cases/seam.cases, one case a test (case_runner runs the same table on a
target)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eliza.adapters.ffi import STATUS_NAMES, ElizaError
from eliza.core.layout import REPO_ROOT
from eliza.formats.case_tables import SEAM_TABLE, SeamCase, parse_seam_table
from tests.selector.kit import TestKit

CASES = parse_seam_table((REPO_ROOT / SEAM_TABLE).read_text(encoding="utf-8"), str(SEAM_TABLE))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_seam_case_table(kit: TestKit, case: SeamCase, tmp_path: Path) -> None:
    with kit.seam_case(case, tmp_path / "slot.bin") as run:
        for number, step in enumerate(case.steps, start=1):
            why = step.judge(run.step(step), STATUS_NAMES)
            assert why == "", f"step {number}: {why}"


def test_every_stream_function_has_a_backend_case() -> None:
    """Each function of the seam is called by some case, and reset_keep's fallback is
    driven by both ways a backend can break it."""
    calls = {s.call for c in CASES for s in c.steps}
    assert {
        "prefill",
        "next",
        "cancel-during-next",
        "reset",
        "reset_keep",
        "save_slot",
        "restore_slot",
    } <= calls
    assert "close" in calls
    sessions = {w for c in CASES for w in c.session.split()}
    assert {"keep=fail", "keep=overcount", "next=block", "slots=file"} <= sessions


def test_a_session_spec_the_kit_cannot_read_is_refused(kit: TestKit) -> None:
    with pytest.raises(ElizaError) as err:
        kit.register_fake_session("typo", "keep=sometimes")
    assert "session spec word 'keep=sometimes'" in err.value.message
    assert "typo" not in kit.registered()


def test_the_fake_backend_is_not_in_the_shipped_library(library_path: Path) -> None:
    """The kit's fake (its code and its hooks) is linked into the kit alone."""
    shipped = library_path.resolve().read_bytes()
    assert b"eliza_testkit_" not in shipped
    assert b"fake session: " not in shipped and b"fake slot" not in shipped
