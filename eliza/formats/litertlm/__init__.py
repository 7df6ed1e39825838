"""A GGUF (llama or Gemma 3 architecture) as a LiteRT-LM `.litertlm` file, written without torch.

LiteRT-LM runs the same model llama.cpp loads only when it reads the same weights and splits
text into the same ids, so the file is derived from the bundle's GGUF, never shipped beside
it, and a record beside it (`<name>.litertlm.json`) names the GGUF and writer it came from:
a stale file is noticed (`stale_reason`) instead of silently loaded.

The file holds three sections, packed with litert-lm-builder:

- `LlmMetadataProto`: BOS as the start token, EOS (and what else the architecture ends a
  turn with: Gemma's <end_of_turn>) as the stop tokens, `max_num_tokens` = the context, the
  architecture's model type (`generic_model` for llama, `gemma3`).
- `SP_Tokenizer`: a SentencePiece model built from the GGUF's token table
  (eliza.formats.sentencepiece_vocab), which tokenizes as llama.cpp does.
- `TFLiteModel` (`tf_lite_prefill_decode`): a float32 TFLite flatbuffer written directly with
  the object API of ai_edge_litert's schema. Its signatures are `prefill_<N>` for each
  prefill length and `decode`, in the tensor layout LiteRT-LM's CPU executor looks up by
  name (C = context, N = tokens of the signature, 1 for decode):

      inputs   tokens int32 [1,N]; input_pos int32 [N]; mask f32 [1,1,N,C];
               kv_cache_k_<i>, kv_cache_v_<i> f32 [1,R,kv_heads,head_dim] for every layer:
               R = C, or for a sliding-window layer (Gemma 3's local layers) a ring of
               window + the widest prefill rows (common.CacheLayout; the record's `cache`)
      outputs  the updated caches (same names and shapes; the executor swaps them in as the
               next inputs, so the whole cache is returned); decode also `logits` f32 [1,1,vocab]

  The executor pads a prefill to the next signature length and refuses one that does not
  fit the cache, so short signatures (1 and 8 besides 32) let a prompt fill the context to
  its end. Cache rows are written with one DYNAMIC_UPDATE_SLICE at input_pos[0]: padded
  rows (input_pos 0) land past the visible ones and are overwritten later, where a scatter
  by position would overwrite BOS.

GGUFReader's numpy shape of a 2-D tensor is already the (out, in) of a TFLite
FULLY_CONNECTED weight, so no weight is transposed. The package is one module per
architecture (`llama`, `gemma3`: its converter reads the GGUF through
eliza.formats.gguf_models and builds its graph) over shared pieces: `common` (constants,
refusals, the GGUF checks every architecture makes), `tflite` (the flatbuffer and its op
builders), `decoder` (a signature's inputs, caches, rope, attention with an optional sliding
window), `container` (metadata and packing). A new architecture is one more module and one
more entry of ARCHITECTURES.

The output is byte-deterministic: protos and the flatbuffer serialize deterministically, and
the two system-metadata fields litert-lm-builder would fill from chance and the clock are
derived instead: `uuid` is the name-based (version 5) UUID of the sha256 of the three section
payloads, and `creation_timestamp` is the Unix epoch, 1970-01-01T00:00:00+00:00 (the file's
content is a function of the GGUF and the writer version, not of when it was written).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gguf import GGUFReader

from eliza import __version__ as ELIZA_VERSION
from eliza.formats.files import atomic_write_text, atomic_write_with, sha256_file
from eliza.formats.gguf_models import header
from eliza.formats.litertlm import gemma3, llama
from eliza.formats.litertlm.common import (
    CREATION_TIMESTAMP,
    DEFAULT_PREFILL_LENGTHS,
    FORMAT,
    RECORD_SUFFIX,
    SUFFIX,
    WRITER_VERSION,
    Converter,
    LitertlmError,
    vocabulary,
)
from eliza.formats.litertlm.common import prefill_lengths as prefill_lengths_of
from eliza.formats.litertlm.container import llm_metadata
from eliza.formats.litertlm.container import pack as _pack
from eliza.formats.sentencepiece_vocab import model_proto

__all__ = [
    "ARCHITECTURES",
    "CREATION_TIMESTAMP",
    "DEFAULT_PREFILL_LENGTHS",
    "FORMAT",
    "RECORD_SUFFIX",
    "SUFFIX",
    "WRITER_VERSION",
    "LitertlmError",
    "LitertlmRecord",
    "default_out_path",
    "record_path",
    "repair_command",
    "stale_reason",
    "write_litertlm",
]

# general.architecture -> its writer; a new architecture is one more module here.
ARCHITECTURES: Mapping[str, Callable[[GGUFReader, Path, int | None], Converter]] = {
    llama.ARCHITECTURE: llama.converter,
    gemma3.ARCHITECTURE: gemma3.converter,
}


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
    cache: Mapping[str, object] = field(default_factory=dict)
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
            "cache": dict(self.cache),
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
    """Writes the .litertlm of a GGUF of one of ARCHITECTURES to `out` (replacing it whole)
    and its record beside it. `context` defaults to the GGUF's context length,
    `prefill_lengths` to those of DEFAULT_PREFILL_LENGTHS that fit it. Raises LitertlmError."""
    reader, architecture = header.open_model(
        gguf, LitertlmError, "are written as .litertlm", tuple(ARCHITECTURES)
    )
    converter = ARCHITECTURES[architecture](reader, gguf, context)
    lengths = prefill_lengths_of(gguf, prefill_lengths, converter.context)
    vocab = vocabulary(reader, gguf, converter.n_vocab)
    weights = converter.read_weights()
    _check_out(gguf, out)
    sections = {
        "llm_metadata.pb": llm_metadata(
            vocab.bos_id, converter.stop_ids(vocab), converter.context, converter.model_type
        ),
        "tokenizer.spm": model_proto(vocab),
        "model.tflite": converter.tflite_model(weights, lengths),
    }
    del weights  # the flatbuffer holds them now
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
        context=converter.context,
        cache=converter.cache_layout(lengths).as_record(),
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


def _check_out(gguf_path: Path, out: Path) -> None:
    if out.exists() and not out.is_file():
        raise LitertlmError(f"{out}: exists and is not a file; name a file for the .litertlm")
    if out.resolve() == gguf_path.resolve() or record_path(out).resolve() == gguf_path.resolve():
        raise LitertlmError(
            f"{out}: would replace the GGUF it is written from; name another file "
            f"(default: {default_out_path(gguf_path)})"
        )
