"""A deterministic tiny llama-architecture model, written with the real gguf writer.

Random weights from a fixed seed, and the real llama-spm vocabulary from the pinned
llama.cpp tree. Same seed -> byte-identical file. Besides random structure, the model has
a few planted transitions so tests can reach EOS and multi-byte UTF-8 output on purpose:

    "▁price" -> <0xE2> -> <0x82> -> <0xAC> -> "." -> </s>      (that is " price€." then EOS)

Each trigger token owns one reserved embedding dimension; attention and FFN outputs never
write to the reserved dimensions, and only the planted target rows of the output matrix
read them. So a planted transition fires exactly when its trigger is the current token,
whatever the context, while every other prediction depends on the context through
attention.

A bundle also holds a draft model for speculative decoding (`draft/<name>.gguf`): the
same vocabulary and planted transitions, another seed and fewer layers, so it agrees with
the text model on the planted chain and rarely elsewhere.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFWriter

from eliza.formats.files import atomic_write_text, atomic_write_with, sha256_file

PLANTED_CHAIN = ("▁price", "<0xE2>", "<0x82>", "<0xAC>", ".", "</s>")


@dataclass(frozen=True, kw_only=True)
class TinyModelSpec:
    seed: int = 1
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 192
    context_length: int = 512
    name: str = "eliza-tiny"
    vocab_size: int = 0  # > 0: only the first vocab_size tokens (a model of another vocabulary)


DRAFT_SPEC = TinyModelSpec(seed=2, n_layer=1, name="eliza-tiny-draft")


@dataclass(frozen=True, kw_only=True)
class TinyGemma3Spec:
    """A random-weights model of the Gemma 3 architecture (eliza.formats.gguf_models.gemma3),
    every shape its own: the converters and the runtimes' bodies must read each from the
    GGUF. No planted chain: it is for agreement, not for scripted output."""

    seed: int = 7
    n_embd: int = 96
    n_layer: int = 4
    n_head: int = 3
    n_head_kv: int = 1
    head_dim: int = 48
    n_ff: int = 160
    sliding_window: int = 6
    swa_pattern: int = 3
    rope_base: float = 1000000.0
    rope_base_local: float = 10000.0
    context_length: int = 512
    tied: bool = True
    name: str = "eliza-tiny-gemma3"
    vocab_size: int = 0  # > 0: only the first vocab_size tokens


def _vocab(reader: GGUFReader, size: int = 0) -> tuple[list[str], list[float], list[int], dict[str, int]]:
    """The vocabulary's tokens, scores and types (the first `size` of them when size > 0),
    and its special token ids."""
    cut = slice(None, size if size > 0 else None)
    tokens = [str(t) for t in reader.fields["tokenizer.ggml.tokens"].contents()][cut]
    scores = [float(s) for s in reader.fields["tokenizer.ggml.scores"].contents()][cut]
    types = [int(t) for t in reader.fields["tokenizer.ggml.token_type"].contents()][cut]
    special = {
        key: int(reader.fields[f"tokenizer.ggml.{key}"].contents())
        for key in ("bos_token_id", "eos_token_id", "unknown_token_id")
    }
    return tokens, scores, types, special


def _weights(spec: TinyModelSpec, n_vocab: int, chain_ids: list[int]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(spec.seed)
    n_reserved = len(chain_ids) - 1  # one dimension per trigger
    free = spec.n_embd - n_reserved
    head_dim = spec.n_embd // spec.n_head
    n_kv = head_dim * spec.n_head_kv

    def gaussian(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    emb = np.zeros((n_vocab, spec.n_embd), dtype=np.float32)
    emb[:, :free] = gaussian((n_vocab, free), 1.0)
    out = np.zeros((n_vocab, spec.n_embd), dtype=np.float32)
    out[:, :free] = gaussian((n_vocab, free), 0.35)
    for i, (trigger, target) in enumerate(itertools.pairwise(chain_ids)):
        emb[trigger, free + i] = 6.0
        out[target, :] = 0.0
        out[target, free + i] = 12.0

    w: dict[str, np.ndarray] = {"token_embd.weight": emb}
    for layer in range(spec.n_layer):
        p = f"blk.{layer}."
        attn_out = gaussian((spec.n_embd, spec.n_embd), 1.5 / np.sqrt(spec.n_embd))
        ffn_down = gaussian((spec.n_embd, spec.n_ff), 1.0 / np.sqrt(spec.n_ff))
        attn_out[free:, :] = 0.0  # keep the reserved dimensions of the residual stream clean
        ffn_down[free:, :] = 0.0
        w |= {
            p + "attn_norm.weight": np.ones(spec.n_embd, dtype=np.float32),
            p + "attn_q.weight": gaussian((spec.n_embd, spec.n_embd), 2.0 / np.sqrt(spec.n_embd)),
            p + "attn_k.weight": gaussian((n_kv, spec.n_embd), 2.0 / np.sqrt(spec.n_embd)),
            p + "attn_v.weight": gaussian((n_kv, spec.n_embd), 1.0 / np.sqrt(spec.n_embd)),
            p + "attn_output.weight": attn_out,
            p + "ffn_norm.weight": np.ones(spec.n_embd, dtype=np.float32),
            p + "ffn_gate.weight": gaussian((spec.n_ff, spec.n_embd), 1.0 / np.sqrt(spec.n_embd)),
            p + "ffn_up.weight": gaussian((spec.n_ff, spec.n_embd), 1.0 / np.sqrt(spec.n_embd)),
            p + "ffn_down.weight": ffn_down,
        }
    w["output_norm.weight"] = np.ones(spec.n_embd, dtype=np.float32)
    w["output.weight"] = out
    return w


def write_tiny_gguf(path: Path, vocab_path: Path, spec: TinyModelSpec = TinyModelSpec()) -> str:
    """Writes the model atomically and returns its sha256."""
    tokens, scores, types, special = _vocab(GGUFReader(vocab_path), spec.vocab_size)
    index = {t: i for i, t in enumerate(tokens)}
    missing = [t for t in PLANTED_CHAIN if t not in index]
    if missing:
        raise ValueError(f"{vocab_path}: vocabulary lacks planted tokens {missing}")
    weights = _weights(spec, len(tokens), [index[t] for t in PLANTED_CHAIN])

    def write(tmp: Path) -> None:
        _write_gguf(tmp, spec, tokens, scores, types, special, weights)

    atomic_write_with(path, write)
    return sha256_file(path)


def _gemma3_weights(spec: TinyGemma3Spec, n_vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(spec.seed)
    d, hd, ff = spec.n_embd, spec.head_dim, spec.n_ff

    def gaussian(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        # Stored as llama.cpp's converter stores Gemma's norms: with the 1 added.
        return (1.0 + rng.standard_normal(n) * 0.1).astype(np.float32)

    w: dict[str, np.ndarray] = {"token_embd.weight": gaussian((n_vocab, d), 0.5 / np.sqrt(d))}
    for layer in range(spec.n_layer):
        p = f"blk.{layer}."
        w |= {
            p + "attn_norm.weight": norm(d),
            p + "attn_q.weight": gaussian((spec.n_head * hd, d), 1.0 / np.sqrt(d)),
            p + "attn_k.weight": gaussian((spec.n_head_kv * hd, d), 1.0 / np.sqrt(d)),
            p + "attn_v.weight": gaussian((spec.n_head_kv * hd, d), 1.0 / np.sqrt(d)),
            p + "attn_q_norm.weight": norm(hd),
            p + "attn_k_norm.weight": norm(hd),
            p + "attn_output.weight": gaussian((d, spec.n_head * hd), 1.0 / np.sqrt(spec.n_head * hd)),
            p + "post_attention_norm.weight": norm(d),
            p + "ffn_norm.weight": norm(d),
            p + "ffn_gate.weight": gaussian((ff, d), 1.0 / np.sqrt(d)),
            p + "ffn_up.weight": gaussian((ff, d), 1.0 / np.sqrt(d)),
            p + "ffn_down.weight": gaussian((d, ff), 1.0 / np.sqrt(ff)),
            p + "post_ffw_norm.weight": norm(d),
        }
    w["output_norm.weight"] = norm(d)
    if not spec.tied:
        w["output.weight"] = gaussian((n_vocab, d), 1.0 / np.sqrt(d))
    return w


def write_tiny_gemma3_gguf(path: Path, vocab_path: Path, spec: TinyGemma3Spec = TinyGemma3Spec()) -> str:
    """Writes a random-weights Gemma 3 GGUF with the vocabulary of `vocab_path` atomically and
    returns its sha256."""
    tokens, scores, types, special = _vocab(GGUFReader(vocab_path), spec.vocab_size)
    weights = _gemma3_weights(spec, len(tokens))

    def write(tmp: Path) -> None:
        writer = GGUFWriter(str(tmp), arch="gemma3")
        writer.add_name(spec.name)
        writer.add_context_length(spec.context_length)
        writer.add_embedding_length(spec.n_embd)
        writer.add_block_count(spec.n_layer)
        writer.add_feed_forward_length(spec.n_ff)
        writer.add_head_count(spec.n_head)
        writer.add_head_count_kv(spec.n_head_kv)
        writer.add_key_length(spec.head_dim)
        writer.add_value_length(spec.head_dim)
        writer.add_layer_norm_rms_eps(1e-6)
        writer.add_rope_freq_base(spec.rope_base)
        writer.add_float32("gemma3.rope.freq_base_swa", spec.rope_base_local)
        writer.add_sliding_window(spec.sliding_window)
        writer.add_uint32("gemma3.attention.sliding_window_pattern", spec.swa_pattern)
        _finish(writer, tokens, scores, types, special, weights)

    atomic_write_with(path, write)
    return sha256_file(path)


def _finish(
    writer: GGUFWriter,
    tokens: list[str],
    scores: list[float],
    types: list[int],
    special: dict[str, int],
    weights: dict[str, np.ndarray],
) -> None:
    """After a writer's architecture keys: the file type (all F32), the vocabulary, the
    tensors, and the file written and closed."""
    writer.add_file_type(0)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(special["bos_token_id"])
    writer.add_eos_token_id(special["eos_token_id"])
    writer.add_unk_token_id(special["unknown_token_id"])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    for name, tensor in weights.items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _write_gguf(
    tmp: Path,
    spec: TinyModelSpec,
    tokens: list[str],
    scores: list[float],
    types: list[int],
    special: dict[str, int],
    weights: dict[str, np.ndarray],
) -> None:
    writer = GGUFWriter(str(tmp), arch="llama")
    writer.add_name(spec.name)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(spec.n_embd // spec.n_head)
    _finish(writer, tokens, scores, types, special, weights)


def generator_fingerprint(
    spec: TinyModelSpec = TinyModelSpec(), draft: TinyModelSpec | None = DRAFT_SPEC
) -> str:
    """Changes whenever this module or a spec changes, so a stale bundle is rewritten."""
    return hashlib.sha256(Path(__file__).read_bytes() + repr((spec, draft)).encode()).hexdigest()


def bundle_is_current(
    bundle_dir: Path, spec: TinyModelSpec = TinyModelSpec(), draft: TinyModelSpec | None = DRAFT_SPEC
) -> bool:
    try:
        manifest = json.loads((bundle_dir / "manifest.json").read_text())
        models = [bundle_dir / manifest["text"]["model"]]
        if draft is not None:
            models.append(bundle_dir / manifest["draft"]["model"])
        return bool(
            manifest["generator"]["fingerprint"] == generator_fingerprint(spec, draft)
            and all(m.is_file() for m in models)
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def draft_model(bundle_dir: Path) -> Path | None:
    """The bundle's draft GGUF as its manifest names it; None when it names none."""
    try:
        manifest = json.loads((bundle_dir / "manifest.json").read_text())
        return bundle_dir / str(manifest["draft"]["model"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_tiny_bundle(
    bundle_dir: Path,
    vocab_path: Path,
    spec: TinyModelSpec = TinyModelSpec(),
    draft: TinyModelSpec | None = DRAFT_SPEC,
) -> Path:
    """Lays out <bundle>/text/<name>.gguf, <bundle>/draft/<draft name>.gguf (unless draft is
    None) and <bundle>/manifest.json; returns the manifest path."""
    model_rel = f"text/{spec.name}.gguf"
    digest = write_tiny_gguf(bundle_dir / model_rel, vocab_path, spec)
    manifest: dict[str, object] = {
        "format": "eliza-bundle/1",
        "name": spec.name,
        "text": {"model": model_rel, "sha256": digest, "context_length": spec.context_length},
        "generator": {
            "fingerprint": generator_fingerprint(spec, draft),
            "seed": spec.seed,
            "n_embd": spec.n_embd,
            "n_layer": spec.n_layer,
            "vocab": "ggml-vocab-llama-spm.gguf",
            "planted_chain": list(PLANTED_CHAIN),
        },
    }
    if draft is not None:
        draft_rel = f"draft/{draft.name}.gguf"
        manifest["draft"] = {
            "model": draft_rel,
            "sha256": write_tiny_gguf(bundle_dir / draft_rel, vocab_path, draft),
            "seed": draft.seed,
            "n_layer": draft.n_layer,
        }
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    return atomic_write_text(bundle_dir / "manifest.json", text)
