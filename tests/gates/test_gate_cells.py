"""End to end through the shipped library of each gate cell: the seam is inert without a
request and loud with one it cannot honour."""

from __future__ import annotations

from pathlib import Path

import pytest

from eliza.adapters.abi_tools import exported_symbols
from eliza.adapters.ffi import ElizaError, Library, greedy_config
from eliza.core import c_abi
from eliza.core.layout import REPO_ROOT, public_header
from eliza.core.matrix import Gate
from tests.gates.conftest import CELLS, GATED_CELLS, GATES, NO_GATE_CELL, cell_id, gate_id, gates_of

PROMPTS = ["Hello world, this is", "naïve café — 東京 and", "The price"]


def generate_all(library: Path, bundle: Path) -> list[tuple[list[int], bytes]]:
    lib = Library(library)
    out = []
    with lib.open_context(bundle) as ctx:
        for prompt in PROMPTS:
            with ctx.open_stream(greedy_config(24)) as stream:
                stream.prefill(ctx.tokenize(prompt))
                out.append(stream.generate())
    return out


@pytest.mark.parametrize("cell", CELLS, ids=cell_id)
def test_no_env_output_is_identical_to_the_no_gate_build(
    cell: str,
    gate_libraries: dict[str, Path],
    bundle_with_foreign_artifacts: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ELIZA_LLM_BACKEND", raising=False)
    reference = generate_all(gate_libraries[NO_GATE_CELL], bundle_with_foreign_artifacts)
    assert all(tokens for tokens, _ in reference)
    assert generate_all(gate_libraries[cell], bundle_with_foreign_artifacts) == reference


@pytest.mark.parametrize("cell", CELLS, ids=cell_id)
@pytest.mark.parametrize("gate", GATES, ids=gate_id)
def test_explicit_backend_request_fails_loudly(
    cell: str,
    gate: Gate,
    gate_libraries: dict[str, Path],
    bundle_with_foreign_artifacts: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ELIZA_LLM_BACKEND", gate.factory)
    lib = Library(gate_libraries[cell])
    with lib.open_context(bundle_with_foreign_artifacts) as ctx, pytest.raises(ElizaError) as err:
        ctx.open_stream()
    if gate in gates_of(cell):
        assert f"'{gate.factory}' is compiled in but unavailable on this host" in err.value.message
    else:
        assert f"'{gate.factory}' is not registered in this build" in err.value.message


@pytest.mark.parametrize("cell", CELLS, ids=cell_id)
def test_env_llama_cpp_uses_the_llama_path(
    cell: str,
    gate_libraries: dict[str, Path],
    bundle_with_foreign_artifacts: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ELIZA_LLM_BACKEND", raising=False)
    reference = generate_all(gate_libraries[NO_GATE_CELL], bundle_with_foreign_artifacts)
    monkeypatch.setenv("ELIZA_LLM_BACKEND", "LLAMA.CPP")
    assert generate_all(gate_libraries[cell], bundle_with_foreign_artifacts) == reference


def header_functions() -> list[str]:
    """The functions the public header declares with ELIZA_API: what a build must export."""
    return sorted(c_abi.header_functions(public_header(REPO_ROOT).read_text()))


def test_exported_symbols_identical_across_gate_builds(gate_libraries: dict[str, Path]) -> None:
    reference = exported_symbols(gate_libraries[NO_GATE_CELL])
    assert reference == header_functions()
    for cell in GATED_CELLS:
        assert exported_symbols(gate_libraries[cell]) == reference, cell


def test_gate_objects_only_in_gated_builds(gate_libraries: dict[str, Path]) -> None:
    # Gate OFF compiles nothing of the backend: the factory name, which only its generated
    # GateSpec holds (a NUL-terminated literal), is absent from the binary.
    for cell, library in gate_libraries.items():
        blob = library.read_bytes()
        for gate in GATES:
            marker = gate.factory.encode() + b"\0"
            assert (marker in blob) == (gate in gates_of(cell)), (cell, gate.id)
