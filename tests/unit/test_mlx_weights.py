"""The MLX-LM weights directory derived from a llama GGUF (eliza.formats.mlx_weights).

The decisive test is two independent numpy forward passes: one reads only the converted
directory and ropes the standard half-rotation way (`rope_traditional: false`), the other
reads the GGUF and ropes adjacent pairs as llama.cpp's NORM mode does on the permuted Q and
K rows. They agree only when the names, shapes, transposition and the un-permutation of Q/K
are all right; a negative control shows they disagree when Q/K are left permuted.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import dequantize, quantize

import eliza
from eliza.app.errors import UsageError
from eliza.app.services.bundle import ensure_mlx_weights, tiny_vocab
from eliza.cli import main
from eliza.formats import mlx_weights
from eliza.formats.files import sha256_file
from eliza.formats.mlx_weights import (
    CONFIG_NAME,
    CONVERTER_VERSION,
    RECORD_NAME,
    WEIGHTS_NAME,
    MlxWeightsError,
    convert,
    stale_reason,
    unpermute_rope_rows,
)
from eliza.formats.tiny_gguf import TinyGemma3Spec, TinyModelSpec, write_tiny_gemma3_gguf, write_tiny_gguf
from tests.quantized_gguf import write_out

SPECS = {
    "tiny": TinyModelSpec(),
    "wider": TinyModelSpec(
        seed=5, n_embd=96, n_layer=3, n_head=6, n_head_kv=2, n_ff=160, vocab_size=30000, context_length=256
    ),
}
SEQUENCES = ([1, 8666], [1, 450, 4996, 310, 278, 8666, 29889], [1, 29871, 13, 100, 200, 300, 400, 500, 600])


# ------------------------------------------------------------------ fixtures and GGUF makers


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny model and a wider one of another shape (GQA groups of 2 and 3), written once."""
    root = tmp_path_factory.mktemp("ggufs")
    vocab = tiny_vocab()
    models = {}
    for name, spec in SPECS.items():
        models[name] = root / name / f"{name}.gguf"
        write_tiny_gguf(models[name], vocab, spec)
    return models


@pytest.fixture(scope="module")
def converted(ggufs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each of `ggufs` converted once (a read-only fixture: tests convert into their own folders)."""
    root = tmp_path_factory.mktemp("converted")
    return {name: convert(gguf, root / name).out_dir for name, gguf in ggufs.items()}


@pytest.fixture()
def small(tmp_path: Path) -> Path:
    """A small llama GGUF (no tokenizer: it reads in milliseconds) at <tmp>/text/small.gguf,
    as a bundle holds its model; the tests that convert many times use it."""
    (tmp_path / "text").mkdir()
    return write_llama_gguf(tmp_path / "text" / "small.gguf", tied=False, rope_base=None)


def write_llama_gguf(
    path: Path,
    *,
    arch: str = "llama",
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 2,
    n_head_kv: int = 2,
    n_ff: int = 96,
    n_vocab: int = 80,
    tied: bool = True,
    seed: int = 11,
    rope_base: float | None = 500000.0,
    types: Mapping[str, GGMLQuantizationType] | None = None,
    extra: Mapping[str, np.ndarray[Any, Any]] | None = None,
) -> Path:
    """A llama GGUF without tokenizer, of the shapes the tiny writer never makes: tied
    embeddings (no output.weight), another rope base, multi-head attention, and tensors
    stored as F16 and Q8_0 (by tensor kind in `types`, e.g. {"attn_q": Q8_0})."""
    rng = np.random.default_rng(seed)
    head_dim = n_embd // n_head

    def gaussian(*shape: int) -> np.ndarray[Any, Any]:
        return np.asarray(rng.standard_normal(shape) / np.sqrt(shape[-1]), dtype=np.float32)

    weights: dict[str, np.ndarray[Any, Any]] = {"token_embd.weight": gaussian(n_vocab, n_embd) * 8}
    for layer in range(n_layer):
        p = f"blk.{layer}."
        weights |= {
            p + "attn_norm.weight": (1 + 0.1 * rng.standard_normal(n_embd)).astype(np.float32),
            p + "attn_q.weight": gaussian(n_head * head_dim, n_embd) * 3,
            p + "attn_k.weight": gaussian(n_head_kv * head_dim, n_embd) * 3,
            p + "attn_v.weight": gaussian(n_head_kv * head_dim, n_embd),
            p + "attn_output.weight": gaussian(n_embd, n_head * head_dim),
            p + "ffn_norm.weight": (1 + 0.1 * rng.standard_normal(n_embd)).astype(np.float32),
            p + "ffn_gate.weight": gaussian(n_ff, n_embd),
            p + "ffn_up.weight": gaussian(n_ff, n_embd),
            p + "ffn_down.weight": gaussian(n_embd, n_ff),
        }
    weights["output_norm.weight"] = np.ones(n_embd, dtype=np.float32)
    if not tied:
        weights["output.weight"] = gaussian(n_vocab, n_embd)
    weights |= dict(extra or {})
    writer = GGUFWriter(str(path), arch=arch)
    writer.add_context_length(128)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_layer_norm_rms_eps(1e-6)
    if rope_base is not None:
        writer.add_rope_freq_base(rope_base)
    for name, tensor in weights.items():
        kind = name.split(".")[-2]
        qtype = (types or {}).get(kind, GGMLQuantizationType.F32)
        if qtype == GGMLQuantizationType.F32:
            writer.add_tensor(name, tensor)
        else:
            writer.add_tensor(name, quantize(tensor, qtype), raw_dtype=qtype)
    write_out(writer)
    return path


QUANTIZED = {
    "attn_q": GGMLQuantizationType.Q8_0,
    "attn_k": GGMLQuantizationType.F16,
    "ffn_up": GGMLQuantizationType.Q8_0,
    "token_embd": GGMLQuantizationType.F16,
}


# ------------------------------------------------------------------ independent readers


def llama_cpp_permute(w: np.ndarray[Any, Any], n_head: int) -> np.ndarray[Any, Any]:
    """convert_hf_to_gguf.py's permute of q_proj / k_proj, verbatim."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def reference_unpermute(w: np.ndarray[Any, Any], n_head: int) -> np.ndarray[Any, Any]:
    """The inverse derived from the permutation of row indices, not from the module's formula."""
    moved = llama_cpp_permute(np.arange(w.shape[0]), n_head)  # GGUF row r holds HF row moved[r]
    hf = np.empty_like(w)
    hf[moved] = w
    return hf


def read_safetensors(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray[Any, Any]]]:
    """(header, tensors): a quantized module's `.weight` as the float32 values its affine
    groups hold (unpacked here from the little-endian bit stream MLX documents, groups of
    32), its `.scales` and `.biases` not listed; every other tensor as stored."""
    raw = path.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    text = raw[8 : 8 + length].decode("utf-8")
    header = json.loads(text)
    data = raw[8 + length :]
    stored: dict[str, np.ndarray[Any, Any]] = {}
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] in ("F32", "U32"), name
        begin, stop = info["data_offsets"]
        assert begin == end, f"{name}: tensors not packed in header order"
        end = stop
        kind = "<f4" if info["dtype"] == "F32" else "<u4"
        stored[name] = np.frombuffer(data[begin:stop], dtype=kind).reshape(info["shape"])
    assert end == len(data), "data past the last tensor"
    tensors = {n: t for n, t in stored.items() if not n.endswith((".scales", ".biases"))}
    for name in [n for n in tensors if stored[n].dtype == np.uint32]:
        module = name.removesuffix(".weight")
        scales, biases = stored[module + ".scales"], stored[module + ".biases"]
        rows, words = stored[name].shape
        columns = scales.shape[1] * 32
        bits = words * 32 // columns
        stream = np.unpackbits(stored[name].astype("<u4").view(np.uint8), axis=1, bitorder="little")
        q = (stream.reshape(rows, columns, bits) << np.arange(bits, dtype=np.uint8)).sum(axis=2)
        grouped = q.reshape(rows, -1, 32).astype(np.float32) * scales[..., None] + biases[..., None]
        tensors[name] = grouped.reshape(rows, columns).astype(np.float32)
    return header, tensors


