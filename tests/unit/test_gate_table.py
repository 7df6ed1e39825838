"""A gate is declared once in matrix.yaml: the Conan recipe passes exactly the matrix's
gates to CMake, and every gate has its factory file at the path CMake derives from its id."""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType

import pytest
import yaml

from eliza.core.build_plan import package_option_defaults
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import Gate
from eliza.formats.matrix_yaml import load_matrix, parse_matrix

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
BACKENDS = REPO_ROOT / "native" / "src" / "backends"


def conanfile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("eliza_conanfile", REPO_ROOT / "conanfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def c_name(gate_id: str) -> str:
    return gate_id.replace("-", "_")


@pytest.mark.parametrize("gate", MATRIX.gates, ids=lambda g: g.id)
def test_every_gate_has_its_factory_file(gate: Gate) -> None:
    source = BACKENDS / f"{gate.id}.cpp"
    assert source.is_file(), f"matrix.yaml gate {gate.id!r}: {source} is missing (docs/adding-a-gate.md)"
    assert re.fullmatch(r"[A-Za-z_]\w*", c_name(gate.id)), gate.id
    definition = rf"LlmBackendFactory\s*&\s*{c_name(gate.id)}_factory\s*\(\s*const\s+GateSpec\s*&"
    assert re.search(definition, source.read_text()), f"{source} does not define {c_name(gate.id)}_factory"


def test_no_factory_file_without_a_gate() -> None:
    assert sorted(p.stem for p in BACKENDS.glob("*.cpp")) == sorted(g.id for g in MATRIX.gates)


def test_conan_recipe_passes_the_matrix_gate_table() -> None:
    module = conanfile()
    rows = [
        (g.id, g.cmake_option, g.factory, str(g.preference_rank), ",".join(g.artifacts)) for g in MATRIX.gates
    ]
    cmake_table = module.cmake_gate_table(module.GATE_TABLE)
    assert [tuple(row.split("|")) for row in cmake_table.split(";")] == rows
    assert {g.conan_option: g.cmake_option for g in MATRIX.gates} == module.GATES
    assert set(module.ElizaInferenceConan.options) == {g.conan_option for g in MATRIX.gates} | {
        "with_test_kit",
        "sanitize",  # a build variant's sanitizers
        "with_cuda",  # llama.cpp's choices, which a consumer selects the binary by
        "with_vulkan",
        *{key for p in MATRIX.platforms for key in p.llama_options},
    }


def test_conan_recipe_applies_the_schema_defaults_like_the_loader() -> None:
    # A gate without preference_rank: the recipe's table and the loader must agree.
    text = (REPO_ROOT / "matrix.yaml").read_text()
    data = yaml.safe_load(text)
    for gate in data["gates"]:
        gate.pop("preference_rank", None)
    stripped = yaml.safe_dump(data, sort_keys=False)
    loaded = parse_matrix(stripped, "stripped.yaml")
    table = conanfile().gate_table(data)
    assert [row["preference_rank"] for row in table] == [g.preference_rank for g in loaded.gates]


def test_conan_recipe_refuses_a_field_cmake_cannot_carry() -> None:
    data = {"gates": [{**yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())["gates"][0]}]}
    data["gates"][0]["artifacts"] = ["text/a;b.bin"]
    with pytest.raises(ValueError, match=r"gates\[0\]\.artifacts\[0\]"):
        conanfile().gate_table(data)


def test_the_recipe_declares_the_package_defaults_eliza_installs_by() -> None:
    # A consumer names only the options that differ from these (release.json, the notes):
    # the recipe and eliza must agree on them, or the named ones would select another binary.
    declared = {k: str(v) for k, v in conanfile().ElizaInferenceConan.default_options.items()}
    declared.pop("with_test_kit")
    assert declared == package_option_defaults(MATRIX)
    assert declared["cpu_isa"] == MATRIX.platform("linux-cpu").llama_options["cpu_isa"]
    assert declared["arm_isa"] == MATRIX.platform("linux-arm64").llama_options["arm_isa"]


def test_an_instruction_set_is_an_option_only_on_its_architecture() -> None:
    arches = conanfile().LLAMA_CHOICE_ARCHES
    assert arches["cpu_isa"] == {"x86_64"} and arches["arm_isa"] == {"armv8"}
