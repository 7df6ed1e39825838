"""A gate is declared once in matrix.yaml; the native gate table and the Conan recipe
must name the same gates and options."""

from __future__ import annotations

import importlib.util
import re

from eliza.core.layout import REPO_ROOT
from eliza.formats.matrix_yaml import load_matrix

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")


def native_gate_table() -> dict[str, str]:
    text = (REPO_ROOT / "native" / "CMakeLists.txt").read_text()
    table = re.search(r"set\(ELIZA_GATE_TABLE\n(.*?)\n\)", text, flags=re.S)
    assert table, "ELIZA_GATE_TABLE not found in native/CMakeLists.txt"
    rows = [line.strip().strip('"').split("|") for line in table.group(1).splitlines() if line.strip()]
    for option, _gate, _factory, source in rows:
        assert (REPO_ROOT / "native" / source).is_file(), f"{option}: {source} does not exist"
    return {gate: option for option, gate, _factory, _source in rows}


def test_native_table_matches_the_matrix() -> None:
    assert native_gate_table() == {g.id: g.cmake_option for g in MATRIX.gates}


def test_conan_recipe_reads_its_options_from_the_matrix() -> None:
    spec = importlib.util.spec_from_file_location("eliza_conanfile", REPO_ROOT / "conanfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert {g.conan_option: g.cmake_option for g in MATRIX.gates} == module.GATES
    assert set(module.ElizaInferenceConan.options) == {g.conan_option for g in MATRIX.gates} | {
        "with_test_kit"
    }
