"""A llama-architecture GGUF as a LiteRT-LM `.litertlm` file, written without torch.

LiteRT-LM runs the same model llama.cpp loads only when it reads the same weights and splits
text into the same ids, so the file is derived from the bundle's GGUF, never shipped beside
it, and a record beside it (`<name>.litertlm.json`) names the GGUF and writer it came from:
a stale file is noticed (`stale_reason`) instead of silently loaded.

The file holds three sections, packed with litert-lm-builder:

- `LlmMetadataProto`: BOS as the start token, EOS as the stop token, `max_num_tokens` = the
  context, `generic_model`.
- `SP_Tokenizer`: a SentencePiece model built from the GGUF's token table
  (eliza.formats.sentencepiece_vocab), which tokenizes as llama.cpp does.
- `TFLiteModel` (`tf_lite_prefill_decode`): a float32 TFLite flatbuffer written directly with
  the object API of ai_edge_litert's schema. Its signatures are `prefill_<N>` for each
  prefill length and `decode`, in the tensor layout LiteRT-LM's CPU executor looks up by
  name (C = context, N = tokens of the signature, 1 for decode):

      inputs   tokens int32 [1,N]; input_pos int32 [N]; mask f32 [1,1,N,C];
               kv_cache_k_<i>, kv_cache_v_<i> f32 [1,C,kv_heads,head_dim] for every layer
      outputs  the updated caches (same names and shapes; the executor swaps them in as the
               next inputs, so the whole cache is returned); decode also `logits` f32 [1,1,vocab]

  The executor pads a prefill to the next signature length and refuses one that does not
  fit the cache, so short signatures (1 and 8 besides 32) let a prompt fill the context to
  its end. Cache rows are written with one DYNAMIC_UPDATE_SLICE at input_pos[0]: padded
  rows (input_pos 0) land past the visible ones and are overwritten later, where a scatter
  by position would overwrite BOS.

Two layout facts make it compute llama.cpp's function: GGUFReader's numpy shape of a 2-D
tensor is already the (out, in) of a TFLite FULLY_CONNECTED weight; and llama.cpp's converter
permutes Q and K rows for its adjacent-pair rope, which `unpermute_rope_rows` undoes so the
graph ropes halves (i, i + head_dim/2).

The output is byte-deterministic: protos and the flatbuffer serialize deterministically, and
the two system-metadata fields litert-lm-builder would fill from chance and the clock are
derived instead: `uuid` is the name-based (version 5) UUID of the sha256 of the three section
payloads, and `creation_timestamp` is the Unix epoch, 1970-01-01T00:00:00+00:00 (the file's
content is a function of the GGUF and the writer version, not of when it was written).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from gguf import GGMLQuantizationType, GGUFReader, ReaderTensor
from gguf.quants import dequantize

from eliza import __version__ as ELIZA_VERSION
from eliza.formats.files import atomic_write_text, atomic_write_with, sha256_file
from eliza.formats.gguf_models import header as llama_gguf
from eliza.formats.mlx_weights import unpermute_rope_rows
from eliza.formats.sentencepiece_vocab import SpmVocabulary, VocabularyError, model_proto, read_vocabulary

# Bump when the bytes written for the same GGUF and options change: every file written by
# an older writer is then stale and rewritten.
WRITER_VERSION = "1"
FORMAT = "eliza-litertlm/1"
SUFFIX = ".litertlm"
RECORD_SUFFIX = ".json"
DEFAULT_PREFILL_LENGTHS: tuple[int, ...] = (1, 8, 32)
CREATION_TIMESTAMP = "1970-01-01T00:00:00+00:00"

# A flatbuffer addresses at most 2 GiB; weights are written as float32.
_FLATBUFFER_LIMIT = 2**31 - (64 << 20)
_ALIGN = 64  # weights are read in place: XNNPACK wants their buffers aligned
_FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.F64)
_PER_LAYER = (
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
# litert-lm-builder reads its system-metadata hook as a module global: one build at a time
# may replace it.
_PACK_LOCK = threading.Lock()


class LitertlmError(ValueError):
    """A GGUF this writer cannot turn into a .litertlm file, or options it cannot write; str()
    is one line naming the file, what is wrong and what would fix it."""


@dataclass(frozen=True, kw_only=True)
class LlamaShape:
    """The hyper-parameters of the graph, from the GGUF's llama.* keys."""

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


