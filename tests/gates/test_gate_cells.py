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


# --- tiered bundles: no GGUF, or a GGUF loaded only when the llama.cpp path needs it --------


def artifact_only_bundle(root: Path, gate: Gate) -> Path:
    """A bundle holding only the gate's artifacts (a .litertlm-only bundle for litert, an
    MLX/CoreML-only one for mlx): nothing the llama.cpp path can load."""
    from tests.gates.conftest import place_artifact

    bundle = root / f"{gate.id}-only"
    for pattern in gate.artifacts:
        place_artifact(bundle, pattern)
    return bundle


@pytest.mark.parametrize("cell", CELLS, ids=cell_id)
@pytest.mark.parametrize("gate", GATES, ids=gate_id)
def test_bundle_without_gguf_opens_only_where_its_backend_is_compiled_in(
    cell: str, gate: Gate, gate_libraries: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ELIZA_LLM_BACKEND", raising=False)
    bundle = artifact_only_bundle(tmp_path, gate)
    lib = Library(gate_libraries[cell])
    if gate not in gates_of(cell):
        with pytest.raises(ElizaError) as err:
            lib.open_context(bundle)
        assert "has no text model: expected exactly one text/*.gguf" in err.value.message
        return
    with lib.open_context(bundle) as ctx:
        # The backend is compiled in but has no runtime here: the selector leaves the stream
        # to llama.cpp, which has no GGUF in this bundle; the error says both.
        for call in (lambda: ctx.open_stream(), lambda: ctx.tokenize("hello")):
            with pytest.raises(ElizaError) as err:
                call()
            assert "no text/*.gguf for the llama.cpp path" in err.value.message
            assert gate.factory in err.value.message
        monkeypatch.setenv("ELIZA_LLM_BACKEND", gate.factory)
        with pytest.raises(ElizaError) as err:
            ctx.open_stream()
        assert f"'{gate.factory}' is compiled in but unavailable on this host" in err.value.message


@pytest.mark.parametrize("cell", CELLS, ids=cell_id)
def test_gguf_is_loaded_only_when_the_llama_path_needs_it(
    cell: str,
    gate_libraries: dict[str, Path],
    bundle_with_foreign_artifacts: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A corrupt GGUF beside other backends' artifacts: a cell that compiles one of them in
    opens the bundle without loading the GGUF, and the load error comes from the first
    llama.cpp use; a cell without gates loads it at _create and fails there."""
    import shutil

    monkeypatch.delenv("ELIZA_LLM_BACKEND", raising=False)
    bundle = tmp_path / "corrupt-gguf"
    shutil.copytree(bundle_with_foreign_artifacts, bundle)
    model = next((bundle / "text").glob("*.gguf"))
    model.write_bytes(model.read_bytes()[:4096])
    lib = Library(gate_libraries[cell])
    if not gates_of(cell):
        with pytest.raises(ElizaError) as err:
            lib.open_context(bundle)
        assert "cannot load text model" in err.value.message
        return
    with lib.open_context(bundle) as ctx:
        with pytest.raises(ElizaError) as err:
            ctx.open_stream()
        assert "cannot load text model" in err.value.message
    # The same bundle with its GGUF intact generates as the no-gate cell does.
    assert generate_all(gate_libraries[cell], bundle_with_foreign_artifacts) == generate_all(
        gate_libraries[NO_GATE_CELL], bundle_with_foreign_artifacts
    )
