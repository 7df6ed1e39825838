"""What a consumer types to get a cell's package (only the options that differ from the
package's defaults, no profile of eliza's), and what the release says about the license."""

from __future__ import annotations

import json
from pathlib import Path

from eliza.adapters.conan_package import consumer_arguments
from eliza.core import release
from eliza.core.build_plan import package_option_defaults, plan_cell_build
from eliza.core.layout import REPO_ROOT
from eliza.formats.matrix_yaml import load_matrix
from eliza.formats.sbom import sbom_licenses

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
GATES = tuple(g.conan_option for g in MATRIX.gates)
DEFAULTS = package_option_defaults(MATRIX)


def arguments(cell_id: str, tmp_path: Path) -> list[str]:
    plan = plan_cell_build(
        MATRIX.cell(cell_id),
        repo=tmp_path,
        all_gate_options=GATES,
        llama_version="0.3.36",
        with_test_kit=True,
    )
    return consumer_arguments(plan, DEFAULTS)


def test_the_no_gate_cpu_cell_needs_no_argument_at_all(tmp_path: Path) -> None:
    assert arguments("linux-cpu.none", tmp_path) == []
    assert arguments("linux-arm64.none", tmp_path) == []  # its settings select it: an arm64 host


def test_a_gate_cell_names_its_gates_and_the_cuda_cell_cuda(tmp_path: Path) -> None:
    assert arguments("linux-cpu.mlx", tmp_path) == ["-o", "elizainference/*:with_mlx=True"]
    assert arguments("linux-cpu.litert+mlx", tmp_path) == [
        "-o", "elizainference/*:with_litert=True", "-o", "elizainference/*:with_mlx=True",
    ]  # fmt: skip
    assert arguments("linux-cuda.none", tmp_path) == ["-o", "elizainference/*:with_cuda=True"]
    words = " ".join(arguments("linux-cpu.litert+mlx", tmp_path))
    assert "profile" not in words and "llama-cpp" not in words and "conf" not in words


def shipped(licenses: tuple[str, ...] = ()) -> release.ShippedCell:
    return release.ShippedCell(
        cell="linux-cpu.mlx", archive="a.tar.gz", archive_sha256="0" * 64, archive_bytes=1,
        library_sha256="1" * 64, package_ref="elizainference/9.1.0#rrev:pid#prev",
        install_arguments=("-o", "elizainference/*:with_mlx=True"),
        settings=(("arch", "x86_64"), ("os", "Linux")), licenses=licenses,
    )  # fmt: skip


def test_the_notes_give_the_command_a_consumer_types_and_the_license() -> None:
    cell = shipped(licenses=("MIT",))
    assert (
        cell.install_command()
        == "conan install --requires=elizainference/9.1.0 -o 'elizainference/*:with_mlx=True'"
    )
    notes = release.release_notes(
        version="9.1.0", commit="c", trust="t", shipped=[cell], refused=[], since=None
    )
    assert "License: MIT" in notes
    assert (
        "- linux-cpu.mlx (arch=x86_64 os=Linux): `conan install --requires=elizainference/9.1.0 -o" in notes
    )
    facts = release.manifest(version="9.1.0", commit="c", trust="t", shipped=[cell], refused=[])
    (entry,) = facts["cells"]
    assert entry["conan_install"] == [
        "--requires=elizainference/9.1.0",
        "-o",
        "elizainference/*:with_mlx=True",
    ]
    assert entry["conan_settings"] == {"arch": "x86_64", "os": "Linux"} and entry["licenses"] == ["MIT"]


def test_notes_without_a_declared_license_say_none() -> None:
    notes = release.release_notes(
        version="9.1.0", commit="c", trust="t", shipped=[shipped()], refused=[], since=None
    )
    assert "License:" not in notes


def test_the_sbom_root_component_license_is_read_as_conan_writes_it() -> None:
    def bom(licenses: list[object]) -> str:
        return json.dumps({"bomFormat": "CycloneDX", "metadata": {"component": {"licenses": licenses}}})

    assert sbom_licenses(bom([{"license": {"id": "MIT"}}])) == ("MIT",)
    assert sbom_licenses(bom([{"expression": "(MIT) AND (Apache-2.0)"}])) == ("(MIT) AND (Apache-2.0)",)
    assert sbom_licenses(bom([])) == ()
    assert sbom_licenses(json.dumps({"bomFormat": "CycloneDX", "metadata": {}})) == ()