@dataclass(frozen=True, kw_only=True)
class LitertlmRecord:
    """What one write produced and from what: the sidecar `<name>.litertlm.json`, plus the
    sizes for whoever ran it."""

    out: Path
    source_gguf: str
    source_sha256: str
    output_sha256: str
    prefill_lengths: tuple[int, ...]
    context: int
    size: int
    section_sizes: Mapping[str, int] = field(default_factory=dict)
    writer_version: str = WRITER_VERSION
    eliza_version: str = ELIZA_VERSION
    format: str = FORMAT

    def to_json(self) -> dict[str, object]:
        return {
            "format": self.format,
            "writer_version": self.writer_version,
            "eliza_version": self.eliza_version,
            "source_gguf": self.source_gguf,
            "source_sha256": self.source_sha256,
            "output": self.out.name,
            "output_sha256": self.output_sha256,
            "prefill_lengths": list(self.prefill_lengths),
            "context": self.context,
        }


def default_out_path(gguf_path: Path) -> Path:
    """`<GGUF's folder>/<stem>.litertlm`: in a bundle, `text/<model>.litertlm` beside the GGUF."""
    return gguf_path.with_name(gguf_path.stem + SUFFIX)


def record_path(out: Path) -> Path:
    return out.with_name(out.name + RECORD_SUFFIX)


def repair_command(
    gguf_path: Path, out: Path, *, prefill_lengths: Sequence[int] | None = None, context: int | None = None
) -> str:
    command = f"eliza litertlm {shlex.quote(str(gguf_path))}"
    if out != default_out_path(gguf_path):
        command += f" --out {shlex.quote(str(out))}"
    if prefill_lengths is not None:
        command += f" --prefill {' '.join(str(n) for n in sorted(set(prefill_lengths)))}"
    if context is not None:
        command += f" --context {context}"
    return command


