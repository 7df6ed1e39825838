"""What the byte-identity runner runs once for several cells: the plain-llama.h reference,
whose binary every cell of a platform builds the same, and the agreement platform's no-gate
run. The bench tools are replaced by a recorder (the runner's own bookkeeping is tested)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from eliza.adapters.bench_tools import BenchSettings
from eliza.app.checks import byte_identity
from eliza.app.services.bench_options import BenchOptions
from eliza.core.cell_id import CellId
from eliza.core.layout import REPO_ROOT
from eliza.formats.matrix_yaml import load_matrix

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")


def build_dir(root: Path, gates: str, reference_runner: bytes) -> Path:
    folder = root / gates / "build"
    folder.mkdir(parents=True)
    (folder / "reference_runner").write_bytes(reference_runner)
    (folder / "libelizainference.so").write_bytes(gates.encode())
    return folder / "libelizainference.so"


def test_the_reference_runner_runs_once_per_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def run_tool(argv: list[str], out: Path, env: object = None, runner: object = None) -> Any:
        ran.append(f"{Path(argv[0]).name} {argv[argv.index('--cell') + 1]}")
        return SimpleNamespace(prompts=[], generated_tokens=0)

    monkeypatch.setattr(byte_identity, "run_tool", run_tool)
    opts = BenchOptions(settings=BenchSettings(bundle=tmp_path / "bundle"), out_dir=tmp_path / "bench")
    references: byte_identity.ReferenceRuns = {}
    cells = {g: MATRIX.cell(CellId.parse(f"linux-cpu.{g}")) for g in ("none", "mlx", "litert")}
    none = byte_identity.run_cell(
        cells["none"], build_dir(tmp_path, "none", b"same"), opts, print, references
    )
    mlx = byte_identity.run_cell(cells["mlx"], build_dir(tmp_path, "mlx", b"same"), opts, print, references)
    # another binary (another llama.cpp, another compiler) runs for itself
    litert = byte_identity.run_cell(
        cells["litert"], build_dir(tmp_path, "litert", b"other"), opts, print, references
    )
    assert ran == [
        "e2e_loop_bench linux-cpu.none", "reference_runner linux-cpu.none",
        "e2e_loop_bench linux-cpu.mlx",
        "e2e_loop_bench linux-cpu.litert", "reference_runner linux-cpu.litert",
    ]  # fmt: skip
    assert mlx.reference is none.reference and mlx.reference_path == none.reference_path
    assert litert.reference_path == tmp_path / "bench" / "linux-cpu" / "litert" / "reference.jsonl"
