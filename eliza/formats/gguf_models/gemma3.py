"""The Gemma 3 architecture as its GGUF states it (`gemma3.*` keys, llama.cpp's tensor
names), with every fact of its forward pass that differs from llama, as llama.cpp's
`gemma3` graph computes it:

- the token embedding is scaled by sqrt(n_embd) before the first layer;
- every RMSNorm weight is stored with the 1 that Gemma's norm adds already added
  (convert_hf_to_gguf.py adds it), so the GGUF's norm is x / rms(x) * w; MLX-LM's
  `gemma3_text` stores the weight without it and computes x / rms(x) * (1 + w);
- per-head RMSNorms of Q and K (attn_q_norm, attn_k_norm) before rope; rope rotates halves
  (NEOX), and the Q and K rows are not permuted (unlike llama);
- the attention scale is 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim; llama.cpp uses
  n_embd/n_head only for the 27B model, which this reader refuses);
- sliding-window attention on the local layers: a query at position p sees keys at
  p - window < q <= p; every `swa_pattern`-th layer (il % pattern == pattern - 1) is
  global, with causal attention over the whole cache;
- rope base `rope.freq_base_swa` (default 10000) on local layers, `rope.freq_base` on
  global ones;
- the attention output and the feed-forward output each pass an extra RMSNorm
  (post_attention_norm, post_ffw_norm) before the residual add, and the feed-forward is
  GELU(tanh)-gated: down(gelu(gate(x)) * up(x));
- output logits from the tied embedding unless the file has output.weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFReader

from eliza.formats.gguf_models import header
from eliza.formats.gguf_models.llama import float32_value

ARCHITECTURE = "gemma3"
DEFAULT_SWA_PATTERN = 6
DEFAULT_ROPE_BASE_LOCAL = 10000.0
# llama.cpp's gemma3 uses 1/sqrt(n_embd/n_head) as the attention scale for this layer
# count (the 27B model) and 1/sqrt(head_dim) for every other.
_LAYERS_OF_27B = 62
# Per layer, in the order the forward pass reads them.
LAYER_TENSORS = (
    "attn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_q_norm",
    "attn_k_norm",
    "attn_output",
    "post_attention_norm",
    "ffn_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
    "post_ffw_norm",
)
NORM_TENSORS = frozenset(
    {"attn_norm", "attn_q_norm", "attn_k_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"}
)


@dataclass(frozen=True, kw_only=True)
class Gemma3Hparams:
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    head_dim: int
    rms_eps: float
    rope_base: float  # global layers
    rope_base_local: float  # sliding-window layers
    sliding_window: int  # 0: every layer is global
    swa_pattern: int
    context: int
    tied_output: bool

    def is_sliding(self, layer: int) -> bool:
        """llama.cpp's set_swa_pattern: every pattern-th layer is global."""
        if self.sliding_window <= 0:
            return False
        return self.swa_pattern == 0 or layer % self.swa_pattern < self.swa_pattern - 1

    def rope_base_of(self, layer: int) -> float:
        return self.rope_base_local if self.is_sliding(layer) else self.rope_base

    @property
    def attention_scale(self) -> float:
        return float(1.0 / np.sqrt(self.head_dim))

    @property
    def embedding_scale(self) -> float:
        return float(np.sqrt(self.n_embd))


