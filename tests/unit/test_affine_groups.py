"""A GGUF's quantized weights as MLX affine groups (eliza.formats.gguf_models.affine, and the
MLX converter over it): every exact type comes back from MLX's own `dequantize`, and from
MLX-LM's strict load of a converted directory, as exactly gguf's dequantization of the
file; the types without an exact form are quantized again to 8 bits with the error they
add measured and recorded. MLX runs in a process of its own (its libmlx never shares one
with a library under test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import dequantize

from eliza.formats.gguf_models import affine
from eliza.formats.mlx_weights import CONFIG_NAME, RECORD_NAME, convert, stale_reason
from tests.quantized_gguf import stored, write_out

Q = GGMLQuantizationType
EXACT = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q5_K)
REQUANTIZED = (Q.Q6_K, Q.Q3_K, Q.Q2_K)


def gguf_values(tensor: Any) -> np.ndarray[Any, Any]:
    values = dequantize(tensor.data, tensor.tensor_type)
    return np.asarray(values, dtype=np.float32).reshape(tuple(reversed(tensor.shape.tolist())))


def one_tensor_gguf(path: Path, qtype: GGMLQuantizationType, rows: int = 8, columns: int = 512) -> Any:
    rng = np.random.default_rng(int(qtype))
    writer = GGUFWriter(str(path), arch="llama")
    data = stored(rng.standard_normal((rows, columns)).astype(np.float32), qtype, rng)
    writer.add_tensor("w", data, raw_dtype=qtype)
    write_out(writer)
    return GGUFReader(path).tensors[0]


def same_numbers(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    """Bit for bit, but for the sign of a zero (d * 0 against d * 16 - 16 * d)."""
    return bool(np.array_equal((a + np.float32(0)).view(np.uint32), (b + np.float32(0)).view(np.uint32)))


# Every case's groups in one process: (packed, scales, biases, bits) in, MLX's values out.
MLX_DEQUANTIZE = """
import sys, numpy as np, mlx.core as mx
cases = np.load(sys.argv[1])
out = {}
for name in sorted({k.split(":")[0] for k in cases.files}):
    w = mx.dequantize(mx.array(cases[name + ":packed"]), mx.array(cases[name + ":scales"]),
                      mx.array(cases[name + ":biases"]), group_size=32, bits=int(cases[name + ":bits"]))
    out[name] = np.array(w.astype(mx.float32))