@functools.cache
def read_gguf(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray[Any, Any]]]:
    """(metadata values, tensors as numpy arrays of the reader's shape); read once per file."""
    reader = GGUFReader(path)
    values = {
        key: field.contents() for key, field in reader.fields.items() if not key.startswith("tokenizer.")
    }
    tensors = {}
    for t in reader.tensors:
        plain = t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16)
        array = np.asarray(t.data, dtype=np.float32) if plain else dequantize(t.data, t.tensor_type)
        tensors[t.name] = array.reshape(tuple(reversed(t.shape.tolist())))
    return values, tensors


def gguf_tensors(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    return read_gguf(path)[1]


def gguf_value(path: Path, key: str) -> Any:
    return read_gguf(path)[0].get(key)


# ------------------------------------------------------------------ two forward passes


@dataclass(frozen=True)
class Hyper:
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    eps: float
    theta: float


def rms_norm(x: np.ndarray[Any, Any], w: np.ndarray[Any, Any], eps: float) -> np.ndarray[Any, Any]:
    return np.asarray(x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w)


def inverse_frequencies(hp: Hyper) -> np.ndarray[Any, Any]:
    return np.asarray(hp.theta ** (-np.arange(0, hp.head_dim, 2) / hp.head_dim))


def rope_half(x: np.ndarray[Any, Any], hp: Hyper) -> np.ndarray[Any, Any]:
    """HF / MLX-LM (traditional=False): dimension i rotates with i + head_dim/2."""
    angles = np.arange(x.shape[0])[:, None, None] * inverse_frequencies(hp)
    half = hp.head_dim // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate(
        [x1 * np.cos(angles) - x2 * np.sin(angles), x2 * np.cos(angles) + x1 * np.sin(angles)], -1
    )


def rope_interleaved(x: np.ndarray[Any, Any], hp: Hyper) -> np.ndarray[Any, Any]:
    """llama.cpp's NORM mode: dimension 2i rotates with 2i + 1."""
    angles = np.arange(x.shape[0])[:, None, None] * inverse_frequencies(hp)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x1 * np.cos(angles) - x2 * np.sin(angles)
    out[..., 1::2] = x1 * np.sin(angles) + x2 * np.cos(angles)
    return out


Rope = Callable[[np.ndarray[Any, Any], Hyper], np.ndarray[Any, Any]]


