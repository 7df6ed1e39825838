"""Each compiled-in factory against its matrix.yaml entry, through the test kit of each
cell: the name, rank and artifacts a factory answers with come from the matrix, and a
cell compiles in exactly its gates."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from eliza.core.layout import TEST_KIT_NAME
from eliza.core.matrix import Gate
from tests.gates.conftest import (
    CELLS,
    cell_id,
    gates_of,
    gguf_only_bundle,
    place_artifact,
    place_near_miss,
)
from tests.selector.kit import Builtin, TestKit

CELL_GATES = [(cell, gate) for cell in CELLS for gate in gates_of(cell)]


def kit_of(cell: str, cell_library: Callable[[str], Path]) -> TestKit:
    path = cell_library(cell).with_name(TEST_KIT_NAME)
    assert path.is_file(), f"{path} missing: the cell was built without the test kit"
    return TestKit(path)


def builtin_of(kit: TestKit, gate: Gate) -> Builtin:
    found = [b for b in kit.builtins() if b.gate == gate.id]
    assert len(found) == 1, (gate.id, kit.builtins())
    return found[0]


@pytest.mark.parametrize("cell", CELLS, ids=cell_id)
def test_the_cell_compiles_in_exactly_its_gates(cell: str, cell_library: Callable[[str], Path]) -> None:
    kit = kit_of(cell, cell_library)
    builtins = kit.builtins()
    assert sorted(b.gate for b in builtins) == sorted(g.id for g in gates_of(cell))
    # ... and those are what an _open registers (nothing else is built in).
    kit.clear()
    try:
        kit.register_builtins()
        assert kit.registered() == [b.name for b in builtins]
    finally:
        kit.clear()


# What each gate's body built for these (Linux) cells loads, where it is not every artifact
# its matrix entry declares: the MLX body computes from MLX weights only (backends/mlx.cpp).
BODY_LOADS_HERE = {"mlx": ("text/mlx/",)}


@pytest.mark.parametrize(("cell", "gate"), CELL_GATES, ids=[f"cell={c}-gate={g.id}" for c, g in CELL_GATES])
def test_factory_answers_as_its_matrix_entry(
    cell: str, gate: Gate, cell_library: Callable[[str], Path], tmp_path: Path
) -> None:
    kit = kit_of(cell, cell_library)
    builtin = builtin_of(kit, gate)
    assert builtin.name == gate.factory
    assert builtin.rank == gate.preference_rank
    assert not kit.builtin_can_serve(builtin, gguf_only_bundle(tmp_path))
    assert not kit.builtin_can_serve(builtin, tmp_path / "no-such-bundle")
    loads = BODY_LOADS_HERE.get(gate.id, gate.artifacts)
    for i, pattern in enumerate(gate.artifacts):
        bundle = gguf_only_bundle(tmp_path / f"hit{i}")
        place_artifact(bundle, pattern)
        # an artifact of the gate that another body of it loads (CoreML on Apple) is not
        # this body's to serve: such a bundle falls through (GateFactory::loads_artifact)
        assert kit.builtin_can_serve(builtin, bundle) == (pattern in loads), pattern
        miss = gguf_only_bundle(tmp_path / f"miss{i}")
        place_near_miss(miss, pattern)
        assert not kit.builtin_can_serve(builtin, miss), pattern
