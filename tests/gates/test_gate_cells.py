"""End to end through the shipped library of each gate cell: the seam is inert without a
request and loud with one it cannot honour."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from eliza.adapters.ffi import ElizaError, Library, greedy_config
from tests.gates.conftest import CELLS, GATED_CELLS, NO_GATE_CELL, cell_id

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


def gates_of(cell: str) -> set[str]:
    key = cell.split(".", 1)[1]
    return set() if key == "none" else set(key.split("+"))


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
@pytest.mark.parametrize(("gate", "backend"), [("litert", "litert-lm"), ("mlx", "mlx-coreml")])
def test_explicit_backend_request_fails_loudly(
    cell: str,
    gate: str,
    backend: str,
    gate_libraries: dict[str, Path],
    bundle_with_foreign_artifacts: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ELIZA_LLM_BACKEND", backend)
    lib = Library(gate_libraries[cell])
    with lib.open_context(bundle_with_foreign_artifacts) as ctx, pytest.raises(ElizaError) as err:
        ctx.open_stream()
    if gate in gates_of(cell):
        assert f"'{backend}' is compiled in but unavailable on this host" in err.value.message
    else:
        assert f"'{backend}' is not registered in this build" in err.value.message


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


def exported(library: Path) -> list[str]:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], check=True, capture_output=True, text=True
    )
    return sorted(line.split()[-1] for line in out.stdout.splitlines() if line.strip())


def test_exported_symbols_identical_across_gate_builds(gate_libraries: dict[str, Path]) -> None:
    reference = exported(gate_libraries[NO_GATE_CELL])
    assert len(reference) == 18
    for cell in GATED_CELLS:
        assert exported(gate_libraries[cell]) == reference, cell


def test_gate_objects_only_in_gated_builds(gate_libraries: dict[str, Path]) -> None:
    # Gate OFF compiles nothing of the backend: its messages are absent from the binary.
    markers = {"litert": b"LiteRT-LM runtime is not linked", "mlx": b"neither MLX nor CoreML is linked"}
    for cell, library in gate_libraries.items():
        blob = library.read_bytes()
        for gate, marker in markers.items():
            assert (marker in blob) == (gate in gates_of(cell)), (cell, gate)
