"""An independent float64 forward pass over a Gemma 3 GGUF as stored, written from llama.cpp's
`gemma3` graph (src/models/gemma3.cpp) and nothing of this project's converters: the
converted MLX-LM directory and the .litertlm graph are each judged against it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

Array = np.ndarray[Any, Any]


def _value(reader: GGUFReader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def _tensor(t: Any) -> Array:
    shape = tuple(reversed(t.shape.tolist()))
    data = t.data if t.tensor_type.name in ("F32", "F16", "F64") else dequantize(t.data, t.tensor_type)
    return np.asarray(data, dtype=np.float64).reshape(shape)


def int8_rows(w: Array) -> Array:
    """A matrix as symmetric int8 per row would give it back (scale max|row| / 127): what a
    runtime with int8 weights per output channel multiplies, written here independently."""
    scale = np.abs(w).max(axis=1, keepdims=True) / 127
    scale[scale == 0] = 1
    return np.asarray(np.clip(np.rint(w / scale), -127, 127) * scale)


def reference_logits(gguf: Path | GGUFReader, tokens: list[int], matrices: Any = None) -> Array:
    """Logits (len(tokens), n_vocab) of every position, in float64; `matrices`, when given,
    maps every matrix of the GGUF first, by name and values (to int8_rows: a runtime's int8
    weights)."""
    reader = gguf if isinstance(gguf, GGUFReader) else GGUFReader(gguf)
    w = {t.name: _tensor(t) for t in reader.tensors}
    if matrices is not None:
        w = {name: matrices(name, v) if v.ndim == 2 else v for name, v in w.items()}
    d = int(_value(reader, "gemma3.embedding_length"))
    n_head = int(_value(reader, "gemma3.attention.head_count"))
    n_kv = int(_value(reader, "gemma3.attention.head_count_kv", n_head))
    hd = int(_value(reader, "gemma3.attention.key_length", d // n_head))
    eps = float(_value(reader, "gemma3.attention.layer_norm_rms_epsilon"))
    window = int(_value(reader, "gemma3.attention.sliding_window", 0))
    pattern = int(_value(reader, "gemma3.attention.sliding_window_pattern", 6))
    base_global = float(_value(reader, "gemma3.rope.freq_base", 1000000.0))
    base_local = float(_value(reader, "gemma3.rope.freq_base_swa", 10000.0))
    n = len(tokens)
    pos = np.arange(n)

    def norm(x: Array, weight: Array) -> Array:
        return np.asarray(x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * weight)

    def rope(x: Array, base: float) -> Array:  # NEOX: halves (i, i + hd/2) rotate together
        angles = pos[:, None, None] * base ** (-np.arange(0, hd, 2) / hd)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return np.concatenate(
            [x1 * np.cos(angles) - x2 * np.sin(angles), x1 * np.sin(angles) + x2 * np.cos(angles)], -1
        )

    def gelu(x: Array) -> Array:
        return np.asarray(0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))))

    x = w["token_embd.weight"][tokens] * np.sqrt(d)
    for i in range(int(_value(reader, "gemma3.block_count"))):
        p = f"blk.{i}."
        sliding = window > 0 and i % pattern < pattern - 1
        base = base_local if sliding else base_global
        h = norm(x, w[p + "attn_norm.weight"])
        q = rope(
            norm((h @ w[p + "attn_q.weight"].T).reshape(n, n_head, hd), w[p + "attn_q_norm.weight"]), base
        )
        k = rope(norm((h @ w[p + "attn_k.weight"].T).reshape(n, n_kv, hd), w[p + "attn_k_norm.weight"]), base)
        v = (h @ w[p + "attn_v.weight"].T).reshape(n, n_kv, hd)
        k, v = np.repeat(k, n_head // n_kv, 1), np.repeat(v, n_head // n_kv, 1)
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)
        masked = pos[None, :] > pos[:, None]
        if sliding:
            masked |= pos[:, None] - pos[None, :] >= window
        scores[:, masked] = -np.inf
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", probs, v).reshape(n, n_head * hd) @ w[p + "attn_output.weight"].T
        x = x + norm(attn, w[p + "post_attention_norm.weight"])
        h = norm(x, w[p + "ffn_norm.weight"])
        ffn = (gelu(h @ w[p + "ffn_gate.weight"].T) * (h @ w[p + "ffn_up.weight"].T)) @ w[
            p + "ffn_down.weight"
        ].T
        x = x + norm(ffn, w[p + "post_ffw_norm.weight"])
    out = w.get("output.weight", w["token_embd.weight"])
    return np.asarray(norm(x, w["output_norm.weight"]) @ out.T)