def read_hparams(reader: GGUFReader, path: Path, error: type[ValueError]) -> Gemma3Hparams:
    """The hyper-parameters of a Gemma 3 text model; `error` naming the key otherwise."""
    need = " the same in every layer"

    def positive(key: str, default: int | None = None) -> int:
        return header.positive_int(reader, path, key, error, default, need=need)

    def number(key: str, default: float | None = None) -> float:
        return float32_value(header.number(reader, path, key, error, default))

    n_embd = positive("gemma3.embedding_length")
    n_head = positive("gemma3.attention.head_count")
    n_head_kv = positive("gemma3.attention.head_count_kv", n_head)
    head_dim = positive("gemma3.attention.key_length", n_embd // n_head)
    value_dim = positive("gemma3.attention.value_length", head_dim)
    rope_dim = positive("gemma3.rope.dimension_count", head_dim)
    if value_dim != head_dim or rope_dim != head_dim or head_dim % 2:
        raise error(
            f"{path}: head size {head_dim}, value size {value_dim}, rope dimensions {rope_dim}; Gemma 3 "
            "needs all three equal and even"
        )
    header.check_head_groups(path, error, n_head, n_head_kv)
    n_layer = positive("gemma3.block_count")
    if n_layer == _LAYERS_OF_27B:
        raise error(
            f"{path}: {n_layer} layers (Gemma 3 27B), whose attention scale llama.cpp derives otherwise; "
            "the 27B model is not supported"
        )
    softcap = header.field(reader, "gemma3.final_logit_softcapping")
    if softcap not in (None, 0, 0.0):
        raise error(f"{path}: gemma3.final_logit_softcapping {softcap}; Gemma 3 models have none")
    scaling = header.field(reader, "gemma3.rope.scaling.type")
    factor = header.field(reader, "gemma3.rope.scaling.factor")
    if scaling not in (None, "none") and factor not in (None, 1.0):
        raise error(
            f"{path}: rope scaling {scaling} (gemma3.rope.scaling.type, factor {factor}) on the global "
            "layers; unscaled rope only (Gemma 3 270M and 1B have none)"
        )
    pattern = header.field(reader, "gemma3.attention.sliding_window_pattern")
    if isinstance(pattern, list):
        raise error(
            f"{path}: gemma3.attention.sliding_window_pattern is a per-layer array; only the periodic "
            "pattern (an integer) is supported"
        )
    window = header.field(reader, "gemma3.attention.sliding_window")
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 0):
        raise error(f"{path}: gemma3.attention.sliding_window is {window!r}, not a non-negative integer")
    n_vocab = header.vocabulary_rows(reader, path, error, ARCHITECTURE)
    return Gemma3Hparams(
        n_vocab=n_vocab,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=positive("gemma3.feed_forward_length"),
        head_dim=head_dim,
        rms_eps=number("gemma3.attention.layer_norm_rms_epsilon"),
        rope_base=number("gemma3.rope.freq_base", 1000000.0),
        rope_base_local=number("gemma3.rope.freq_base_swa", DEFAULT_ROPE_BASE_LOCAL),
        sliding_window=int(window or 0),
        swa_pattern=int(pattern) if isinstance(pattern, int) else DEFAULT_SWA_PATTERN,
        context=positive("gemma3.context_length"),
        tied_output=all(t.name != "output.weight" for t in reader.tensors),
    )


def expected_tensors(h: Gemma3Hparams) -> dict[str, tuple[int, ...]]:
    """Every tensor name of the GGUF and its numpy shape (rows, columns)."""
    d, ff, hd = h.n_embd, h.n_ff, h.head_dim
    q, kv = h.n_head * hd, h.n_head_kv * hd
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (h.n_vocab, d), "output_norm.weight": (d,)}
    if not h.tied_output:
        shapes["output.weight"] = (h.n_vocab, d)
    dims: dict[str, tuple[int, ...]] = {
        "attn_norm": (d,),
        "attn_q": (q, d),
        "attn_k": (kv, d),
        "attn_v": (kv, d),
        "attn_q_norm": (hd,),
        "attn_k_norm": (hd,),
        "attn_output": (d, q),
        "post_attention_norm": (d,),
        "ffn_norm": (d,),
        "ffn_gate": (ff, d),
        "ffn_up": (ff, d),
        "ffn_down": (d, ff),
        "post_ffw_norm": (d,),
    }
    for layer in range(h.n_layer):
        for kind in LAYER_TENSORS:
            shapes[f"blk.{layer}.{kind}.weight"] = dims[kind]
    return shapes