def write_litertlm(
    gguf: Path,
    out: Path,
    *,
    prefill_lengths: Sequence[int] | None = None,
    context: int | None = None,
) -> LitertlmRecord:
    """Writes the .litertlm of a llama GGUF to `out` (replacing it whole) and its record
    beside it. `context` defaults to the GGUF's context length, `prefill_lengths` to those of
    DEFAULT_PREFILL_LENGTHS that fit it. Raises LitertlmError."""
    reader = _open(gguf)
    shape = _read_shape(reader, gguf, context)
    lengths = _prefill_lengths(gguf, prefill_lengths, shape.context)
    vocab = _vocabulary(reader, gguf, shape)
    weights = _read_weights(reader, gguf, shape)
    _check_out(gguf, out)
    sections = {
        "llm_metadata.pb": _llm_metadata(vocab, shape.context),
        "tokenizer.spm": model_proto(vocab),
        "model.tflite": _tflite_model(shape, weights, lengths),
    }
    source_sha256 = sha256_file(gguf)
    digests: list[str] = []

    def write(tmp: Path) -> None:
        _pack(tmp, sections)
        digests.append(sha256_file(tmp))

    atomic_write_with(out, write)
    record = LitertlmRecord(
        out=out,
        source_gguf=gguf.name,
        source_sha256=source_sha256,
        output_sha256=digests[0],
        prefill_lengths=lengths,
        context=shape.context,
        size=out.stat().st_size,
        section_sizes={name: len(data) for name, data in sections.items()},
    )
    atomic_write_text(record_path(out), json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n")
    return record


def stale_reason(
    gguf_path: Path,
    out: Path,
    *,
    prefill_lengths: Sequence[int] | None = None,
    context: int | None = None,
) -> str | None:
    """None when `out` is this writer's file of exactly this GGUF (and, where given, of these
    prefill lengths and context), with its bytes as written; otherwise one line naming the
    file, why, and the repair."""
    if not gguf_path.is_file():
        raise LitertlmError(f"{gguf_path}: no such GGUF file; name an existing .gguf file")
    repair = (
        f"; rewrite it: {repair_command(gguf_path, out, prefill_lengths=prefill_lengths, context=context)}"
    )
    record_file = record_path(out)
    if not out.is_file():
        return f"{out}: missing (never written, or the write was interrupted){repair}"
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{out}: no {record_file.name} beside it (written by another tool?){repair}"
    except (OSError, ValueError) as exc:
        return f"{out}: {record_file.name} is unreadable ({exc}){repair}"
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        return f"{out}: {record_file.name} is of format {found!r}, not {FORMAT!r}{repair}"
    version = record.get("writer_version")
    if version != WRITER_VERSION:
        return f"{out}: written by writer version {version!r}, this is version {WRITER_VERSION!r}{repair}"
    source = sha256_file(gguf_path)
    recorded_source = str(record.get("source_sha256"))
    if recorded_source != source:
        return (
            f"{out}: written from {record.get('source_gguf')} (sha256 {recorded_source[:12]}), "
            f"not from {gguf_path.name} (sha256 {source[:12]}){repair}"
        )
    if prefill_lengths is not None and record.get("prefill_lengths") != sorted(set(prefill_lengths)):
        return (
            f"{out}: has prefill lengths {record.get('prefill_lengths')}, "
            f"not {sorted(set(prefill_lengths))}{repair}"
        )
    if context is not None and record.get("context") != context:
        return f"{out}: has context {record.get('context')}, not {context}{repair}"
    actual = sha256_file(out)
    expected = str(record.get("output_sha256"))
    if actual != expected:
        return f"{out}: changed since it was written (sha256 {actual[:12]}, recorded {expected[:12]}){repair}"
    return None


# ------------------------------------------------------------------ reading the GGUF


def _open(gguf_path: Path) -> GGUFReader:
    return llama_gguf.open_llama(gguf_path, LitertlmError, "are written as .litertlm")


_value = llama_gguf.field


def _int(reader: GGUFReader, path: Path, key: str, default: int | None = None) -> int:
    return llama_gguf.positive_int(reader, path, key, LitertlmError, default, need=" the same in every layer")


def _float(reader: GGUFReader, path: Path, key: str, default: float | None = None) -> float:
    return llama_gguf.number(reader, path, key, LitertlmError, default)


def _read_shape(reader: GGUFReader, path: Path, context: int | None) -> LlamaShape:
    experts = _value(reader, "llama.expert_count")
    if isinstance(experts, int) and experts > 0:
        raise LitertlmError(
            f"{path}: a mixture of {experts} experts; this writer handles dense llama models only"
        )
    scaling = _value(reader, "llama.rope.scaling.type")
    factor = _value(reader, "llama.rope.scaling.factor")
    linear = _value(reader, "llama.rope.scale_linear")
    if (scaling not in (None, "none") and factor not in (None, 1.0)) or linear not in (None, 1.0):
        raise LitertlmError(
            f"{path}: rope scaling {scaling or 'linear'} "
            f"(factor {factor if factor is not None else linear}); this writer handles unscaled rope only"
        )
    n_embd = _int(reader, path, "llama.embedding_length")
    n_head = _int(reader, path, "llama.attention.head_count")
    n_head_kv = _int(reader, path, "llama.attention.head_count_kv", default=n_head)
    if n_embd % n_head != 0 and _value(reader, "llama.attention.key_length") is None:
        raise LitertlmError(
            f"{path}: embedding length {n_embd} is not a multiple of {n_head} heads and "
            "llama.attention.key_length is missing; the head size cannot be derived"
        )
    head_dim = _int(reader, path, "llama.attention.key_length", default=n_embd // n_head)
    value_dim = _int(reader, path, "llama.attention.value_length", default=head_dim)
    rope_dim = _int(reader, path, "llama.rope.dimension_count", default=head_dim)
    if value_dim != head_dim or rope_dim != head_dim or head_dim % 2:
        raise LitertlmError(
            f"{path}: head size {head_dim}, value size {value_dim}, rope dimensions {rope_dim}; this writer "
            "needs all three equal and even (a model of another architecture exported as llama?)"
        )
    if n_head % n_head_kv != 0:
        raise LitertlmError(f"{path}: {n_head} attention heads do not group over {n_head_kv} key/value heads")
    trained = _int(reader, path, "llama.context_length")
    if context is None:
        context = trained
    elif not 1 <= context <= trained:
        raise LitertlmError(f"{path}: context {context} is outside 1..{trained} (the model's context length)")
    embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embed is None:
        raise LitertlmError(f"{path}: no token_embd.weight tensor; not a complete llama model")
    return LlamaShape(
        n_vocab=int(embed.shape[-1]),  # ggml ne = (n_embd, n_vocab)
        n_embd=n_embd,
        n_layer=_int(reader, path, "llama.block_count"),
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=_int(reader, path, "llama.feed_forward_length"),
        head_dim=head_dim,
        rope_base=_float(reader, path, "llama.rope.freq_base", default=10000.0),
        rms_eps=_float(reader, path, "llama.attention.layer_norm_rms_epsilon"),
        context=context,
        tied_output=all(t.name != "output.weight" for t in reader.tensors),
    )


def _prefill_lengths(path: Path, lengths: Sequence[int] | None, context: int) -> tuple[int, ...]:
    if lengths is None:
        return tuple(n for n in DEFAULT_PREFILL_LENGTHS if n <= context) or (context,)
    chosen = tuple(sorted(set(lengths)))
    bad = [n for n in chosen if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= context]
    if not chosen or bad:
        raise LitertlmError(
            f"{path}: prefill lengths {list(lengths)} are not one or more integers in 1..{context} "
            "(the context)"
        )
    return chosen


def _vocabulary(reader: GGUFReader, path: Path, shape: LlamaShape) -> SpmVocabulary:
    try:
        vocab = read_vocabulary(reader)
    except VocabularyError as exc:
        raise LitertlmError(f"{path}: {exc}; a .litertlm needs the GGUF's SentencePiece vocabulary") from exc
    if len(vocab.tokens) != shape.n_vocab:
        raise LitertlmError(
            f"{path}: {len(vocab.tokens)} tokens in the vocabulary, {shape.n_vocab} rows in "
            "token_embd.weight; the GGUF's vocabulary and weights disagree"
        )
    return vocab


def _expected_shapes(shape: LlamaShape) -> dict[str, tuple[int, ...]]:
    d, ff, vocab = shape.n_embd, shape.n_ff, shape.n_vocab
    q, kv = shape.n_head * shape.head_dim, shape.n_head_kv * shape.head_dim
    expected: dict[str, tuple[int, ...]] = {"token_embd.weight": (vocab, d), "output_norm.weight": (d,)}
    if not shape.tied_output:
        expected["output.weight"] = (vocab, d)
    per_layer = dict(
        zip(
            _PER_LAYER, ((d,), (q, d), (kv, d), (kv, d), (d, q), (d,), (ff, d), (ff, d), (d, ff)), strict=True
        )
    )
    for layer in range(shape.n_layer):
        for kind, dims in per_layer.items():
            expected[f"blk.{layer}.{kind}.weight"] = dims
    return expected


def _read_weights(reader: GGUFReader, path: Path, shape: LlamaShape) -> dict[str, npt.NDArray[np.float32]]:
    """Every tensor as float32 of its (out, in) shape, Q and K rows un-permuted to halves rope."""
    expected = _expected_shapes(shape)
    present = {t.name: t for t in reader.tensors}
    unknown = sorted(n for n in present if n not in expected)
    if unknown:
        raise LitertlmError(
            f"{path}: {len(unknown)} tensor(s) a dense llama model has not ({', '.join(unknown[:3])}"
            f"{', ...' if len(unknown) > 3 else ''}); this writer maps the plain llama tensors only"
        )
    missing = sorted(n for n in expected if n not in present)
    if missing:
        raise LitertlmError(
            f"{path}: tensor(s) missing for {shape.n_layer} layers: {', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}; the GGUF is incomplete or not a llama model"
        )
    total = 4 * sum(int(np.prod(dims)) for dims in expected.values())
    if total > _FLATBUFFER_LIMIT:
        raise LitertlmError(
            f"{path}: {total / 2**30:.1f} GiB of float32 weights; a TFLite flatbuffer holds under 2 GiB "
            "(this writer writes float32 only: use a smaller model)"
        )
    weights: dict[str, npt.NDArray[np.float32]] = {}
    for name, dims in expected.items():
        tensor = present[name]
        numpy_shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
        if numpy_shape != dims:
            raise LitertlmError(
                f"{path}: {name} has shape {numpy_shape} (rows, columns), expected {dims} from the "
                "hyper-parameters; the GGUF's metadata and tensors disagree"
            )
        weight = _float32(path, tensor).reshape(dims)
        kind = name.split(".")[-2]
        if kind in ("attn_q", "attn_k"):
            weight = unpermute_rope_rows(weight, shape.n_head if kind == "attn_q" else shape.n_head_kv)
        weights[name] = np.ascontiguousarray(weight, dtype=np.float32)
    return weights


def _float32(path: Path, tensor: ReaderTensor) -> npt.NDArray[np.float32]:
    if tensor.tensor_type in _FLOAT_TYPES:
        # By value, not gguf's byte view: the reader has already ordered a big-endian file's bytes.
        return np.asarray(tensor.data, dtype=np.float32)
    try:
        values = dequantize(tensor.data, tensor.tensor_type)
    except (NotImplementedError, ValueError) as exc:
        raise LitertlmError(
            f"{path}: {tensor.name} is of type {tensor.tensor_type.name}, which gguf cannot dequantize "
            f"({exc}); requantize the model to F16 or a common type (Q8_0, Q4_K)"
        ) from exc
    return np.asarray(values, dtype=np.float32)


def _check_out(gguf_path: Path, out: Path) -> None:
    if out.exists() and not out.is_file():
        raise LitertlmError(f"{out}: exists and is not a file; name a file for the .litertlm")
    if out.resolve() == gguf_path.resolve() or record_path(out).resolve() == gguf_path.resolve():
        raise LitertlmError(
            f"{out}: would replace the GGUF it is written from; name another file "
            f"(default: {default_out_path(gguf_path)})"
        )


# ------------------------------------------------------------------ the sections


def _llm_metadata(vocab: SpmVocabulary, context: int) -> bytes:
    from litert_lm_builder.runtime.proto import llm_metadata_pb2  # type: ignore[import-untyped]

    metadata: Any = llm_metadata_pb2.LlmMetadata()
    metadata.start_token.token_ids.ids.append(vocab.bos_id)
    metadata.stop_tokens.add().token_ids.ids.append(vocab.eos_id)
    metadata.max_num_tokens = context
    metadata.llm_model_type.generic_model.SetInParent()
    serialized: bytes = metadata.SerializeToString(deterministic=True)
    return serialized


def _pack(out: Path, sections: Mapping[str, bytes]) -> None:
    """Packs the sections into `out` (a fresh file): litert-lm-builder reads each from a path."""
    from litert_lm_builder import litertlm_builder as lb  # type: ignore[import-untyped]

    digest = hashlib.sha256()
    for name in sorted(sections):
        digest.update(name.encode() + b"\0" + len(sections[name]).to_bytes(8, "little") + sections[name])
    file_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"urn:sha256:{digest.hexdigest()}"))

    def derived_system_metadata(system_metadata: list[Any]) -> list[Any]:
        kept = [m for m in system_metadata if m.key not in ("uuid", "creation_timestamp")]
        return [
            *kept,
            lb.Metadata(key="uuid", value=file_uuid, dtype=lb.DType.STRING),
            lb.Metadata(key="creation_timestamp", value=CREATION_TIMESTAMP, dtype=lb.DType.STRING),
        ]

    with tempfile.TemporaryDirectory(prefix="eliza-litertlm-") as folder:
        paths = {name: Path(folder) / name for name in sections}
        for name, data in sections.items():
            paths[name].write_bytes(data)
        builder = lb.LitertLmFileBuilder()
        builder.add_llm_metadata(str(paths["llm_metadata.pb"]))
        builder.add_sentencepiece_tokenizer(str(paths["tokenizer.spm"]))
        builder.add_tflite_model(str(paths["model.tflite"]), lb.TfLiteModelType.PREFILL_DECODE)
        with _replaced(lb, "populate_system_metadata", derived_system_metadata), out.open("wb") as handle:
            builder.build(handle)
            handle.flush()
            os.fsync(handle.fileno())