def attention(
    x: np.ndarray[Any, Any],
    wq: np.ndarray[Any, Any],
    wk: np.ndarray[Any, Any],
    wv: np.ndarray[Any, Any],
    wo: np.ndarray[Any, Any],
    hp: Hyper,
    rope: Rope,
) -> np.ndarray[Any, Any]:
    n = x.shape[0]
    q = rope((x @ wq.T).reshape(n, hp.n_head, hp.head_dim), hp)
    k = rope((x @ wk.T).reshape(n, hp.n_head_kv, hp.head_dim), hp)
    v = (x @ wv.T).reshape(n, hp.n_head_kv, hp.head_dim)
    group = hp.n_head // hp.n_head_kv  # query head h reads key/value head h // group
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(hp.head_dim)
    scores[:, np.triu(np.ones((n, n), dtype=bool), 1)] = -np.inf
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out: np.ndarray[Any, Any] = np.einsum("hts,shd->thd", probs, v).reshape(n, hp.n_head * hp.head_dim) @ wo.T
    return out


def swiglu(
    x: np.ndarray[Any, Any], gate: np.ndarray[Any, Any], up: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    g = x @ gate.T
    return np.asarray(g / (1 + np.exp(-g)) * (x @ up.T))


def forward_mlx_dir(directory: Path, tokens: list[int]) -> np.ndarray[Any, Any]:
    """Logits of every position, from config.json and model.safetensors only."""
    config = json.loads((directory / "config.json").read_text())
    assert config["model_type"] == "llama" and config["rope_traditional"] is False
    _, raw = read_safetensors(directory / "model.safetensors")
    w = {name: t.astype(np.float64) for name, t in raw.items()}
    hp = Hyper(
        n_layer=config["num_hidden_layers"],
        n_head=config["num_attention_heads"],
        n_head_kv=config["num_key_value_heads"],
        head_dim=config["head_dim"],
        eps=config["rms_norm_eps"],
        theta=config["rope_theta"],
    )
    x = w["model.embed_tokens.weight"][tokens]
    for i in range(hp.n_layer):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], hp.eps)
        q, k, v, o = (w[f"{p}self_attn.{part}_proj.weight"] for part in ("q", "k", "v", "o"))
        x = x + attention(h, q, k, v, o, hp, rope_half)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], hp.eps)
        m = p + "mlp."
        x = x + swiglu(h, w[m + "gate_proj.weight"], w[m + "up_proj.weight"]) @ w[m + "down_proj.weight"].T
    head = w["model.embed_tokens.weight"] if config["tie_word_embeddings"] else w["lm_head.weight"]
    return np.asarray(rms_norm(x, w["model.norm.weight"], hp.eps) @ head.T)


def forward_gguf(path: Path, tokens: list[int]) -> np.ndarray[Any, Any]:
    """Logits of every position as llama.cpp computes them from the GGUF as stored."""
    w = {name: t.astype(np.float64) for name, t in gguf_tensors(path).items()}
    n_embd, n_head = (
        gguf_value(path, "llama.embedding_length"),
        gguf_value(path, "llama.attention.head_count"),
    )
    hp = Hyper(
        n_layer=gguf_value(path, "llama.block_count"),
        n_head=n_head,
        n_head_kv=gguf_value(path, "llama.attention.head_count_kv"),
        head_dim=n_embd // n_head,
        eps=gguf_value(path, "llama.attention.layer_norm_rms_epsilon"),
        theta=gguf_value(path, "llama.rope.freq_base") or 10000.0,
    )
    x = w["token_embd.weight"][tokens]
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        h = rms_norm(x, w[p + "attn_norm.weight"], hp.eps)
        q, k, v, o = (w[f"{p}attn_{part}.weight"] for part in ("q", "k", "v", "output"))
        x = x + attention(h, q, k, v, o, hp, rope_interleaved)
        h = rms_norm(x, w[p + "ffn_norm.weight"], hp.eps)
        x = x + swiglu(h, w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"]) @ w[p + "ffn_down.weight"].T
    head = w.get("output.weight", w["token_embd.weight"])
    return np.asarray(rms_norm(x, w["output_norm.weight"], hp.eps) @ head.T)


def assert_same_predictions(gguf: Path, directory: Path, vocab: int) -> None:
    for sequence in SEQUENCES:
        tokens = [t % vocab for t in sequence]
        expected, actual = forward_gguf(gguf, tokens), forward_mlx_dir(directory, tokens)
        assert np.argmax(actual[-1]) == np.argmax(expected[-1]), tokens
        assert list(np.argmax(actual, -1)) == list(np.argmax(expected, -1)), tokens
        np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=0)


# ------------------------------------------------------------------ the tests


