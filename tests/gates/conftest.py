from __future__ import annotations

from pathlib import Path

import pytest

LINUX_CPU_CELLS = ("linux-cpu.none", "linux-cpu.litert", "linux-cpu.mlx", "linux-cpu.litert+mlx")


@pytest.fixture(scope="session")
def gate_libraries() -> dict[str, Path]:
    """The four gate cells of linux-cpu, built (llama.cpp reused from the Conan cache)."""
    from eliza.workflow import ensure_cell_built

    return {cell: ensure_cell_built(cell).library for cell in LINUX_CPU_CELLS}


@pytest.fixture(scope="session")
def bundle_with_foreign_artifacts(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny bundle plus fake LiteRT-LM and CoreML artifacts beside its GGUF."""
    bundle = tmp_path_factory.mktemp("foreign") / "bundle"
    (bundle / "text").mkdir(parents=True)
    model = next((tiny_bundle / "text").glob("*.gguf"))
    (bundle / "text" / model.name).symlink_to(model)
    (bundle / "text" / "x.litertlm").write_bytes(b"not a real litertlm")
    (bundle / "text" / "x.mlpackage").mkdir()
    return bundle
