"""The llama architecture's graph (eliza.formats.gguf_models.llama): pre-norm blocks of
grouped-query attention with rope and a SiLU-gated feed-forward.

llama.cpp's converter permutes Q and K rows for its adjacent-pair rope, which
`unpermute_rope_rows` undoes so the graph ropes halves (i, i + head_dim/2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFReader

from eliza.formats.gguf_models import header
from eliza.formats.gguf_models import llama as arch
from eliza.formats.gguf_models.affine import Int8Rows
from eliza.formats.litertlm.common import CacheLayout, LitertlmError, Weight, chosen_context, read_weights
from eliza.formats.litertlm.decoder import Signature, tflite_model
from eliza.formats.sentencepiece_vocab import SpmVocabulary

ARCHITECTURE = arch.ARCHITECTURE


@dataclass(frozen=True, kw_only=True)
class LlamaConverter:
    reader: GGUFReader
    path: Path
    h: arch.LlamaHparams
    context: int
    # As the file states them (double), not rounded to float32's shortest decimal: they
    # name constants of the graph, whose bytes stay those of files already written.
    rms_eps: float
    rope_base: float
    model_type: str = "generic_model"

    @property
    def n_vocab(self) -> int:
        return self.h.n_vocab

    def stop_ids(self, vocab: SpmVocabulary) -> list[int]:
        return [vocab.eos_id]

    def read_weights(self) -> dict[str, Weight]:
        """Every tensor of its (out, in) shape (common.read_weights), Q and K rows un-permuted to
        halves rope."""
        h = self.h
        weights = read_weights(
            self.reader,
            self.path,
            arch.expected_tensors(h),
            architecture=ARCHITECTURE,
            layers=h.n_layer,
            known_unsupported=arch.KNOWN_UNSUPPORTED,
        )
        for name, weight in weights.items():
            kind = name.split(".")[-2]
            if kind in ("attn_q", "attn_k"):
                heads = h.n_head if kind == "attn_q" else h.n_head_kv
                if isinstance(weight, Int8Rows):
                    order = arch.unpermute_rope_rows(np.arange(weight.shape[0]), heads)
                    weights[name] = weight.rows(np.asarray(order, dtype=np.intp))
                else:
                    weights[name] = np.ascontiguousarray(arch.unpermute_rope_rows(weight, heads))
        return weights

    def cache_layout(self, prefill_lengths: Sequence[int]) -> CacheLayout:
        """Every layer attends over the whole context."""
        return CacheLayout.full(self.h.n_layer, self.context)

    def tflite_model(self, weights: Mapping[str, Weight], prefill_lengths: Sequence[int]) -> bytes:
        return tflite_model(weights, self.h, self.context, prefill_lengths, self._forward)

    def _forward(self, s: Signature) -> int | None:
        h, n, decode = self.h, s.n, s.decode
        g, weight = s.g, s.weight
        rope = s.rope(self.rope_base)
        s.cache_start()
        scale = s.scalar("attn_scale", float(1.0 / np.sqrt(h.head_dim)))
        x = g.gather(weight("token_embd.weight"), s.tokens)  # [1, n, n_embd]
        for i in range(h.n_layer):
            p = f"blk.{i}."
            a = g.rms_norm(x, weight(p + "attn_norm.weight"), self.rms_eps)
            k = g.reshape(g.fc(a, weight(p + "attn_k.weight")), [1, n, h.n_head_kv, h.head_dim])
            v = g.reshape(g.fc(a, weight(p + "attn_v.weight")), [1, n, h.n_head_kv, h.head_dim])
            k_cache, v_cache = s.write_cache(i, rope(k), v)
            if i == h.n_layer - 1 and not decode:
                break  # a prefill outputs only caches: the last block's attention and FFN are dead
            q = rope(g.reshape(g.fc(a, weight(p + "attn_q.weight")), [1, n, h.n_head, h.head_dim]))
            attended = s.attend(q, k_cache, v_cache, scale, s.mask)
            x = g.add(x, g.fc(attended, weight(p + "attn_output.weight")))
            f = g.rms_norm(x, weight(p + "ffn_norm.weight"), self.rms_eps)
            gate = g.fc(f, weight(p + "ffn_gate.weight"))
            silu = g.mul(gate, g.unary(g.tfl.BuiltinOperator.LOGISTIC, gate))
            up = g.fc(f, weight(p + "ffn_up.weight"))
            x = g.add(x, g.fc(g.mul(silu, up), weight(p + "ffn_down.weight")))
        logits = None
        if decode:
            x = g.rms_norm(x, weight("output_norm.weight"), self.rms_eps)
            # A tied model's output matrix is its embedding table: one buffer serves both.
            logits = g.fc(x, weight("token_embd.weight" if h.tied_output else "output.weight"))
        return logits


def converter(reader: GGUFReader, path: Path, context: int | None) -> LlamaConverter:
    h = arch.read_hparams(reader, path, LitertlmError)
    return LlamaConverter(
        reader=reader,
        path=path,
        h=h,
        context=chosen_context(path, context, h.context),
        rms_eps=header.number(reader, path, "llama.attention.layer_norm_rms_epsilon", LitertlmError),
        rope_base=header.number(reader, path, "llama.rope.freq_base", LitertlmError, 10000.0),
    )
