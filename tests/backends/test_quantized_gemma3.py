"""Gemma 3 GGUFs quantized in types the real bundle does not use (Q4_0, Q5_1, Q8_0) are
served by both runtimes from what their converters write: MLX affine groups of the GGUF's
own widths (the module reads them from the tensors' shapes) and an int8 `.litertlm`. Each
runtime generates the whole greedy continuation, and its first token is llama.cpp's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType

from eliza.adapters.ffi import Library, greedy_config
from eliza.app.services.bundle import tiny_vocab
from eliza.formats.gguf_models import affine
from eliza.formats.litertlm import write_litertlm
from eliza.formats.mlx_weights import convert
from eliza.formats.tiny_gguf import TinyGemma3Spec, write_tiny_gemma3_gguf
from tests.backends.conftest import LITERT, MLX
from tests.quantized_gguf import quantized_copy

Q = GGMLQuantizationType
# Widths of multiples of 32: every matrix can be stored in these types.
SPEC = TinyGemma3Spec(
    seed=5, n_embd=64, n_layer=3, n_head=2, n_head_kv=1, head_dim=32, n_ff=128, sliding_window=4,
    swa_pattern=2, tied=True, vocab_size=3000,
)  # fmt: skip
TOKENS = 12


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q5_1, Q.Q8_0], ids=lambda t: t.name)
def test_both_runtimes_serve_a_gemma3_of_another_quantized_type(
    qtype: GGMLQuantizationType, mlx_library: Path, litert_library: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    source = tmp_path / "f32.gguf"
    write_tiny_gemma3_gguf(source, tiny_vocab(), SPEC)
    bundle = tmp_path / "bundle"
    gguf = quantized_copy(source, bundle / "text" / "model.gguf", qtype)
    record = convert(gguf, bundle / "text" / "mlx")
    assert {q.bits for q in record.quantization.values()} == {
        8 if qtype is Q.Q8_0 else affine.bits_of_type(qtype)
    }
    assert json.loads((bundle / "text" / "mlx" / "config.json").read_text())["quantization"]
    write_litertlm(gguf, bundle / "text" / "model.litertlm")

    served = {}
    for library, backend in ((mlx_library, "llama.cpp"), (mlx_library, MLX), (litert_library, LITERT)):
        monkeypatch.setenv("ELIZA_LLM_BACKEND", backend)
        with Library(library).open_context(bundle) as ctx, ctx.open_stream(greedy_config(TOKENS)) as stream:
            stream.prefill(ctx.tokenize("Once upon a time"))
            served[backend] = stream.generate()[0]
    for backend in (MLX, LITERT):
        assert len(served[backend]) == TOKENS, backend
        assert served[backend][0] == served["llama.cpp"][0], (backend, served)