def test_unpermute_inverts_llama_cpps_permute_for_random_shapes() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        n_head = int(rng.integers(1, 9))
        head_dim = 2 * int(rng.integers(1, 17))
        tail = () if rng.integers(0, 4) == 0 else (int(rng.integers(1, 20)),)
        x = rng.standard_normal((n_head * head_dim, *tail))
        np.testing.assert_array_equal(llama_cpp_permute(unpermute_rope_rows(x, n_head), n_head), x)
        np.testing.assert_array_equal(unpermute_rope_rows(llama_cpp_permute(x, n_head), n_head), x)
        np.testing.assert_array_equal(unpermute_rope_rows(x, n_head), reference_unpermute(x, n_head))
    with pytest.raises(ValueError, match="heads"):
        unpermute_rope_rows(np.zeros((10, 4)), 2)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_config_holds_the_ggufs_hyper_parameters(
    ggufs: dict[str, Path], converted: dict[str, Path], name: str
) -> None:
    spec, gguf = SPECS[name], ggufs[name]
    text = (converted[name] / CONFIG_NAME).read_text()
    config = json.loads(text)
    assert text == json.dumps(config, indent=2, sort_keys=True) + "\n"
    assert config == {
        "model_type": "llama",
        "hidden_size": spec.n_embd,
        "num_hidden_layers": spec.n_layer,
        "intermediate_size": spec.n_ff,
        "num_attention_heads": spec.n_head,
        "num_key_value_heads": spec.n_head_kv,
        "head_dim": spec.n_embd // spec.n_head,
        "rms_norm_eps": 1e-05,  # llama.attention.layer_norm_rms_epsilon, a float32 in the GGUF
        "vocab_size": spec.vocab_size or 32000,
        "rope_theta": 10000.0,  # no llama.rope.freq_base in the tiny GGUFs: llama.cpp's default
        "rope_traditional": False,
        "max_position_embeddings": spec.context_length,
        "tie_word_embeddings": False,
    }
    assert gguf_value(gguf, "llama.attention.head_count_kv") == spec.n_head_kv
    assert gguf_value(gguf, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)


