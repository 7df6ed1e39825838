"""End to end through the shipped library of each gate cell: the seam is inert without a
request and loud with one it cannot honour."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from eliza.adapters.abi_tools import exported_symbols
from eliza.adapters.ffi import ElizaError, Library, greedy_config
from eliza.core import c_abi
from eliza.core.layout import REPO_ROOT, public_header
from eliza.formats.case_tables import GATE_TABLE, GateCase, expand_gate_cases, parse_gate_table
from tests.gates.conftest import CELLS, GATED_CELLS, GATES, NO_GATE_CELL, gates_of
from tests.selection import MATRIX

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


# --- the case table: native/cases/gate-fallthrough.cases, expanded for each cell ------------
# case_runner runs the same cases as a target binary where the host cannot load the library.

TEMPLATES = parse_gate_table((REPO_ROOT / GATE_TABLE).read_text(encoding="utf-8"), str(GATE_TABLE))
CASES = [(cell, case) for cell in CELLS for case in expand_gate_cases(TEMPLATES, GATES, MATRIX.cell(cell))]


@pytest.fixture(scope="session")
def case_bundle_dirs(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from eliza.app.checks.target_cases import case_bundles

    return case_bundles(tiny_bundle, tmp_path_factory.mktemp("cases") / "bundles", GATES)


def expect_error(call: Callable[[], object], case: GateCase) -> None:
    with pytest.raises(ElizaError) as err:
        call()
    for text in case.texts:
        assert text in err.value.message, (case.name, err.value.message)


@pytest.mark.parametrize(("cell", "case"), CASES, ids=[f"cell={c}-{k.name}" for c, k in CASES])
def test_gate_case_table(
    cell: str,
    case: GateCase,
    gate_libraries: dict[str, Path],
    case_bundle_dirs: dict[str, Path],
    without_runtime: Callable[[Path], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ELIZA_LLM_BACKEND", raising=False)
    bundle = case_bundle_dirs[case.bundle]
    reference = generate_all(gate_libraries[NO_GATE_CELL], case_bundle_dirs["gguf"])
    if case.env is not None:
        monkeypatch.setenv("ELIZA_LLM_BACKEND", case.env)
    library = without_runtime(gate_libraries[cell])
    lib = Library(library)
    if case.kind == "create-error":
        expect_error(lambda: lib.open_context(bundle), case)
        return
    with lib.open_context(bundle) as ctx:
        if case.kind == "tokenize-error":
            expect_error(lambda: ctx.tokenize("hello"), case)
        elif case.kind == "open-error":
            expect_error(lambda: ctx.open_stream(), case)
        else:
            assert case.kind == "generates", case.kind
    if case.kind == "generates":
        assert all(tokens for tokens, _ in reference)
        assert generate_all(library, bundle) == reference


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
