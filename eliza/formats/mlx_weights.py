"""A llama-architecture GGUF as an MLX-LM weights directory (config.json, model.safetensors).

The MLX runtime computes from the same model the llama.cpp runtime loads, so its byte-identity
comparisons mean something only when both read one set of weights. The directory is derived
from the GGUF, never shipped beside it, and carries a record (eliza-conversion.json) of the
GGUF and converter it came from, so a stale directory is noticed instead of silently loaded.

Two layout facts decide whether the MLX side computes the same function:

- GGUFReader gives a 2-D tensor the numpy shape of ggml's `ne` reversed, which is the
  (out_features, in_features) shape of an HF / MLX-LM linear weight: no transpose.
- llama.cpp's converter permutes the rows of Q and K within each head so that its rope
  ("NORM" mode) rotates adjacent pairs (2i, 2i+1); HF and MLX-LM (`rope_traditional: false`)
  rotate (i, i + head_dim/2). `unpermute_rope_rows` undoes that permutation exactly.

Everything is written as float32 (quantized tensors dequantized), and the safetensors file
is written here by hand: tensors in name order, a fixed header, so a conversion is
byte-deterministic and needs no dependency besides numpy and gguf.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from gguf import GGMLQuantizationType, GGUFReader, ReaderTensor
from gguf.quants import dequantize

from eliza import __version__ as ELIZA_VERSION
from eliza.formats.files import atomic_write_directory, atomic_write_text, sha256_file
from eliza.formats.gguf_models import header as llama_gguf

# Bump when the bytes a conversion writes change for the same GGUF: every directory written
# by an older converter is then stale and rewritten.
CONVERTER_VERSION = "1"
FORMAT = "eliza-mlx-weights/1"
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
RECORD_NAME = "eliza-conversion.json"
DEFAULT_DIR_NAME = "mlx"

_SAFETENSORS_METADATA = {"format": "mlx"}

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
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
_LAYER_TENSOR = re.compile(r"^blk\.(?P<layer>[0-9]+)\.(?P<kind>[a-z_]+)\.weight$")
_FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.F64)

# What a tensor that cannot be mapped usually means, so the refusal says what to do instead.
_KNOWN_UNSUPPORTED = {
    "rope_freqs.weight": "llama 3.1-style rope scaling (rope_freqs.weight)",
}


class MlxWeightsError(ValueError):
    """A GGUF this converter cannot turn into MLX-LM weights; str() is one line naming the
    file, what is wrong and what would fix it."""


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


@dataclass(frozen=True, kw_only=True)
class PlannedTensor:
    """One tensor of the output: its shape is known before `load` dequantizes it, so the
    safetensors header is written first and the tensors stream one at a time."""

    name: str
    shape: tuple[int, ...]
    load: Callable[[], npt.NDArray[np.float32]]


@dataclass(frozen=True, kw_only=True)
class ConversionRecord:
    """What one conversion wrote and from what: eliza-conversion.json, plus the directory
    and the tensor count for whoever ran it."""

    out_dir: Path
    source_gguf: str
    source_sha256: str
    files: Mapping[str, str]
    tensor_count: int
    config: LlamaConfig
    converter_version: str = CONVERTER_VERSION
    eliza_version: str = ELIZA_VERSION
    format: str = FORMAT

    def to_json(self) -> dict[str, object]:
        return {
            "format": self.format,
            "converter_version": self.converter_version,
            "eliza_version": self.eliza_version,
            "source_gguf": self.source_gguf,
            "source_sha256": self.source_sha256,
            "files": dict(sorted(self.files.items())),
        }


def default_out_dir(gguf_path: Path) -> Path:
    """`<GGUF's folder>/mlx`: in a bundle, `<bundle>/text/mlx` beside `text/<model>.gguf`."""
    return gguf_path.parent / DEFAULT_DIR_NAME


def repair_command(gguf_path: Path, out_dir: Path) -> str:
    command = f"eliza mlx-weights {shlex.quote(str(gguf_path))}"
    if out_dir != default_out_dir(gguf_path):
        command += f" --out {shlex.quote(str(out_dir))}"
    return command


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


def convert(gguf_path: Path, out_dir: Path) -> ConversionRecord:
    """Writes the MLX-LM directory of a llama GGUF into `out_dir`, replacing it whole."""
    reader = _open(gguf_path)
    config = _read_config(reader, gguf_path)
    planned = _plan_tensors(reader, gguf_path, config)
    _check_out_dir(gguf_path, out_dir)
    source_sha256 = sha256_file(gguf_path)
    written: list[ConversionRecord] = []

    def fill(tmp: Path) -> None:
        config_text = json.dumps(config.to_json(), indent=2, sort_keys=True) + "\n"
        atomic_write_text(tmp / CONFIG_NAME, config_text)
        files = {
            CONFIG_NAME: hashlib.sha256(config_text.encode("utf-8")).hexdigest(),
            WEIGHTS_NAME: write_safetensors(tmp / WEIGHTS_NAME, planned),
        }
        record = ConversionRecord(
            out_dir=out_dir,
            source_gguf=gguf_path.name,
            source_sha256=source_sha256,
            files=files,
            tensor_count=len(planned),
            config=config,
        )
        atomic_write_text(tmp / RECORD_NAME, json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n")
        written.append(record)

    atomic_write_directory(out_dir, fill)
    return written[0]


def stale_reason(gguf_path: Path, weights_dir: Path) -> str | None:
    """None when `weights_dir` is this converter's conversion of exactly this GGUF, with
    every file as written; otherwise one line naming the directory, why, and the repair."""
    if not gguf_path.is_file():
        raise MlxWeightsError(f"{gguf_path}: no such GGUF file; name an existing .gguf file")
    repair = f"; rewrite it: {repair_command(gguf_path, weights_dir)}"
    record_path = weights_dir / RECORD_NAME
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{weights_dir}: no {RECORD_NAME} (never converted, or the conversion was interrupted){repair}"
    except (OSError, ValueError) as exc:
        return f"{weights_dir}: {RECORD_NAME} is unreadable ({exc}){repair}"
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        return f"{weights_dir}: {RECORD_NAME} is of format {found!r}, not {FORMAT!r}{repair}"
    version = record.get("converter_version")
    if version != CONVERTER_VERSION:
        return (
            f"{weights_dir}: written by converter version {version!r}, this is version "
            f"{CONVERTER_VERSION!r}{repair}"
        )
    source = sha256_file(gguf_path)
    recorded_source = str(record.get("source_sha256"))
    if recorded_source != source:
        return (
            f"{weights_dir}: converted from {record.get('source_gguf')} (sha256 {recorded_source[:12]}), "
            f"not from {gguf_path.name} (sha256 {source[:12]}){repair}"
        )
    recorded_files = record.get("files")
    if not isinstance(recorded_files, dict):
        return f"{weights_dir}: {RECORD_NAME} lists no files{repair}"
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        expected = recorded_files.get(name)
        path = weights_dir / name
        if expected is None:
            return f"{weights_dir}: {RECORD_NAME} does not record {name}{repair}"
        if not path.is_file():
            return f"{weights_dir}: {name} is missing{repair}"
        actual = sha256_file(path)
        if actual != expected:
            return (
                f"{weights_dir}: {name} changed since the conversion (sha256 {actual[:12]}, "
                f"recorded {str(expected)[:12]}){repair}"
            )
    return None


def write_safetensors(path: Path, tensors: Sequence[PlannedTensor]) -> str:
    """The safetensors layout (u64 LE header length, JSON header, raw LE data), in name
    order with a space-padded header, fsynced; returns the file's sha256."""
    ordered = sorted(tensors, key=lambda t: t.name)
    header: dict[str, object] = {"__metadata__": _SAFETENSORS_METADATA}
    offset = 0
    for tensor in ordered:
        size = 4 * int(np.prod(tensor.shape, dtype=np.int64))
        header[tensor.name] = {
            "dtype": "F32",
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    header_bytes = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    digest = hashlib.sha256()
    with path.open("wb") as handle:
        for chunk in (len(header_bytes).to_bytes(8, "little"), header_bytes):
            handle.write(chunk)
            digest.update(chunk)
        for tensor in ordered:
            values = np.ascontiguousarray(tensor.load(), dtype="<f4")
            if values.shape != tensor.shape:
                raise ValueError(f"{tensor.name}: loaded shape {values.shape}, planned {tensor.shape}")
            data = values.data.cast("B")
            handle.write(data)
            digest.update(data)
        handle.flush()
        os.fsync(handle.fileno())
    return digest.hexdigest()


def _open(gguf_path: Path) -> GGUFReader:
    return llama_gguf.open_llama(gguf_path, MlxWeightsError, "convert to MLX-LM weights")


_value = llama_gguf.field


def _int(reader: GGUFReader, path: Path, key: str, default: int | None = None) -> int:
    need = "; MLX-LM's llama needs it the same in every layer"
    return llama_gguf.positive_int(reader, path, key, MlxWeightsError, default, need=need)


def _float32(reader: GGUFReader, path: Path, key: str, default: float | None = None) -> float:
    value = llama_gguf.number(reader, path, key, MlxWeightsError, default)
    # GGUF keeps these as float32: 1e-05, not 9.999999747378752e-06, in config.json.
    return float(str(np.float32(value)))


def _read_config(reader: GGUFReader, path: Path) -> LlamaConfig:
    _refuse_unsupported(reader, path)
    hidden = _int(reader, path, "llama.embedding_length")
    n_head = _int(reader, path, "llama.attention.head_count")
    n_head_kv = _int(reader, path, "llama.attention.head_count_kv", default=n_head)
    if hidden % n_head != 0 and _value(reader, "llama.attention.key_length") is None:
        raise MlxWeightsError(
            f"{path}: embedding length {hidden} is not a multiple of {n_head} heads and "
            "llama.attention.key_length is missing; the head size cannot be derived"
        )
    head_dim = _int(reader, path, "llama.attention.key_length", default=hidden // n_head)
    value_dim = _int(reader, path, "llama.attention.value_length", default=head_dim)
    rope_dim = _int(reader, path, "llama.rope.dimension_count", default=head_dim)
    if value_dim != head_dim or rope_dim != head_dim:
        raise MlxWeightsError(
            f"{path}: head size {head_dim}, value size {value_dim}, rope dimensions {rope_dim}; MLX-LM's "
            "llama needs all three equal (a model of another architecture exported as llama?)"
        )
    if n_head % n_head_kv != 0:
        raise MlxWeightsError(
            f"{path}: {n_head} attention heads do not group over {n_head_kv} key/value heads"
        )
    names = {t.name for t in reader.tensors}
    embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embed is None:
        raise MlxWeightsError(f"{path}: no token_embd.weight tensor; not a complete llama model")
    return LlamaConfig(
        hidden_size=hidden,
        num_hidden_layers=_int(reader, path, "llama.block_count"),
        intermediate_size=_int(reader, path, "llama.feed_forward_length"),
        num_attention_heads=n_head,
        num_key_value_heads=n_head_kv,
        head_dim=head_dim,
        rms_norm_eps=_float32(reader, path, "llama.attention.layer_norm_rms_epsilon"),
        vocab_size=int(embed.shape[-1]),  # ggml ne = (n_embd, n_vocab)
        rope_theta=_float32(reader, path, "llama.rope.freq_base", default=10000.0),
        max_position_embeddings=_int(reader, path, "llama.context_length"),
        tie_word_embeddings="output.weight" not in names,
    )


def _refuse_unsupported(reader: GGUFReader, path: Path) -> None:
    experts = _value(reader, "llama.expert_count")
    if isinstance(experts, int) and experts > 0:
        raise MlxWeightsError(
            f"{path}: a mixture of {experts} experts (llama.expert_count); this converter writes dense "
            "llama models only"
        )
    scaling = _value(reader, "llama.rope.scaling.type")
    factor = _value(reader, "llama.rope.scaling.factor")
    linear = _value(reader, "llama.rope.scale_linear")
    scaled = (scaling not in (None, "none") and factor not in (None, 1.0)) or linear not in (None, 1.0)
    if scaled:
        shown = factor if factor is not None else linear
        raise MlxWeightsError(
            f"{path}: rope scaling {scaling or 'linear'} (factor {shown}); "
            "this converter writes unscaled rope only (convert a model without rope scaling)"
        )


def _expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    d, ff, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
    q, kv = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (vocab, d), "output_norm.weight": (d,)}
    if not config.tie_word_embeddings:
        shapes["output.weight"] = (vocab, d)
    per_layer = {
        "attn_q": (q, d),
        "attn_k": (kv, d),
        "attn_v": (kv, d),
        "attn_output": (d, q),
        "ffn_gate": (ff, d),
        "ffn_up": (ff, d),
        "ffn_down": (d, ff),
        "attn_norm": (d,),
        "ffn_norm": (d,),
    }
    for layer in range(config.num_hidden_layers):
        for kind, shape in per_layer.items():
            shapes[f"blk.{layer}.{kind}.weight"] = shape
    return shapes


def _mlx_name(gguf_name: str) -> str | None:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _LAYER_TENSOR.match(gguf_name)
    if match and match["kind"] in _LAYER_NAMES:
        return f"model.layers.{int(match['layer'])}.{_LAYER_NAMES[match['kind']]}.weight"
    return None


def _plan_tensors(reader: GGUFReader, path: Path, config: LlamaConfig) -> list[PlannedTensor]:
    expected = _expected_shapes(config)
    present = {t.name: t for t in reader.tensors}
    unmapped = sorted(n for n in present if n not in expected)
    if unmapped:
        known = [_KNOWN_UNSUPPORTED[n] for n in unmapped if n in _KNOWN_UNSUPPORTED]
        what = known[0] if known else f"{len(unmapped)} tensor(s) a dense llama model has not"
        raise MlxWeightsError(
            f"{path}: {what} ({', '.join(unmapped[:3])}{', ...' if len(unmapped) > 3 else ''}); "
            "this converter maps the plain llama tensors only"
        )
    missing = sorted(n for n in expected if n not in present)
    if missing:
        raise MlxWeightsError(
            f"{path}: tensor(s) missing for {config.num_hidden_layers} layers: {', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}; the GGUF is incomplete or not a llama model"
        )
    planned: list[PlannedTensor] = []
    for name, shape in expected.items():
        tensor = present[name]
        # The reader's numpy view is ggml's ne reversed: (out_features, in_features).
        numpy_shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
        if numpy_shape != shape:
            raise MlxWeightsError(
                f"{path}: {name} has shape {numpy_shape} (rows, columns), expected {shape} from the "
                "hyper-parameters; the GGUF's metadata and tensors disagree"
            )
        _check_type(path, tensor)
        rope_heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}
        kind = _LAYER_TENSOR.match(name)
        heads = rope_heads.get(kind["kind"]) if kind else None
        mlx_name = _mlx_name(name)
        assert mlx_name is not None  # every expected name maps
        planned.append(PlannedTensor(name=mlx_name, shape=shape, load=_loader(tensor, shape, heads)))
    return planned


