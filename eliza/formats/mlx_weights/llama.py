"""A llama GGUF as MLX-LM's `llama` model reads it.

llama.cpp's converter permutes the rows of Q and K within each head so that its rope
("NORM" mode) rotates adjacent pairs (2i, 2i+1); MLX-LM (`rope_traditional: false`) rotates
(i, i + head_dim/2). `unpermute_rope_rows` undoes that permutation exactly, so the config
says `rope_traditional: false`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy.typing as npt
from gguf import GGUFReader

from eliza.formats.gguf_models import llama as gguf_llama
from eliza.formats.gguf_models.llama import unpermute_rope_rows
from eliza.formats.mlx_weights.common import Mapping, MlxWeightsError, Plan, module_name, plan_of

ARCHITECTURE = gguf_llama.ARCHITECTURE

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens",
    "output_norm.weight": "model.norm",
    "output.weight": "lm_head",
}
_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}


@dataclass(frozen=True, kw_only=True)
class LlamaConfig:
    """The hyper-parameters MLX-LM's llama model reads from config.json."""

    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    vocab_size: int
    rope_theta: float
    max_position_embeddings: int
    # MLX-LM defaults it to true: written always, so a GGUF with its own output matrix is
    # never silently computed with the embeddings instead.
    tie_word_embeddings: bool

    def to_json(self) -> dict[str, object]:
        return {"model_type": "llama", "rope_traditional": False, **asdict(self)}


def plan(reader: GGUFReader, path: Path, *, dense: bool) -> Plan:
    h = gguf_llama.read_hparams(reader, path, MlxWeightsError)
    config = LlamaConfig(
        hidden_size=h.n_embd,
        num_hidden_layers=h.n_layer,
        intermediate_size=h.n_ff,
        num_attention_heads=h.n_head,
        num_key_value_heads=h.n_head_kv,
        head_dim=h.head_dim,
        rms_norm_eps=h.rms_eps,
        vocab_size=h.n_vocab,
        rope_theta=h.rope_base,
        max_position_embeddings=h.context,
        tie_word_embeddings=h.tied_output,
    )
    expected = gguf_llama.expected_tensors(h)

    def mapping(name: str) -> Mapping:
        module, kind = module_name(name, _GLOBAL_NAMES, _LAYER_NAMES)
        heads = {"attn_q": h.n_head, "attn_k": h.n_head_kv}.get(kind) if name.startswith("blk.") else None
        return Mapping(module=module, rows=None if heads is None else _unpermuted(heads))

    return plan_of(
        config,
        path,
        reader,
        expected,
        mapping,
        architecture=ARCHITECTURE,
        layers=h.n_layer,
        known_unsupported=gguf_llama.KNOWN_UNSUPPORTED,
        dense=dense,
    )


def _unpermuted(n_head: int) -> Callable[[npt.NDArray[Any]], npt.NDArray[Any]]:
    def rows(weight: npt.NDArray[Any]) -> npt.NDArray[Any]:
        # This module's name, resolved at load time: the negative control replaces it here.
        return unpermute_rope_rows(weight, n_head)

    return rows
