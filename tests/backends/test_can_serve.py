"""can_serve answers for what this build's body can load here, through the real library with
its runtime present: the mlx gate declares CoreML packages (text/*.mlpackage,
text/*.mlmodelc) beside MLX weights (text/mlx/), but the Linux body computes from MLX weights
only. A bundle staged for every platform (its GGUF and a CoreML package for Apple) must fall
through to llama.cpp exactly as a GGUF-only bundle does, while MLX weights that are there
but broken still fail loudly."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.backends.conftest import MLX, bench

PROMPT = "Once upon a time\n"


def _bundle(root: Path, tiny: Path, *, coreml: bool, broken_mlx: bool) -> Path:
    (root / "text").mkdir(parents=True)
    model = next((tiny / "text").glob("*.gguf"))
    shutil.copyfile(model, root / "text" / model.name)
    if coreml:
        package = root / "text" / "model.mlpackage"
        (package / "Data").mkdir(parents=True)
        (package / "Manifest.json").write_text("{}\n")
    if broken_mlx:
        (root / "text" / "mlx").mkdir()
        (root / "text" / "mlx" / "config.json").write_text("{}\n")
    return root


@pytest.fixture(scope="module")
def tiny() -> Path:
    from eliza.app.services.bundle import ensure_tiny_bundle

    return ensure_tiny_bundle()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ELIZA_LLM_BACKEND", "ELIZA_BACKEND_MODULE_DIR")}
    return {**env, "ELIZA_N_THREADS": "1", **extra}


def test_a_bundle_with_only_another_bodys_artifact_falls_through_to_llama_cpp(
    mlx_library: Path, tiny: Path, tmp_path: Path
) -> None:
    bundle = _bundle(tmp_path / "bundle", tiny, coreml=True, broken_mlx=False)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(PROMPT)
    auto = bench(mlx_library, bundle, prompts, tmp_path / "auto.jsonl", max_tokens=8, env=_env())
    # Before can_serve asked the body, the CoreML package made the selector pick MLX here,
    # whose open then failed on the missing text/mlx/.
    assert auto.returncode == 0, auto.stderr
    plain = _bundle(tmp_path / "gguf-only", tiny, coreml=False, broken_mlx=False)
    same = bench(mlx_library, plain, prompts, tmp_path / "plain.jsonl", max_tokens=8, env=_env())
    assert same.returncode == 0, same.stderr
    outputs = [
        [json.loads(line).get("text_hex") for line in (tmp_path / name).read_text().splitlines()[1:]]
        for name in ("auto.jsonl", "plain.jsonl")
    ]
    assert outputs[0] == outputs[1] and any(outputs[0]), outputs
    forced = bench(
        mlx_library, bundle, prompts, tmp_path / "forced.jsonl", max_tokens=8, env=_env(ELIZA_LLM_BACKEND=MLX)
    )
    assert forced.returncode != 0 and "lacks the artifact" in forced.stderr, forced.stderr


def test_mlx_weights_that_are_there_but_broken_still_fail_loudly(
    mlx_library: Path, tiny: Path, tmp_path: Path
) -> None:
    bundle = _bundle(tmp_path / "bundle", tiny, coreml=True, broken_mlx=True)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(PROMPT)
    auto = bench(mlx_library, bundle, prompts, tmp_path / "auto.jsonl", max_tokens=8, env=_env())
    assert auto.returncode != 0, auto.stdout
    assert "has no conversion record" in auto.stderr and "eliza mlx-weights" in auto.stderr, auto.stderr