def _check_type(path: Path, tensor: ReaderTensor) -> None:
    if tensor.tensor_type in _FLOAT_TYPES:
        return
    rows = tensor.data.reshape(-1, tensor.data.shape[-1])
    try:
        dequantize(rows[:1], tensor.tensor_type)
    except (NotImplementedError, ValueError) as exc:
        raise MlxWeightsError(
            f"{path}: {tensor.name} is of type {tensor.tensor_type.name}, which gguf cannot dequantize "
            f"({exc}); requantize the model to F16 or a common type (Q8_0, Q4_K)"
        ) from exc


def _loader(
    tensor: ReaderTensor, shape: tuple[int, ...], rope_heads: int | None
) -> Callable[[], npt.NDArray[np.float32]]:
    def load() -> npt.NDArray[np.float32]:
        if tensor.tensor_type in _FLOAT_TYPES:
            # By value, not gguf's byte view: the reader has already ordered a big-endian file's bytes.
            values = np.asarray(tensor.data)
        else:
            values = dequantize(tensor.data, tensor.tensor_type)
        weight = np.asarray(values, dtype="<f4").reshape(shape)
        if rope_heads is not None:
            weight = unpermute_rope_rows(weight, rope_heads)
        return np.ascontiguousarray(weight)

    return load


def _check_out_dir(gguf_path: Path, out_dir: Path) -> None:
    if out_dir.exists() and (out_dir.is_symlink() or not out_dir.is_dir()):
        raise MlxWeightsError(
            f"{out_dir}: exists and is not a directory; name a directory for the MLX weights"
        )
    source = gguf_path.resolve()
    target = out_dir.resolve()
    if source.is_relative_to(target):
        raise MlxWeightsError(
            f"{out_dir}: contains {gguf_path} and would be replaced whole; name another directory "
            f"(default: {default_out_dir(gguf_path)})"
        )
