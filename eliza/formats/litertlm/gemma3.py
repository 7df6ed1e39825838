"""The Gemma 3 architecture's graph (eliza.formats.gguf_models.gemma3, whose docstring lists
how it differs from llama): the embedding scaled by sqrt(n_embd); per-head RMSNorms of Q and
K before rope, Q and K rows as stored (rope of halves already); local layers attending
within a sliding window, under their own rope base; RMSNorms after attention and after the
GELU(tanh)-gated feed-forward; logits from the tied embedding, one buffer serving both.

LiteRT-LM's executor hands every signature one causal mask over the context, which the
global layers use. Each local layer keeps a ring cache of window + the widest prefill rows
(CacheLayout.sliding), written at input_pos mod its rows, under a mask computed from
input_pos inside the graph (Signature.ring_mask), so its cost per step follows the window,
not the context; a context no longer than such a ring keeps every layer whole, the window
then masking the engine's mask (Signature.window_mask). The metadata names the model type
gemma3 and the stop tokens llama.cpp ends a generation at: EOS, <end_of_turn> and </s>."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gguf import GGUFReader

from eliza.formats.gguf_models import gemma3 as arch
from eliza.formats.litertlm.common import CacheLayout, LitertlmError, Weight, chosen_context, read_weights
from eliza.formats.litertlm.decoder import Signature, tflite_model
from eliza.formats.sentencepiece_vocab import SpmVocabulary, eog_ids

ARCHITECTURE = arch.ARCHITECTURE


@dataclass(frozen=True, kw_only=True)
class Gemma3Converter:
    reader: GGUFReader
    path: Path
    h: arch.Gemma3Hparams
    context: int
    model_type: str = "gemma3"

    @property
    def n_vocab(self) -> int:
        return self.h.n_vocab

    def stop_ids(self, vocab: SpmVocabulary) -> list[int]:
        return stop_ids(vocab)

    def read_weights(self) -> dict[str, Weight]:
        """Every tensor of its (out, in) shape (common.read_weights), as stored: the norms
        already hold Gemma's +1 and the Q/K rows are in the halves-rope order."""
        return read_weights(
            self.reader,
            self.path,
            arch.expected_tensors(self.h),
            architecture=ARCHITECTURE,
            layers=self.h.n_layer,
        )

    def sliding(self, layer: int) -> bool:
        """A window that reaches past the context masks nothing: such a layer is global here."""
        return self.h.is_sliding(layer) and self.h.sliding_window < self.context

    def cache_layout(self, prefill_lengths: Sequence[int]) -> CacheLayout:
        """Rings for the local layers (CacheLayout.sliding), the context's rows for the global ones."""
        sliding = [self.sliding(i) for i in range(self.h.n_layer)]
        return CacheLayout.sliding(self.context, self.h.sliding_window, sliding, prefill_lengths)

    def tflite_model(self, weights: Mapping[str, Weight], prefill_lengths: Sequence[int]) -> bytes:
        layout = self.cache_layout(prefill_lengths)
        return tflite_model(weights, self.h, self.context, prefill_lengths, self._forward, layout)

    def _forward(self, s: Signature) -> int | None:
        h, n, decode = self.h, s.n, s.decode
        g, weight = s.g, s.weight

        def norm(x: int, name: str) -> int:
            return g.rms_norm(x, weight(name), h.rms_eps)

        layers = range(h.n_layer)
        ropes = {
            sliding: s.rope(h.rope_base_local if sliding else h.rope_base, "_local" if sliding else "_global")
            for sliding in sorted({self.sliding(i) for i in layers})
        }
        scale = s.scalar("attn_scale", h.attention_scale)
        embedding = weight("token_embd.weight")
        x = g.mul(g.gather(embedding, s.tokens), s.scalar("embedding_scale", h.embedding_scale))
        for i in layers:
            p = f"blk.{i}."
            rope = ropes[self.sliding(i)]
            a = norm(x, p + "attn_norm.weight")
            k = g.reshape(g.fc(a, weight(p + "attn_k.weight")), [1, n, h.n_head_kv, h.head_dim])
            v = g.reshape(g.fc(a, weight(p + "attn_v.weight")), [1, n, h.n_head_kv, h.head_dim])
            k_cache, v_cache = s.write_cache(i, rope(norm(k, p + "attn_k_norm.weight")), v)
            if i == h.n_layer - 1 and not decode:
                break  # a prefill outputs only caches: the last block's attention and FFN are dead
            q = g.reshape(g.fc(a, weight(p + "attn_q.weight")), [1, n, h.n_head, h.head_dim])
            q = rope(norm(q, p + "attn_q_norm.weight"))
            mask = s.mask
            if self.sliding(i):
                rows = s.layout.rows[i]
                mask = (
                    s.window_mask(h.sliding_window)
                    if rows == self.context
                    else s.ring_mask(h.sliding_window, rows)
                )
            attended = s.attend(q, k_cache, v_cache, scale, mask)
            x = g.add(
                x, norm(g.fc(attended, weight(p + "attn_output.weight")), p + "post_attention_norm.weight")
            )
            f = norm(x, p + "ffn_norm.weight")
            gated = g.mul(
                g.gelu_tanh(g.fc(f, weight(p + "ffn_gate.weight"))), g.fc(f, weight(p + "ffn_up.weight"))
            )
            x = g.add(x, norm(g.fc(gated, weight(p + "ffn_down.weight")), p + "post_ffw_norm.weight"))
        logits = None
        if decode:
            x = norm(x, "output_norm.weight")
            logits = g.fc(x, embedding if h.tied_output else weight("output.weight"))
        return logits


def stop_ids(vocab: SpmVocabulary) -> list[int]:
    """EOS, then every token llama.cpp ends a generation at (Gemma 3: <end_of_turn> and the
    user-defined </s>)."""
    return eog_ids(vocab)


def converter(reader: GGUFReader, path: Path, context: int | None) -> Gemma3Converter:
    h = arch.read_hparams(reader, path, LitertlmError)
    return Gemma3Converter(reader=reader, path=path, h=h, context=chosen_context(path, context, h.context))
