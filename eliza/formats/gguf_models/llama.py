"""The llama architecture as its GGUF states it (`llama.*` keys, llama.cpp's tensor names).

llama.cpp's converter permutes the rows of Q and K within each head so that its rope
("NORM" mode) rotates adjacent pairs (2i, 2i+1); MLX-LM and the .litertlm graph rotate
halves (i, i + head_dim/2). `unpermute_rope_rows` undoes that permutation exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from gguf import GGUFReader

from eliza.formats.gguf_models import header

ARCHITECTURE = "llama"
# Per layer, in the order the forward pass reads them.
LAYER_TENSORS = (
    "attn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
)
# What a tensor no dense llama has usually means, so a refusal says what to do instead.
KNOWN_UNSUPPORTED = {"rope_freqs.weight": "llama 3.1-style rope scaling (rope_freqs.weight)"}


@dataclass(frozen=True, kw_only=True)
class LlamaHparams:
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    head_dim: int
    rope_base: float
    rms_eps: float
    context: int
    tied_output: bool


def read_hparams(reader: GGUFReader, path: Path, error: type[ValueError]) -> LlamaHparams:
    """The hyper-parameters of a dense, unscaled-rope llama; `error` naming the key otherwise."""
    need = " the same in every layer"

    def positive(key: str, default: int | None = None) -> int:
        return header.positive_int(reader, path, key, error, default, need=need)

    def number(key: str, default: float | None = None) -> float:
        return float32_value(header.number(reader, path, key, error, default))

    experts = header.field(reader, "llama.expert_count")
    if isinstance(experts, int) and experts > 0:
        raise error(f"{path}: a mixture of {experts} experts (llama.expert_count); dense llama models only")
    scaling = header.field(reader, "llama.rope.scaling.type")
    factor = header.field(reader, "llama.rope.scaling.factor")
    linear = header.field(reader, "llama.rope.scale_linear")
    if (scaling not in (None, "none") and factor not in (None, 1.0)) or linear not in (None, 1.0):
        shown = factor if factor is not None else linear
        raise error(
            f"{path}: rope scaling {scaling or 'linear'} (factor {shown}); unscaled rope only "
            "(convert a model without rope scaling)"
        )
    n_embd = positive("llama.embedding_length")
    n_head = positive("llama.attention.head_count")
    n_head_kv = positive("llama.attention.head_count_kv", n_head)
    if n_embd % n_head != 0 and header.field(reader, "llama.attention.key_length") is None:
        raise error(
            f"{path}: embedding length {n_embd} is not a multiple of {n_head} heads and "
            "llama.attention.key_length is missing; the head size cannot be derived"
        )
    head_dim = positive("llama.attention.key_length", n_embd // n_head)
    value_dim = positive("llama.attention.value_length", head_dim)
    rope_dim = positive("llama.rope.dimension_count", head_dim)
    if value_dim != head_dim or rope_dim != head_dim or head_dim % 2:
        raise error(
            f"{path}: head size {head_dim}, value size {value_dim}, rope dimensions {rope_dim}; a llama "
            "needs all three equal and even (a model of another architecture exported as llama?)"
        )
    header.check_head_groups(path, error, n_head, n_head_kv)
    n_vocab = header.vocabulary_rows(reader, path, error, ARCHITECTURE)
    return LlamaHparams(
        n_vocab=n_vocab,
        n_embd=n_embd,
        n_layer=positive("llama.block_count"),
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=positive("llama.feed_forward_length"),
        head_dim=head_dim,
        rope_base=number("llama.rope.freq_base", 10000.0),
        rms_eps=number("llama.attention.layer_norm_rms_epsilon"),
        context=positive("llama.context_length"),
        tied_output=all(t.name != "output.weight" for t in reader.tensors),
    )


def float32_value(value: float) -> float:
    """A float32 key as its shortest decimal: GGUF keeps 1e-05 as float32, which is
    9.999999747378752e-06 as a double; configs and graphs get 1e-05."""
    return float(str(np.float32(value)))


def expected_tensors(h: LlamaHparams) -> dict[str, tuple[int, ...]]:
    """Every tensor name of the GGUF and its numpy shape (rows, columns)."""
    d, ff = h.n_embd, h.n_ff
    q, kv = h.n_head * h.head_dim, h.n_head_kv * h.head_dim
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (h.n_vocab, d), "output_norm.weight": (d,)}
    if not h.tied_output:
        shapes["output.weight"] = (h.n_vocab, d)
    per_layer = dict(
        zip(
            LAYER_TENSORS,
            ((d,), (q, d), (kv, d), (kv, d), (d, q), (d,), (ff, d), (ff, d), (d, ff)),
            strict=True,
        )
    )
    for layer in range(h.n_layer):
        for kind, dims in per_layer.items():
            shapes[f"blk.{layer}.{kind}.weight"] = dims
    return shapes


def unpermute_rope_rows(weight: npt.NDArray[Any], n_head: int) -> npt.NDArray[Any]:
    """The inverse of convert_hf_to_gguf.py's `permute` of a q_proj (n_head = attention
    heads) or k_proj (n_head = key/value heads) weight: GGUF row 2i + j of a head is HF row
    j * head_dim/2 + i."""
    rows = weight.shape[0]
    if n_head <= 0 or rows % (2 * n_head) != 0:
        raise ValueError(f"{rows} rows do not split into {n_head} heads of an even size")
    return (
        weight.reshape(n_head, rows // n_head // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )
