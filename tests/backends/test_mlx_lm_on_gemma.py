"""Gemma 3 270M's MLX weights as MLX users deploy them: the bundle's converted directory is
at most 320 MB (the GGUF's own quantized blocks, not float32), and MLX-LM itself, loading
it strictly and generating greedily from it, gives llama.cpp's tokens on the bundle's
prompts within the tolerance the mlx gate declares for Gemma: every first divergence where
llama.cpp's two highest logits were within the tie margin, the agreement above the floor.
llama.cpp's side is the reference runner (plain llama.h), which records those gaps. MLX-LM
runs in a process of its own, so the mlx package's libmlx never shares one with the
library under test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from eliza.adapters.bench_tools import BenchSettings, reference_argv, run_tool
from eliza.app.project import load_project_matrix
from eliza.app.services.build import ensure_cell_built
from eliza.app.services.bundle import ensure_bundle, ensure_runtime_bundle
from eliza.core.layout import REPO_ROOT
from eliza.formats.mlx_weights import stale_reason

BUNDLE = "gemma3-270m"
MAX_TOKENS = 16
MAX_MB = 320

MLX_LM_GREEDY = """
import json, sys
from pathlib import Path
import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler
from mlx_lm.utils import load_model
model, _ = load_model(Path(sys.argv[1]), strict=True)
out = []
for prompt in json.loads(sys.argv[2]):
    greedy = make_sampler(temp=0.0)
    steps = generate_step(mx.array(prompt), model, sampler=greedy, max_tokens=int(sys.argv[3]))
    out.append([int(token) for token, _ in steps])
print(json.dumps(out))
"""


def test_mlx_lm_generates_llama_cpps_greedy_tokens_from_the_quantized_gemma_weights(tmp_path: Path) -> None:
    matrix = load_project_matrix()
    bundle = ensure_runtime_bundle(ensure_bundle(matrix, matrix.bundle(BUNDLE)), matrix.gates)
    gguf = next((bundle / "text").glob("*.gguf"))
    weights = bundle / "text" / "mlx"
    assert stale_reason(gguf, weights) is None
    size = sum(f.stat().st_size for f in weights.iterdir())
    assert size <= MAX_MB * 10**6, f"{weights}: {size / 1e6:.0f} MB"
    assert "quantization" in json.loads((weights / "config.json").read_text())

    tools = ensure_cell_built("linux-cpu.none").library.parent
    prompts = matrix.bundle(BUNDLE).bench.prompts
    settings = BenchSettings(bundle=bundle, prompts=REPO_ROOT / prompts, max_tokens=MAX_TOKENS, repeats=1)
    out = tmp_path / "reference.jsonl"
    reference = run_tool(reference_argv(tools, settings, "reference", out), out, {"ELIZA_N_THREADS": "1"})
    done = subprocess.run(
        [sys.executable, "-c", MLX_LM_GREEDY, str(weights),
         json.dumps([list(p.prompt_tokens) for p in reference.prompts]), str(MAX_TOKENS)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    generated = json.loads(done.stdout.strip().splitlines()[-1])

    rule = next(g for g in matrix.gates if g.id == "mlx").agreement_on(BUNDLE)
    agreed = positions = 0
    for record, tokens in zip(reference.prompts, generated, strict=True):
        expected = list(record.tokens)
        positions += len(expected)
        same = next((i for i, (a, b) in enumerate(zip(expected, tokens, strict=False)) if a != b), None)
        if same is None:
            assert tokens[: len(expected)] == expected, record.prompt  # no divergence: all of them
            agreed += len(expected)
            continue
        agreed += same
        gap = record.logit_margins[same]
        assert gap <= rule.tie_margin, (
            f"{record.prompt!r}: MLX-LM parts from llama.cpp at token {same} where llama.cpp's top two "
            f"were {gap:.3f} apart (tie margin {rule.tie_margin})"
        )
    assert positions > 0
    assert agreed / positions >= rule.min_token_agreement, (agreed, positions)