np.savez(sys.argv[2], **out)
"""


def pack_cases() -> dict[str, tuple[Any, Any, Any, int]]:
    """name -> (packed, scales, biases, bits) of every case the tests hand MLX."""
    cases: dict[str, tuple[Any, Any, Any, int]] = {}
    for bits in (2, 3, 4, 5, 6, 8):
        q = np.random.default_rng(bits).integers(0, 1 << bits, size=(3, 128), dtype=np.uint8)
        cases[f"pack{bits}"] = (
            affine.pack(q, bits),
            np.ones((3, 4), np.float32),
            np.zeros((3, 4), np.float32),
            bits,
        )
    return cases


@pytest.fixture(scope="module")
def one_tensor(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    """For each type: (its GGUF tensor, its groups); "mlx" -> MLX's dequantization of each
    type's packed groups and of the packing cases, computed in one process."""
    root = tmp_path_factory.mktemp("one-tensor")
    found: dict[str, Any] = {}
    cases = pack_cases()
    for qtype in (*EXACT, *REQUANTIZED):
        path = root / f"{qtype.name}.gguf"
        tensor = one_tensor_gguf(path, qtype)
        groups = affine.decompose(path, tensor, ValueError)
        found[qtype.name] = (tensor, groups)
        cases[qtype.name] = (affine.pack(groups.q, groups.bits), groups.scales, groups.biases, groups.bits)
    arrays = {
        f"{n}:{part}": v
        for n, c in cases.items()
        for part, v in zip(("packed", "scales", "biases", "bits"), c, strict=True)
    }
    np.savez(root / "in.npz", **arrays)
    done = subprocess.run(
        [sys.executable, "-c", MLX_DEQUANTIZE, str(root / "in.npz"), str(root / "out.npz")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found["mlx"] = dict(np.load(root / "out.npz"))
    return found


@pytest.mark.parametrize("qtype", EXACT, ids=lambda t: t.name)
def test_an_exact_type_comes_back_from_mlx_as_gguf_dequantizes_it(
    qtype: GGMLQuantizationType, one_tensor: dict[str, Any]
) -> None:
    tensor, groups = one_tensor[qtype.name]
    assert groups.exact and groups.relative_rms_error == 0.0 and groups.bits == affine.bits_of(tensor)
    assert int(groups.q.max()) < 1 << groups.bits
    expected = gguf_values(tensor)
    assert same_numbers(groups.values(), expected)
    assert affine.pack(groups.q, groups.bits).shape == (8, 512 * groups.bits // 32)
    assert same_numbers(one_tensor["mlx"][qtype.name], expected)


@pytest.mark.parametrize("qtype", REQUANTIZED, ids=lambda t: t.name)
def test_a_type_without_an_exact_form_is_quantized_again_to_8_bits_with_its_error_measured(
    qtype: GGMLQuantizationType, one_tensor: dict[str, Any]
) -> None:
    tensor, groups = one_tensor[qtype.name]
    expected = gguf_values(tensor)
    error = groups.values() - expected
    measured = float(
        np.sqrt(np.mean(error.astype(np.float64) ** 2) / np.mean(expected.astype(np.float64) ** 2))
    )
    assert not groups.exact and groups.bits == 8
    assert groups.relative_rms_error == pytest.approx(measured, rel=1e-6)
    assert 0 < measured < 0.01  # 8 bits over a group's range: well under 1 %
    assert same_numbers(one_tensor["mlx"][qtype.name], groups.values())


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_packing_is_mlxs_bit_layout_for_every_width(bits: int, one_tensor: dict[str, Any]) -> None:
    q = np.random.default_rng(bits).integers(0, 1 << bits, size=(3, 128), dtype=np.uint8)
    np.testing.assert_array_equal(one_tensor["mlx"][f"pack{bits}"], q.astype(np.float32))


# ------------------------------------------------------------------ whole models

TYPES = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.F16)
MODULES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}  # fmt: skip


def model_gguf(path: Path, arch: str, qtype: GGMLQuantizationType) -> Path:
    """A random-weights llama or gemma3 GGUF (256 wide: the K-quants' rows) whose matrices
    are all of `qtype`, the embedding tied, the norms float32."""
    rng = np.random.default_rng(int(qtype) + len(arch))
    d, ff, heads, kv_heads, head_dim, vocab, layers = 256, 256, 2, 1, 128, 64, 2
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (vocab, d), "output_norm.weight": (d,)}
    kinds = {
        "attn_norm": (d,), "attn_q": (heads * head_dim, d), "attn_k": (kv_heads * head_dim, d),
        "attn_v": (kv_heads * head_dim, d), "attn_output": (d, heads * head_dim), "ffn_norm": (d,),
        "ffn_gate": (ff, d), "ffn_up": (ff, d), "ffn_down": (d, ff),
    }  # fmt: skip
    if arch == "gemma3":
        kinds |= {"attn_q_norm": (head_dim,), "attn_k_norm": (head_dim,), "post_attention_norm": (d,),
                  "post_ffw_norm": (d,)}  # fmt: skip
    shapes |= {f"blk.{i}.{kind}.weight": shape for i in range(layers) for kind, shape in kinds.items()}
    writer = GGUFWriter(str(path), arch=arch)
    writer.add_context_length(128)
    writer.add_embedding_length(d)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    if arch == "gemma3":
        writer.add_sliding_window(4)
        writer.add_uint32("gemma3.attention.sliding_window_pattern", 2)
    for name, shape in shapes.items():
        values = (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
        if len(shape) == 1:
            writer.add_tensor(name, 1 + 0.1 * values)
        else:
            writer.add_tensor(name, stored(values, qtype, rng), raw_dtype=qtype if qtype != Q.F16 else None)
    write_out(writer)
    return path


# MLX-LM's own strict load of each directory; each matrix written back as MLX computes it
# (dequantize of a quantized module, the weight of a dense one). All models in one process.
MLX_LM_WEIGHTS = """
import sys, numpy as np, mlx.core as mx, mlx.nn as nn
from pathlib import Path
from mlx_lm.utils import load_model
for directory in sys.argv[1:]:
    model, config = load_model(Path(directory), strict=True)
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            w = mx.dequantize(module.weight, module.scales, module.biases, group_size=module.group_size,
                              bits=module.bits)
            out[name] = (np.array(w.astype(mx.float32)), module.bits)
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            out[name] = (np.array(module.weight.astype(mx.float32)), 0)
    np.savez(directory + "/loaded.npz", **{k: v[0] for k, v in out.items()},
             **{"bits:" + k: v[1] for k, v in out.items()})
"""
ARCHS = ("llama", "gemma3")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[Path, Any, Path]]:
    """(arch, type name) -> (its GGUF, its conversion record, the directory), every model
    converted and loaded by MLX-LM (one process for all: its import is most of a load)."""
    root = tmp_path_factory.mktemp("models")
    made = {}
    for arch in ARCHS:
        for qtype in TYPES:
            folder = root / f"{arch}-{qtype.name}"
            folder.mkdir()
            gguf = model_gguf(folder / f"{arch}.gguf", arch, qtype)
            made[(arch, qtype.name)] = (gguf, convert(gguf, folder / "mlx"), folder / "mlx")
    done = subprocess.run(
        [sys.executable, "-c", MLX_LM_WEIGHTS, *(str(d) for _, _, d in made.values())],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return made


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_mlx_lm_loads_every_type_and_computes_with_the_ggufs_weights(
    arch: str, qtype: GGMLQuantizationType, models: dict[tuple[str, str], tuple[Path, Any, Path]]
) -> None:
    from eliza.formats.gguf_models.llama import unpermute_rope_rows

    gguf, record, directory = models[(arch, qtype.name)]
    assert stale_reason(gguf, directory) is None
    loaded = np.load(directory / "loaded.npz")
    source = {t.name: t for t in GGUFReader(gguf).tensors}
    config = json.loads((directory / CONFIG_NAME).read_text())
    dense = qtype == Q.F16
    assert ("quantization" in config) is not dense
    if not dense:
        assert config["quantization"]["bits"] == affine.bits_of(source["blk.0.attn_q.weight"])
    matrices = {"model.embed_tokens": "token_embd.weight"}
    for i in range(2):
        matrices |= {f"model.layers.{i}.{hf}": f"blk.{i}.{kind}.weight" for kind, hf in MODULES.items()}
    for module, name in matrices.items():
        expected = np.asarray(dequantize(source[name].data, qtype), dtype=np.float32).reshape(
            tuple(reversed(source[name].shape.tolist()))
        )
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            expected = unpermute_rope_rows(expected, 2 if "attn_q" in name else 1)
        got, bits = loaded[module], int(loaded["bits:" + module])
        assert bits == (0 if dense else affine.bits_of(source[name])), module
        if qtype in affine.EXACT_TYPES or dense:
            assert same_numbers(got, expected), module
        else:  # Q6_K: 8 bits in groups of 32, the error recorded
            relative = float(np.sqrt(np.mean((got - expected) ** 2) / np.mean(expected**2)))
            assert 0 < relative < 0.01, module
            assert record.added_error[module] == pytest.approx(relative, rel=1e-3), module
    written = json.loads((directory / RECORD_NAME).read_text())
    assert set(written["requantized"]) == (set() if qtype in affine.EXACT_TYPES or dense else set(matrices))
    assert not any(name.startswith("lm_head") for name in loaded.files)  # the tied table, once


def test_dense_stays_an_option_and_each_kind_is_stale_for_the_other(tmp_path: Path) -> None:
    gguf = model_gguf(tmp_path / "m.gguf", "gemma3", Q.Q8_0)
    quantized = convert(gguf, tmp_path / "q")
    dense = convert(gguf, tmp_path / "d", dense=True)
    assert quantized.quantization and not dense.quantization
    assert "quantization" not in json.loads((tmp_path / "d" / CONFIG_NAME).read_text())
    size = {p: (tmp_path / p / "model.safetensors").stat().st_size for p in ("q", "d")}
    assert size["q"] < size["d"] / 3
    assert stale_reason(gguf, tmp_path / "d", dense=True) is None
    reason = stale_reason(gguf, tmp_path / "d")
    assert reason is not None and "written float32, quantized wanted" in reason, reason
    reason = stale_reason(gguf, tmp_path / "q", dense=True)
    assert reason is not None and "--dense" in reason, reason
