"""Which inputs each check's fingerprint depends on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from eliza.core.fingerprint import InputHashes, fingerprint_for
from eliza.core.layout import REPO_ROOT
from eliza.core.outcome import CaseResult, cases_of_cell
from eliza.formats.files import tree_hash
from eliza.formats.matrix_yaml import load_matrix

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
HASHES = InputHashes(
    native="n1",
    recipes="r1",
    bundle="b1",
    prompts="p1",
    selector_tests="s1",
    gate_tests="g1",
    bench="e1",
    llama_source="0.3.36",
    tools={
        "compiler": "12",
        "cmake": "3.25",
        "conan": "2",
        "ninja": "1.11",
        "nvcc": "13.0",
        "abidiff": "2.2",
    },
)


def key(cell_id: str, check_id: str, hashes: InputHashes = HASHES, baseline: str = "") -> str:
    return fingerprint_for(MATRIX.cell(cell_id), MATRIX.check(check_id), hashes, baseline).key


def test_same_inputs_same_key_and_native_change_makes_every_check_stale() -> None:
    changed = replace(HASHES, native="n2")
    for check in ("build", "selector", "byte-identity-reference", "abi"):
        assert key("linux-cpu.none", check) == key("linux-cpu.none", check)
        assert key("linux-cpu.none", check) != key("linux-cpu.none", check, changed)


def test_inputs_a_check_does_not_read_leave_it_fresh() -> None:
    prompts_changed = replace(HASHES, prompts="p2")
    assert key("linux-cpu.none", "build") == key("linux-cpu.none", "build", prompts_changed)
    assert key("linux-cpu.none", "byte-identity-reference") != key(
        "linux-cpu.none", "byte-identity-reference", prompts_changed
    )
    abidiff_changed = replace(HASHES, tools={**HASHES.tools, "abidiff": "2.3"})
    assert key("linux-cpu.none", "abi") != key("linux-cpu.none", "abi", abidiff_changed)
    assert key("linux-cpu.none", "build") == key("linux-cpu.none", "build", abidiff_changed)


def test_llama_source_is_a_part_of_every_check() -> None:
    fork = replace(HASHES, llama_source="fork.0123456789abcdef")
    for check in ("build", "selector", "gate-fallthrough", "byte-identity-reference", "abi"):
        assert key("linux-cpu.none", check) != key("linux-cpu.none", check, fork)


def test_matrix_entries_and_baseline_are_parts() -> None:
    gated = next(c.id for c in MATRIX.cells_of("linux-cpu") if c.gates)
    assert key("linux-cpu.none", "build") != key(gated, "build")
    assert key("linux-cpu.none", "byte-identity-baseline", baseline="a") != key(
        "linux-cpu.none", "byte-identity-baseline", baseline="b"
    )
    nvcc_changed = replace(HASHES, tools={**HASHES.tools, "nvcc": "13.1"})
    assert key("linux-cuda.none", "build") != key("linux-cuda.none", "build", nvcc_changed)
    assert key("linux-cpu.none", "build") == key("linux-cpu.none", "build", nvcc_changed)


def test_tree_hash_follows_content(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("one")
    first = tree_hash(tmp_path, ["d"])
    (tmp_path / "d" / "a.txt").write_text("two")
    assert tree_hash(tmp_path, ["d"]) != first
    (tmp_path / "d" / "a.txt").write_text("one")
    assert tree_hash(tmp_path, ["d"]) == first


def test_cases_are_attributed_to_their_cell() -> None:
    cells = ["p.none", "p.npu", "p.npu+xla"]
    cases = [
        CaseResult(name=n, passed=True, skipped=False, message="")
        for n in (
            "t::a[cell=p.npu]",
            "t::b[x-cell=p.npu+xla]",
            "t::c[cell=p.npu-y]",
            "t::platform_wide",
        )
    ]
    assert [c.name for c in cases_of_cell(cases, "p.none", cells)] == []  # no case of its own
    assert [c.name for c in cases_of_cell(cases, "p.npu", cells)] == [
        "t::a[cell=p.npu]",
        "t::c[cell=p.npu-y]",
        "t::platform_wide",
    ]
    assert [c.name for c in cases_of_cell(cases, "p.npu+xla", cells)] == [
        "t::b[x-cell=p.npu+xla]",
        "t::platform_wide",
    ]
