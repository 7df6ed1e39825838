"""A Gemma 3 GGUF as MLX-LM's `gemma3_text` model reads it (eliza.formats.gguf_models.gemma3
lists how the architecture differs from llama).

What the mapping changes besides names:

- every RMSNorm weight (the six per layer and the final one) is stored in the GGUF with
  Gemma's 1 added; `gemma3_text` computes x / rms(x) * (1 + w), so 1 is subtracted here.
  In float32, w - 1 is exact for the weights in [0.5, 2] and 1 + (w - 1) gives w back; a
  weight outside loses at most half an ulp of w;
- Q and K rows are taken as stored: llama.cpp ropes Gemma's halves (NEOX), which is
  MLX-LM's non-traditional rope;
- query_pre_attn_scalar is head_dim (the attention scale llama.cpp uses for every Gemma 3
  but the 27B, which the reader refuses);
- a model without sliding windows (no or a zero `sliding_window`) is written with
  `sliding_window_pattern` 1: every layer global, as llama.cpp computes it.

Every quantized matrix keeps the GGUF's blocks as MLX affine groups (common.plan_of),
the tied embedding once for the gather and the output layer: Gemma 3 270M's 253 MB Q4_K_M
becomes about 300 MB (the 262,144 x 640 Q8_0 embedding 210 MB of it), against 1.07 GB in
float32 (`--dense`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from gguf import GGUFReader

from eliza.formats.gguf_models import gemma3 as gguf_gemma3
from eliza.formats.mlx_weights.common import Mapping, MlxWeightsError, Plan, module_name, plan_of

ARCHITECTURE = gguf_gemma3.ARCHITECTURE
_PATTERN_KEY = "gemma3.attention.sliding_window_pattern"

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens",
    "output_norm.weight": "model.norm",
    "output.weight": "lm_head",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_output": "self_attn.o_proj",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "post_ffw_norm": "post_feedforward_layernorm",
}


@dataclass(frozen=True, kw_only=True)
class Gemma3Config:
    """The hyper-parameters MLX-LM's gemma3_text model reads from config.json."""

    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    vocab_size: int
    rope_theta: float
    rope_local_base_freq: float
    query_pre_attn_scalar: int
    sliding_window: int
    sliding_window_pattern: int
    max_position_embeddings: int
    # gemma3_text ties when the weights hold no lm_head; the runtime reads this instead.
    tie_word_embeddings: bool

    def to_json(self) -> dict[str, object]:
        return {"model_type": "gemma3_text", **asdict(self)}


def plan(reader: GGUFReader, path: Path, *, dense: bool) -> Plan:
    h = gguf_gemma3.read_hparams(reader, path, MlxWeightsError)
    pattern = h.swa_pattern if h.sliding_window > 0 else 1
    if pattern == 0:
        raise MlxWeightsError(
            f"{path}: {_PATTERN_KEY} is 0 (every layer sliding); MLX-LM's gemma3_text needs a "
            "periodic pattern with one global layer per period"
        )
    if pattern > h.n_layer:
        raise MlxWeightsError(
            f"{path}: {_PATTERN_KEY} {pattern} exceeds the {h.n_layer} layers (no global layer); "
            "MLX-LM's gemma3_text needs one within the first period"
        )
    config = Gemma3Config(
        hidden_size=h.n_embd,
        num_hidden_layers=h.n_layer,
        intermediate_size=h.n_ff,
        num_attention_heads=h.n_head,
        num_key_value_heads=h.n_head_kv,
        head_dim=h.head_dim,
        rms_norm_eps=h.rms_eps,
        vocab_size=h.n_vocab,
        rope_theta=h.rope_base,
        rope_local_base_freq=h.rope_base_local,
        query_pre_attn_scalar=h.head_dim,
        sliding_window=h.sliding_window,
        sliding_window_pattern=pattern,
        max_position_embeddings=h.context,
        tie_word_embeddings=h.tied_output,
    )
    expected = gguf_gemma3.expected_tensors(h)
    return plan_of(
        config, path, reader, expected, _mapping, architecture=ARCHITECTURE, layers=h.n_layer, dense=dense
    )


def _mapping(name: str) -> Mapping:
    module, kind = module_name(name, _GLOBAL_NAMES, _LAYER_NAMES)
    is_norm = kind in gguf_gemma3.NORM_TENSORS or name == "output_norm.weight"
    return Mapping(module=module, transform=_without_the_one if is_norm else None)


def _without_the_one(weight: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    return np.asarray(weight - np.float32(1.0), dtype=np.float32)