@contextmanager
def _replaced(module: Any, name: str, value: Callable[..., Any]) -> Iterator[None]:
    with _PACK_LOCK:
        original = getattr(module, name)
        setattr(module, name, value)
        try:
            yield
        finally:
            setattr(module, name, original)


# ------------------------------------------------------------------ the TFLite graph


def _tflite_model(
    shape: LlamaShape, weights: Mapping[str, npt.NDArray[np.float32]], prefill_lengths: Sequence[int]
) -> bytes:
    model = _Model(capacity=sum(w.nbytes for w in weights.values()))
    for n in prefill_lengths:
        _signature(model, shape, weights, n, decode=False)
    _signature(model, shape, weights, 1, decode=True)
    return model.to_bytes()


def _tfl() -> Any:
    from ai_edge_litert import schema_py_generated  # type: ignore[import-untyped]

    return schema_py_generated


class _AlignedBuffer:
    """A TFLite Buffer whose data starts on a 64-byte boundary; flatbuffers' own
    CreateNumpyVector aligns a uint8 vector to 1 byte only."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def Pack(self, builder: Any) -> int:  # the flatbuffers object API's name
        tfl = _tfl()
        size = len(self.payload)
        builder.StartVector(1, size, _ALIGN)
        builder.head = builder.head - size
        builder.Bytes[builder.head : builder.head + size] = self.payload
        builder.vectorNumElems = size
        data = builder.EndVector()
        tfl.BufferStart(builder)
        tfl.BufferAddData(builder, data)
        end: int = tfl.BufferEnd(builder)
        return end


class _Model:
    """The model under construction: buffers (shared by all signatures), operator codes,
    subgraphs and their signature definitions."""

    def __init__(self, capacity: int) -> None:
        tfl = _tfl()
        self.capacity = capacity
        self.buffers: list[Any] = [tfl.BufferT()]  # buffer 0: the empty sentinel
        self.buffer_index: dict[str, int] = {}
        self.opcodes: list[int] = []
        self.subgraphs: list[Any] = []
        self.signatures: list[Any] = []

    def buffer(self, key: str, array: npt.NDArray[Any]) -> int:
        if key not in self.buffer_index:
            self.buffers.append(_AlignedBuffer(np.ascontiguousarray(array).tobytes()))
            self.buffer_index[key] = len(self.buffers) - 1
        return self.buffer_index[key]

    def opcode(self, builtin: int) -> int:
        if builtin not in self.opcodes:
            self.opcodes.append(builtin)
        return self.opcodes.index(builtin)

    def to_bytes(self) -> bytes:
        import flatbuffers  # type: ignore[import-untyped]

        tfl = _tfl()
        model = tfl.ModelT()
        model.version = 3
        model.description = f"{FORMAT} writer {WRITER_VERSION}"
        codes = []
        for builtin in self.opcodes:
            code = tfl.OperatorCodeT()
            code.builtinCode = builtin
            code.deprecatedBuiltinCode = min(builtin, 127)  # 127: PLACEHOLDER_FOR_GREATER_OP_CODES
            code.version = 1
            codes.append(code)
        model.operatorCodes = codes
        model.subgraphs = self.subgraphs
        model.buffers = self.buffers
        model.signatureDefs = self.signatures
        # Sized for the weights up front: growing doubles and copies the whole buffer.
        builder = flatbuffers.Builder(self.capacity + (4 << 20))
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())


class _Graph:
    """One subgraph; tensors are indices, their shapes tracked here so each op's output
    shape is derived from its inputs."""

    def __init__(self, model: _Model, name: str) -> None:
        tfl = _tfl()
        self.tfl = tfl
        self.model = model
        self.subgraph = tfl.SubGraphT()
        self.subgraph.name = name
        self.subgraph.tensors, self.subgraph.operators = [], []
        self.subgraph.inputs, self.subgraph.outputs = [], []
        self.shapes: list[list[int]] = []
        self.types: list[int] = []
        self.count = 0

    def tensor(self, name: str, shape: Sequence[int], dtype: type[np.generic], buffer: int = 0) -> int:
        tensor = self.tfl.TensorT()
        tensor.name = name
        tensor.shape = [int(s) for s in shape]
        tensor.type = self.tfl.TensorType.INT32 if dtype is np.int32 else self.tfl.TensorType.FLOAT32
        tensor.buffer = buffer
        self.subgraph.tensors.append(tensor)
        self.shapes.append(list(tensor.shape))
        self.types.append(tensor.type)
        return len(self.subgraph.tensors) - 1

    def input(self, name: str, shape: Sequence[int], dtype: type[np.generic]) -> int:
        index = self.tensor(name, shape, dtype)
        self.subgraph.inputs.append(index)
        return index

    def const(self, key: str, array: npt.NDArray[Any]) -> int:
        dtype = np.int32 if array.dtype == np.int32 else np.float32
        return self.tensor(key, array.shape, dtype, self.model.buffer(key, np.asarray(array, dtype=dtype)))

    def i32(self, values: Sequence[int]) -> int:
        ints = [int(v) for v in values]
        return self.const("const_i32_" + "_".join(map(str, ints)), np.array(ints, dtype=np.int32))

    def op(
        self,
        builtin: int,
        inputs: Sequence[int],
        shape: Sequence[int],
        options: tuple[int, Any] = (0, None),
        dtype: type[np.generic] = np.float32,
        name: str | None = None,
    ) -> int:
        self.count += 1
        output = self.tensor(name or f"t{self.count}", shape, dtype)
        operator = self.tfl.OperatorT()
        operator.opcodeIndex = self.model.opcode(builtin)
        operator.inputs = list(inputs)
        operator.outputs = [output]
        operator.builtinOptionsType, operator.builtinOptions = options
        self.subgraph.operators.append(operator)
        return output

    def _options(self, kind: str, **values: Any) -> tuple[int, Any]:
        options = getattr(self.tfl, f"{kind}OptionsT")()
        for key, value in values.items():
            setattr(options, key, value)
        return getattr(self.tfl.BuiltinOptions, f"{kind}Options"), options

    def fc(self, x: int, w: int) -> int:
        # keepNumDims: [1, n, in] stays [1, n, out]; no bias (-1).
        shape = [*self.shapes[x][:-1], self.shapes[w][0]]
        options = self._options("FullyConnected", keepNumDims=True)
        return self.op(self.tfl.BuiltinOperator.FULLY_CONNECTED, [x, w, -1], shape, options)

    def _broadcast(self, builtin: int, kind: str, a: int, b: int) -> int:
        sa, sb = self.shapes[a], self.shapes[b]
        rank = max(len(sa), len(sb))
        sa, sb = [1] * (rank - len(sa)) + sa, [1] * (rank - len(sb)) + sb
        return self.op(builtin, [a, b], [max(x, y) for x, y in zip(sa, sb, strict=True)], self._options(kind))

    def add(self, a: int, b: int) -> int:
        return self._broadcast(self.tfl.BuiltinOperator.ADD, "Add", a, b)

    def mul(self, a: int, b: int) -> int:
        return self._broadcast(self.tfl.BuiltinOperator.MUL, "Mul", a, b)

    def unary(self, builtin: int, x: int) -> int:
        return self.op(builtin, [x], self.shapes[x])

    def reshape(self, x: int, shape: Sequence[int]) -> int:
        options = self._options("Reshape", newShape=list(shape))
        return self.op(self.tfl.BuiltinOperator.RESHAPE, [x, self.i32(shape)], shape, options)

    def transpose(self, x: int, perm: Sequence[int]) -> int:
        shape = [self.shapes[x][p] for p in perm]
        return self.op(
            self.tfl.BuiltinOperator.TRANSPOSE, [x, self.i32(perm)], shape, self._options("Transpose")
        )

    def mean_last(self, x: int) -> int:
        shape = [*self.shapes[x][:-1], 1]
        axis = self.i32([len(self.shapes[x]) - 1])
        return self.op(
            self.tfl.BuiltinOperator.MEAN, [x, axis], shape, self._options("Reducer", keepDims=True)
        )

    def gather(self, params: int, indices: int) -> int:
        shape = self.shapes[indices] + self.shapes[params][1:]
        options = self._options("Gather", axis=0)
        return self.op(self.tfl.BuiltinOperator.GATHER, [params, indices], shape, options)

    def bmm(self, a: int, b: int, adj_y: bool = False) -> int:
        sa, sb = self.shapes[a], self.shapes[b]
        shape = [*sa[:-1], sb[-2] if adj_y else sb[-1]]
        options = self._options("BatchMatMul", adjX=False, adjY=adj_y)
        return self.op(self.tfl.BuiltinOperator.BATCH_MATMUL, [a, b], shape, options)

    def softmax(self, x: int) -> int:
        return self.op(
            self.tfl.BuiltinOperator.SOFTMAX, [x], self.shapes[x], self._options("Softmax", beta=1.0)
        )

    def slice(self, x: int, begin: Sequence[int], size: Sequence[int]) -> int:
        dtype = np.int32 if self.types[x] == self.tfl.TensorType.INT32 else np.float32
        inputs = [x, self.i32(begin), self.i32(size)]
        return self.op(self.tfl.BuiltinOperator.SLICE, inputs, size, self._options("Slice"), dtype)

    def concat(self, xs: Sequence[int], axis: int, dtype: type[np.generic]) -> int:
        shape = list(self.shapes[xs[0]])
        shape[axis] = sum(self.shapes[x][axis] for x in xs)
        options = self._options("Concatenation", axis=axis)
        return self.op(self.tfl.BuiltinOperator.CONCATENATION, xs, shape, options, dtype)

    def update_slice(self, operand: int, update: int, start: int, name: str) -> int:
        builtin = self.tfl.BuiltinOperator.DYNAMIC_UPDATE_SLICE
        options = self._options("DynamicUpdateSlice")
        return self.op(builtin, [operand, update, start], self.shapes[operand], options, name=name)

    def rms_norm(self, x: int, w: int, eps: float) -> int:
        mean_square = self.mean_last(self.mul(x, x))
        epsilon = self.const(f"const_eps_{eps!r}", np.array([eps], dtype=np.float32))
        inverse = self.unary(self.tfl.BuiltinOperator.RSQRT, self.add(mean_square, epsilon))
        return self.mul(self.mul(x, inverse), w)


def _rope_tables(shape: LlamaShape, context: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """cos and sin [context, head_dim] of the halves rope: dimension i rotates with i + head_dim/2."""
    inverse = 1.0 / (shape.rope_base ** (np.arange(0, shape.head_dim, 2, dtype=np.float64) / shape.head_dim))
    angles = np.arange(context, dtype=np.float64)[:, None] * inverse[None, :]
    cos, sin = np.tile(np.cos(angles), 2), np.tile(np.sin(angles), 2)
    return cos.astype(np.float32), sin.astype(np.float32)


def _rotate_half_matrix(head_dim: int) -> npt.NDArray[np.float32]:
    """W with FULLY_CONNECTED(x, W) = cat(-x2, x1): exact (entries 0 and ±1), and a kernel
    XNNPACK runs, where a slice-negate-concat would not be delegated whole."""
    half = head_dim // 2
    w = np.zeros((head_dim, head_dim), dtype=np.float32)
    for j in range(half):
        w[j, j + half] = -1.0
        w[j + half, j] = 1.0
    return w


def _signature(
    model: _Model, shape: LlamaShape, weights: Mapping[str, npt.NDArray[np.float32]], n: int, decode: bool
) -> None:
    key = "decode" if decode else f"prefill_{n}"
    g = _Graph(model, key)
    tfl = g.tfl
    heads, kv_heads, head_dim, context = shape.n_head, shape.n_head_kv, shape.head_dim, shape.context
    group = heads // kv_heads
    tokens = g.input("tokens", [1, n], np.int32)
    input_pos = g.input("input_pos", [n], np.int32)
    mask = g.input("mask", [1, 1, n, context], np.float32)
    caches_in = [
        (
            g.input(f"kv_cache_k_{i}", [1, context, kv_heads, head_dim], np.float32),
            g.input(f"kv_cache_v_{i}", [1, context, kv_heads, head_dim], np.float32),
        )
        for i in range(shape.n_layer)
    ]

    def weight(name: str) -> int:
        return g.const(name, weights[name])

    cos_table, sin_table = _rope_tables(shape, context)
    cos = g.reshape(g.gather(g.const("rope_cos", cos_table), input_pos), [1, n, 1, head_dim])
    sin = g.reshape(g.gather(g.const("rope_sin", sin_table), input_pos), [1, n, 1, head_dim])
    rotate = g.const("rope_rotate_half", _rotate_half_matrix(head_dim))
    zero = g.i32([0])
    start = g.concat([zero, g.slice(input_pos, [0], [1]), zero, zero], 0, np.int32)  # [0, pos0, 0, 0]
    scale = g.const("attn_scale", np.array([1.0 / np.sqrt(head_dim)], dtype=np.float32))

    def rope(x: int) -> int:
        return g.add(g.mul(x, cos), g.mul(g.fc(x, rotate), sin))

    x = g.gather(weight("token_embd.weight"), tokens)  # [1, n, n_embd]
    caches_out: list[tuple[int, int]] = []
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        h = g.rms_norm(x, weight(p + "attn_norm.weight"), shape.rms_eps)
        k = g.reshape(g.fc(h, weight(p + "attn_k.weight")), [1, n, kv_heads, head_dim])
        v = g.reshape(g.fc(h, weight(p + "attn_v.weight")), [1, n, kv_heads, head_dim])
        k_cache = g.update_slice(caches_in[i][0], rope(k), start, f"kv_cache_k_{i}_out")
        v_cache = g.update_slice(caches_in[i][1], v, start, f"kv_cache_v_{i}_out")
        caches_out.append((k_cache, v_cache))
        if i == shape.n_layer - 1 and not decode:
            break  # a prefill outputs only caches: the last block's attention and FFN are dead
        q = g.reshape(g.fc(h, weight(p + "attn_q.weight")), [1, n, heads, head_dim])
        q = g.reshape(g.transpose(rope(q), [0, 2, 1, 3]), [1, kv_heads, group * n, head_dim])
        keys = g.transpose(k_cache, [0, 2, 1, 3])  # [1, kv_heads, context, head_dim]
        values = g.transpose(v_cache, [0, 2, 1, 3])
        scores = g.reshape(g.bmm(q, keys, adj_y=True), [1, heads, n, context])
        scores = g.add(g.mul(scores, scale), mask)
        probs = g.reshape(g.softmax(scores), [1, kv_heads, group * n, context])
        attended = g.reshape(g.bmm(probs, values), [1, heads, n, head_dim])
        attended = g.reshape(g.transpose(attended, [0, 2, 1, 3]), [1, n, heads * head_dim])
        x = g.add(x, g.fc(attended, weight(p + "attn_output.weight")))
        h = g.rms_norm(x, weight(p + "ffn_norm.weight"), shape.rms_eps)
        gate = g.fc(h, weight(p + "ffn_gate.weight"))
        silu = g.mul(gate, g.unary(tfl.BuiltinOperator.LOGISTIC, gate))
        x = g.add(x, g.fc(g.mul(silu, g.fc(h, weight(p + "ffn_up.weight"))), weight(p + "ffn_down.weight")))

    def tensor_map(name: str, index: int) -> Any:
        entry = tfl.TensorMapT()
        entry.name, entry.tensorIndex = name, index
        return entry

    outputs = []
    if decode:
        x = g.rms_norm(x, weight("output_norm.weight"), shape.rms_eps)
        # A tied model's output matrix is its embedding table: one buffer serves both.
        logits = g.fc(x, weight("token_embd.weight" if shape.tied_output else "output.weight"))
        g.subgraph.tensors[logits].name = "logits"
        outputs.append(tensor_map("logits", logits))
    inputs = [tensor_map("tokens", tokens), tensor_map("input_pos", input_pos), tensor_map("mask", mask)]
    for i in range(shape.n_layer):
        for kind, slot in (("k", 0), ("v", 1)):
            inputs.append(tensor_map(f"kv_cache_{kind}_{i}", caches_in[i][slot]))
            outputs.append(tensor_map(f"kv_cache_{kind}_{i}", caches_out[i][slot]))
    signature = tfl.SignatureDefT()
    signature.signatureKey = key
    signature.subgraphIndex = len(model.subgraphs)
    signature.inputs, signature.outputs = inputs, outputs
    g.subgraph.outputs = [entry.tensorIndex for entry in outputs]
    model.subgraphs.append(g.subgraph)
    model.signatures.append(signature)