def test_tied_quantized_gguf_converts_with_its_rope_base(tmp_path: Path) -> None:
    gguf = write_llama_gguf(tmp_path / "q.gguf", types=QUANTIZED)
    types = {t.name: t.tensor_type for t in GGUFReader(gguf).tensors}
    assert types["blk.0.attn_q.weight"] == GGMLQuantizationType.Q8_0
    assert types["token_embd.weight"] == GGMLQuantizationType.F16
    convert(gguf, tmp_path / "mlx")
    config = json.loads((tmp_path / "mlx" / CONFIG_NAME).read_text())
    assert (config["rope_theta"], config["tie_word_embeddings"], config["rms_norm_eps"]) == (
        500000.0,
        True,
        1e-06,
    )
    _, tensors = read_safetensors(tmp_path / "mlx" / WEIGHTS_NAME)
    assert "lm_head.weight" not in tensors
    source = gguf_tensors(gguf)
    np.testing.assert_array_equal(tensors["model.embed_tokens.weight"], source["token_embd.weight"])
    np.testing.assert_array_equal(
        tensors["model.layers.1.self_attn.q_proj.weight"],
        reference_unpermute(source["blk.1.attn_q.weight"], 2),
    )
    assert_same_predictions(gguf, tmp_path / "mlx", vocab=80)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_tensor_is_the_ggufs_with_q_and_k_unpermuted(
    ggufs: dict[str, Path], converted: dict[str, Path], name: str
) -> None:
    spec, gguf = SPECS[name], ggufs[name]
    raw = (converted[name] / WEIGHTS_NAME).read_bytes()
    length = int.from_bytes(raw[:8], "little")
    assert length % 8 == 0 and raw[8 : 8 + length].decode().rstrip(" ").endswith("}")
    header, tensors = read_safetensors(converted[name] / WEIGHTS_NAME)
    assert header["__metadata__"] == {"format": "mlx"}
    assert list(tensors) == sorted(tensors)
    reader = GGUFReader(gguf)
    k = next(t for t in reader.tensors if t.name == "blk.0.attn_k.weight")
    # ggml's ne is (in, out); the reader's numpy view reverses it to (out, in), the HF layout.
    assert list(k.shape) == [spec.n_embd, spec.n_head_kv * spec.n_embd // spec.n_head]
    assert tensors["model.layers.0.self_attn.k_proj.weight"].shape == tuple(reversed(k.shape.tolist()))
    expected_names = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    source = gguf_tensors(gguf)
    renames = {
        "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    }  # fmt: skip
    for layer in range(spec.n_layer):
        for kind, hf in renames.items():
            value = source[f"blk.{layer}.{kind}.weight"]
            if kind == "attn_q":
                value = reference_unpermute(value, spec.n_head)
            if kind == "attn_k":
                value = reference_unpermute(value, spec.n_head_kv)
            mlx_name = f"model.layers.{layer}.{hf}.weight"
            expected_names.add(mlx_name)
            assert tensors[mlx_name].tobytes() == value.astype("<f4").tobytes(), mlx_name
    assert set(tensors) == expected_names
    assert tensors["model.embed_tokens.weight"].tobytes() == source["token_embd.weight"].tobytes()
    assert tensors["lm_head.weight"].tobytes() == source["output.weight"].tobytes()
    assert tensors["model.norm.weight"].tobytes() == source["output_norm.weight"].tobytes()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_directory_computes_what_llama_cpp_computes(
    ggufs: dict[str, Path], converted: dict[str, Path], name: str
) -> None:
    assert_same_predictions(ggufs[name], converted[name], vocab=SPECS[name].vocab_size or 32000)


def test_the_forward_passes_tell_permuted_q_and_k_apart(
    ggufs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The negative control: left in llama.cpp's row order, Q and K rope the wrong pairs."""
    monkeypatch.setattr(mlx_weights.llama, "unpermute_rope_rows", lambda w, n_head: w)
    convert(ggufs["tiny"], tmp_path / "mlx")
    tokens = SEQUENCES[1]
    difference = np.abs(forward_mlx_dir(tmp_path / "mlx", tokens) - forward_gguf(ggufs["tiny"], tokens))
    assert difference[0].max() < 1e-4  # position 0: rope is the identity
    assert difference[1:].max() > 1e-2


def test_conversion_is_byte_identical_run_twice(
    ggufs: dict[str, Path], converted: dict[str, Path], tmp_path: Path
) -> None:
    first = converted["wider"]
    record = convert(ggufs["wider"], tmp_path / "again")
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted([CONFIG_NAME, WEIGHTS_NAME, RECORD_NAME])
    for file in names:
        assert (first / file).read_bytes() == (tmp_path / "again" / file).read_bytes(), file
    assert record.tensor_count == 2 + 9 * SPECS["wider"].n_layer + 1
    assert record.files == {f: sha256_file(first / f) for f in (CONFIG_NAME, WEIGHTS_NAME)}
    assert json.loads((first / RECORD_NAME).read_text()) == {
        "format": "eliza-mlx-weights/1",
        "converter_version": CONVERTER_VERSION,
        "eliza_version": eliza.__version__,
        "source_gguf": "wider.gguf",
        "source_sha256": sha256_file(ggufs["wider"]),
        "files": dict(record.files),
        "dense": False,
        "requantized": {},
    }


def assert_one_line_naming(reason: str | None, directory: Path, gguf: Path, *words: str) -> None:
    assert reason is not None
    assert "\n" not in reason and str(directory) in reason, reason
    assert reason.endswith(f"eliza mlx-weights {gguf}") or reason.endswith(f"--out {directory}"), reason
    for word in words:
        assert word in reason, reason


def test_stale_reason_names_what_changed(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = small.parent / "mlx"
    assert stale_reason(small, out) is not None  # never converted
    assert_one_line_naming(stale_reason(small, out), out, small, RECORD_NAME)
    convert(small, out)
    assert stale_reason(small, out) is None

    other_gguf = write_llama_gguf(small.parent.parent / "other.gguf", seed=12)
    convert(other_gguf, out)  # (a) another GGUF's weights
    assert_one_line_naming(
        stale_reason(small, out),
        out,
        small,
        sha256_file(small)[:12],
        sha256_file(other_gguf)[:12],
        "other.gguf",
    )
    convert(small, out)

    weights = out / WEIGHTS_NAME  # (b) one byte of the weights
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    assert_one_line_naming(stale_reason(small, out), out, small, WEIGHTS_NAME, "changed")
    convert(small, out)

    monkeypatch.setattr(mlx_weights, "CONVERTER_VERSION", "9")  # another converter
    assert_one_line_naming(stale_reason(small, out), out, small, f"'{CONVERTER_VERSION}'", "'9'")
    monkeypatch.undo()

    (out / RECORD_NAME).unlink()  # (c) no record
    assert_one_line_naming(stale_reason(small, out), out, small, RECORD_NAME)
    other = small.parent.parent / "elsewhere"
    assert_one_line_naming(stale_reason(small, other), other, small, RECORD_NAME, "--out")


def test_a_gguf_of_another_architecture_is_refused(tmp_path: Path) -> None:
    gguf = write_llama_gguf(tmp_path / "gpt.gguf", arch="gpt2")
    with pytest.raises(MlxWeightsError) as refused:
        convert(gguf, tmp_path / "mlx")
    message = str(refused.value)
    assert "\n" not in message and str(gguf) in message and "'gpt2'" in message
    assert not (tmp_path / "mlx").exists()


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p, ("no such GGUF",)),
        (lambda p: p.write_text("not a model\n") and p, ("not a readable GGUF",)),
        (
            lambda p: write_llama_gguf(p, extra={"rope_freqs.weight": np.ones(16, dtype=np.float32)}),
            ("rope_freqs.weight",),
        ),
        (
            lambda p: write_llama_gguf(p, extra={"blk.0.attn_q.bias": np.ones(64, dtype=np.float32)}),
            ("attn_q.bias",),
        ),
    ],
    ids=["missing", "not-gguf", "llama3-rope", "bias"],
)
def test_bad_input_is_one_line_naming_the_file(
    tmp_path: Path, make: Callable[[Path], object], words: tuple[str, ...]
) -> None:
    gguf = tmp_path / "m.gguf"
    make(gguf)
    with pytest.raises(MlxWeightsError) as refused:
        convert(gguf, tmp_path / "mlx")
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{gguf}: "), message
    assert all(w in message for w in words), message
    assert sorted(p.name for p in tmp_path.iterdir()) == (["m.gguf"] if gguf.exists() else [])


def test_an_out_dir_holding_the_gguf_is_refused(small: Path) -> None:
    with pytest.raises(MlxWeightsError, match="would be replaced whole"):
        convert(small, small.parent)
    assert small.is_file()


def test_an_interrupted_conversion_leaves_nothing_half_written(
    small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = small.parent / "mlx"

    def interrupted(path: Path, tensors: object) -> str:
        path.write_bytes(b"partial")
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(mlx_weights, "write_safetensors", interrupted)
        with pytest.raises(KeyboardInterrupt):
            convert(small, out)
    assert sorted(p.name for p in small.parent.iterdir()) == [small.name]

    convert(small, out)  # an older conversion stays whole when the next one is interrupted
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with monkeypatch.context() as m:
        m.setattr(mlx_weights, "write_safetensors", interrupted)
        with pytest.raises(KeyboardInterrupt):
            convert(small, out)
    assert sorted(p.name for p in small.parent.iterdir()) == sorted([small.name, "mlx"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert stale_reason(small, out) is None


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def test_a_killed_writers_temporary_directory_is_removed(small: Path) -> None:
    dead = next(pid for pid in range(4_000_000, 4_100_000) if not process_alive(pid))
    leftover = small.parent / f".mlx.{dead}.abcd1234.tmp"
    (leftover / "sub").mkdir(parents=True)
    (leftover / "sub" / "model.safetensors").write_bytes(b"half")
    alive = small.parent / f".mlx.{os.getpid()}.abcd1234.tmp"  # a live writer's: not touched
    alive.mkdir()
    convert(small, small.parent / "mlx")
    assert sorted(p.name for p in small.parent.iterdir()) == sorted([small.name, "mlx", alive.name])


def test_ensure_mlx_weights_rewrites_only_a_stale_directory(small: Path) -> None:
    bundle = small.parent.parent
    out = ensure_mlx_weights(bundle)
    assert out == bundle / "text" / "mlx" and stale_reason(small, out) is None
    first = (out / WEIGHTS_NAME).stat()
    assert ensure_mlx_weights(bundle) == out
    assert (out / WEIGHTS_NAME).stat().st_ino == first.st_ino  # current: left as it was
    (out / RECORD_NAME).unlink()
    ensure_mlx_weights(bundle)
    assert stale_reason(small, out) is None and (out / WEIGHTS_NAME).stat().st_ino != first.st_ino
    shutil.copyfile(small, small.parent / "second.gguf")
    with pytest.raises(UsageError, match=r"exactly one \.gguf.*second\.gguf, small\.gguf"):
        ensure_mlx_weights(bundle)


def test_the_command_converts_and_reports_one_line(small: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mlx-weights", str(small)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 1 and err == ""
    assert lines[0].startswith(
        f"{small.parent / 'mlx'}: 21 tensors (float32, as the GGUF stores them), "
    ) and lines[0].endswith(" s")
    assert stale_reason(small, small.parent / "mlx") is None

    assert main(["mlx-weights", str(small), "--out", str(small.parent / "elsewhere")]) == 0
    assert stale_reason(small, small.parent / "elsewhere") is None
    capsys.readouterr()

    for bad in (small.parent / "missing.gguf", small.parent / "mlx" / CONFIG_NAME):
        assert main(["mlx-weights", str(bad)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1 and str(bad) in err, err


# MLX-LM's own llama model loading a converted directory (strict: every tensor it expects,
# no other) and computing the logits: an independent reader of the layout. In a process of
# its own, so the mlx Python package's libmlx never shares one with a library under test.
MLX_LM_FORWARD = """
import json, sys
import numpy as np
import mlx.core as mx
from mlx_lm.models import llama
directory, tokens = sys.argv[1], json.loads(sys.argv[2])
config = json.load(open(directory + "/config.json"))
model = llama.Model(llama.ModelArgs.from_dict(config))
weights = model.sanitize(mx.load(directory + "/model.safetensors"))
model.load_weights(list(weights.items()), strict=True)
logits = model(mx.array([tokens]))[0].astype(mx.float32)
np.save(sys.argv[3], np.array(logits))
"""


def test_mlx_lm_loads_the_directory_and_computes_what_llama_cpp_computes(
    ggufs: dict[str, Path], converted: dict[str, Path], tmp_path: Path
) -> None:
    import importlib.util

    if importlib.util.find_spec("mlx_lm") is None or importlib.util.find_spec("mlx") is None:
        pytest.fail("mlx and mlx-lm are test dependencies (pyproject's test extras); install them: "
                    'pip install -e ".[test]"')  # fmt: skip
    tokens = [1, 450, 4996, 17354, 1701, 29916]
    for key, directory in converted.items():
        out = tmp_path / f"{key}.npy"
        done = subprocess.run(
            [sys.executable, "-c", MLX_LM_FORWARD, str(directory), json.dumps(tokens), str(out)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        theirs = np.load(out)
        ours = forward_gguf(ggufs[key], tokens)
        assert theirs.shape == ours.shape
        assert (theirs.argmax(-1) == ours.argmax(-1)).all(), key
        assert float(np.abs(theirs - ours).max()) < 1e-3, key


# ------------------------------------------------------------------ Gemma 3

GEMMA_SPECS = {
    "gemma-tiny": TinyGemma3Spec(),  # the backend tests' bundle model
    "gemma-other": TinyGemma3Spec(
        seed=3, n_embd=64, n_layer=5, n_head=4, n_head_kv=2, head_dim=24, n_ff=112,
        sliding_window=4, swa_pattern=2, rope_base=50000.0, rope_base_local=5000.0, tied=False,
        vocab_size=3000, context_length=256,
    ),
}  # fmt: skip
# Longer than either model's window, so the local layers drop keys; inside either vocabulary.
GEMMA_TOKENS = [1, 450, 2996, 1354, 1701, 2916, 975, 278, 1766, 1203, 2889, 13, 1576, 2903]
GEMMA_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_output": "self_attn.o_proj", "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "post_ffw_norm": "post_feedforward_layernorm",
}  # fmt: skip
PATTERN_KEY = "gemma3.attention.sliding_window_pattern"
GEMMA_NORMS = {"attn_norm", "attn_q_norm", "attn_k_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"}


@pytest.fixture(scope="module")
def gemma_ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gemma-ggufs")
    models = {}
    for name, spec in GEMMA_SPECS.items():
        models[name] = root / f"{name}.gguf"
        write_tiny_gemma3_gguf(models[name], tiny_vocab(), spec)
    return models


@pytest.fixture(scope="module")
def gemma_converted(
    gemma_ggufs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gemma-converted")
    return {name: convert(gguf, root / name).out_dir for name, gguf in gemma_ggufs.items()}


def write_gemma3_gguf(
    path: Path,
    *,
    n_layer: int = 2,
    window: int | None = 4,
    pattern: int | list[bool] | None = 2,
    drop: str = "",
    keys: Callable[[GGUFWriter], None] | None = None,
) -> Path:
    """A small gemma3 GGUF without tokenizer (64 wide, 2 heads of 32, one KV head, 50 tokens)
    whose sliding-window keys, one missing tensor or `keys` make the variants to refuse."""
    rng = np.random.default_rng(5)
    d, hd, ff, vocab = 64, 32, 96, 50
    shapes = {
        "attn_norm": (d,), "attn_q": (2 * hd, d), "attn_k": (hd, d), "attn_v": (hd, d), "attn_q_norm": (hd,),
        "attn_k_norm": (hd,), "attn_output": (d, 2 * hd), "post_attention_norm": (d,), "ffn_norm": (d,),
        "ffn_gate": (ff, d), "ffn_up": (ff, d), "ffn_down": (d, ff), "post_ffw_norm": (d,),
    }  # fmt: skip
    weights = {"token_embd.weight": (vocab, d), "output_norm.weight": (d,)}
    weights |= {f"blk.{i}.{kind}.weight": shape for i in range(n_layer) for kind, shape in shapes.items()}
    writer = GGUFWriter(str(path), arch="gemma3")
    writer.add_context_length(128)
    writer.add_embedding_length(d)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(2)
    writer.add_head_count_kv(1)
    writer.add_key_length(hd)
    writer.add_value_length(hd)
    writer.add_layer_norm_rms_eps(1e-6)
    if window is not None:
        writer.add_sliding_window(window)
    if isinstance(pattern, list):
        writer.add_array("gemma3.attention.sliding_window_pattern", pattern)
    elif pattern is not None:
        writer.add_uint32("gemma3.attention.sliding_window_pattern", pattern)
    if keys is not None:
        keys(writer)
    for name, shape in weights.items():
        if drop and drop in name:
            continue
        writer.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    write_out(writer)
    return path


@pytest.mark.parametrize("name", sorted(GEMMA_SPECS))
def test_gemma3_config_holds_the_ggufs_hyper_parameters(gemma_converted: dict[str, Path], name: str) -> None:
    spec = GEMMA_SPECS[name]
    text = (gemma_converted[name] / CONFIG_NAME).read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    assert json.loads(text) == {
        "model_type": "gemma3_text",
        "hidden_size": spec.n_embd,
        "num_hidden_layers": spec.n_layer,
        "intermediate_size": spec.n_ff,
        "num_attention_heads": spec.n_head,
        "num_key_value_heads": spec.n_head_kv,
        "head_dim": spec.head_dim,
        "rms_norm_eps": 1e-06,
        "vocab_size": spec.vocab_size or 32000,
        "rope_theta": spec.rope_base,
        "rope_local_base_freq": spec.rope_base_local,
        "query_pre_attn_scalar": spec.head_dim,
        "sliding_window": spec.sliding_window,
        "sliding_window_pattern": spec.swa_pattern,
        "max_position_embeddings": spec.context_length,
        "tie_word_embeddings": spec.tied,
    }


@pytest.mark.parametrize("name", sorted(GEMMA_SPECS))
def test_every_gemma3_tensor_is_the_ggufs_with_the_norms_one_lower(
    gemma_ggufs: dict[str, Path], gemma_converted: dict[str, Path], name: str
) -> None:
    spec = GEMMA_SPECS[name]
    _, tensors = read_safetensors(gemma_converted[name] / WEIGHTS_NAME)
    source = gguf_tensors(gemma_ggufs[name])
    expected = {
        "model.embed_tokens.weight": source["token_embd.weight"],
        "model.norm.weight": source["output_norm.weight"] - np.float32(1),
    }
    if not spec.tied:
        expected["lm_head.weight"] = source["output.weight"]
    for layer in range(spec.n_layer):
        for kind, mlx in GEMMA_LAYER_NAMES.items():
            value = source[f"blk.{layer}.{kind}.weight"]  # Q and K as stored: NEOX rope, no permutation
            expected[f"model.layers.{layer}.{mlx}.weight"] = (
                value - np.float32(1) if kind in GEMMA_NORMS else value
            )
    assert set(tensors) == set(expected)
    for key, value in expected.items():
        assert tensors[key].tobytes() == value.astype("<f4").tobytes(), key
    # What MLX-LM adds back gives the GGUF's weights (the tiny models' norms are near 1).
    np.testing.assert_array_equal(1 + tensors["model.norm.weight"], source["output_norm.weight"])


# MLX-LM's gemma3_text loading a converted directory strictly and computing every position's
# logits twice: as MLX-LM computes them, and with the embeddings given so that its bfloat16
# rounding of sqrt(hidden_size) is undone (llama.cpp and the reference scale by the float).
MLX_LM_GEMMA3 = """
import json, math, sys
import numpy as np
import mlx.core as mx
from mlx_lm.models import gemma3_text
directory, tokens = sys.argv[1], json.loads(sys.argv[2])
config = json.load(open(directory + "/config.json"))
args = gemma3_text.ModelArgs.from_dict(config)
model = gemma3_text.Model(args)
weights = model.sanitize(mx.load(directory + "/model.safetensors"))
model.load_weights(list(weights.items()), strict=True)
assert model.tie_word_embeddings == config["tie_word_embeddings"]
ids = mx.array([tokens])
rounded = mx.array(args.hidden_size**0.5, mx.bfloat16).astype(mx.float32)
exact = model.model.embed_tokens(ids) * (math.sqrt(args.hidden_size) / rounded)
np.save(sys.argv[3], np.stack([np.array(model(ids)[0]), np.array(model(ids, input_embeddings=exact)[0])]))
"""


def test_mlx_lm_loads_the_gemma3_directory_and_computes_the_reference_logits(
    gemma_ggufs: dict[str, Path], gemma_converted: dict[str, Path], tmp_path: Path
) -> None:
    """Against tests/gemma3_reference (float64, from the GGUF as stored): with the embedding
    scale as llama.cpp's, every logit within 1e-4 (float32 rounding over a few layers); as
    MLX-LM computes it (sqrt(hidden_size) rounded to bfloat16, a relative error of up to
    2^-9 on every embedding), the same argmax everywhere and the logits within 2e-2."""
    from tests.gemma3_reference import reference_logits

    for name, directory in gemma_converted.items():
        out = tmp_path / f"{name}.npy"
        done = subprocess.run(
            [sys.executable, "-c", MLX_LM_GEMMA3, str(directory), json.dumps(GEMMA_TOKENS), str(out)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        as_mlx_lm, exact = np.load(out)
        reference = reference_logits(gemma_ggufs[name], GEMMA_TOKENS)
        assert exact.shape == reference.shape == (len(GEMMA_TOKENS), GEMMA_SPECS[name].vocab_size or 32000)
        assert float(np.abs(exact - reference).max()) < 1e-4, name
        assert (as_mlx_lm.argmax(-1) == reference.argmax(-1)).all(), name
        assert float(np.abs(as_mlx_lm - reference).max()) < 2e-2, name


def test_gemma3_conversion_is_byte_identical_and_the_command_reports_it(
    gemma_ggufs: dict[str, Path], gemma_converted: dict[str, Path], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    gguf = gemma_ggufs["gemma-other"]
    assert main(["mlx-weights", str(gguf), "--out", str(tmp_path / "again")]) == 0
    spec = GEMMA_SPECS["gemma-other"]
    assert capsys.readouterr().out.startswith(
        f"{tmp_path / 'again'}: {2 + 13 * spec.n_layer + 1} tensors (float32, as the GGUF stores them), "
    )
    for file in (CONFIG_NAME, WEIGHTS_NAME, RECORD_NAME):
        assert (gemma_converted["gemma-other"] / file).read_bytes() == (
            tmp_path / "again" / file
        ).read_bytes()
    assert stale_reason(gguf, tmp_path / "again") is None


def test_a_gemma3_without_sliding_window_is_global_in_every_layer(tmp_path: Path) -> None:
    for window in (None, 0):
        gguf = write_gemma3_gguf(tmp_path / f"w{window}.gguf", window=window, pattern=None)
        convert(gguf, tmp_path / f"w{window}")
        config = json.loads((tmp_path / f"w{window}" / CONFIG_NAME).read_text())
        assert (config["sliding_window"], config["sliding_window_pattern"]) == (0, 1)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: write_gemma3_gguf(p, pattern=[True, False]), (PATTERN_KEY, "per-layer")),
        (lambda p: write_gemma3_gguf(p, keys=lambda w: w.add_float32("gemma3.final_logit_softcapping", 30.0)),
         ("gemma3.final_logit_softcapping",)),
        (lambda p: write_gemma3_gguf(p, keys=lambda w: (w.add_string("gemma3.rope.scaling.type", "linear"),
                                                        w.add_float32("gemma3.rope.scaling.factor", 8.0))),
         ("gemma3.rope.scaling.type", "linear")),
        (lambda p: write_gemma3_gguf(p, pattern=0), (PATTERN_KEY, "0")),
        (lambda p: write_gemma3_gguf(p, pattern=3), (PATTERN_KEY, "3", "2 layers")),
        (lambda p: write_gemma3_gguf(p, n_layer=62), ("62 layers", "27B")),
        (lambda p: write_gemma3_gguf(p, drop="blk.1.attn_k_norm"), ("blk.1.attn_k_norm.weight", "missing")),
    ],
    ids=["pattern-array", "softcap", "rope-scaling", "all-sliding", "no-global-layer", "27b", "no-k-norm"],
)  # fmt: skip
def test_unsupported_gemma3_variants_are_refused_naming_file_and_key(
    tmp_path: Path, make: Callable[[Path], object], words: tuple[str, ...]
) -> None:
    gguf = tmp_path / "m.gguf"
    make(gguf)
    with pytest.raises(MlxWeightsError) as refused:
        convert(gguf, tmp_path / "mlx")
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{gguf}: "), message
    assert all(w in message for w in words), message
    assert not (tmp_path / "mlx").exists()
