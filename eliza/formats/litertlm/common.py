"""What every architecture's writer shares: the constants that stamp a file, the error its
refusals raise, and the checks of the GGUF that do not depend on the architecture (the
context and prefill lengths asked for, the vocabulary, the tensors and their float32 values)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt
from gguf import GGUFReader

from eliza.formats.gguf_models import affine, tensors
from eliza.formats.sentencepiece_vocab import SpmVocabulary, VocabularyError, read_vocabulary

# Bump when the bytes written for the same GGUF and options change: every file written by
# an older writer is then stale and rewritten.
# 2: the default context is the library's (at most 4096), not the GGUF's; 3: int8 matrices;
# 4: sliding-window layers keep ring caches of their window (common.CacheLayout)
WRITER_VERSION = "4"
FORMAT = "eliza-litertlm/1"
SUFFIX = ".litertlm"
RECORD_SUFFIX = ".json"
DEFAULT_PREFILL_LENGTHS: tuple[int, ...] = (1, 8, 32)
CREATION_TIMESTAMP = "1970-01-01T00:00:00+00:00"
# The library's default context (backends/runtime_body.h, kMaxDefaultCtx): a stream runs at
# the GGUF's training context, at most this, unless ELIZA_N_CTX says otherwise. The caches
# and rope tables of the graph are this long by default, not Gemma's 32768.
DEFAULT_MAX_CONTEXT = 4096

# A flatbuffer addresses at most 2 GiB; matrices are written as int8, vectors as float32.
FLATBUFFER_LIMIT = 2**31 - (64 << 20)

# A weight as the graph holds it: a matrix as int8 per row, a vector (a norm) as float32.
Weight = npt.NDArray[np.float32] | affine.Int8Rows


class LitertlmError(ValueError):
    """A GGUF this writer cannot turn into a .litertlm file, or options it cannot write; str()
    is one line naming the file, what is wrong and what would fix it."""


def chosen_context(path: Path, context: int | None, trained: int) -> int:
    if context is None:
        return min(trained, DEFAULT_MAX_CONTEXT)
    if not 1 <= context <= trained:
        raise LitertlmError(f"{path}: context {context} is outside 1..{trained} (the model's context length)")
    return context


def prefill_lengths(path: Path, lengths: Sequence[int] | None, context: int) -> tuple[int, ...]:
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


def vocabulary(reader: GGUFReader, path: Path, n_vocab: int) -> SpmVocabulary:
    try:
        vocab = read_vocabulary(reader)
    except VocabularyError as exc:
        raise LitertlmError(f"{path}: {exc}; a .litertlm needs the GGUF's SentencePiece vocabulary") from exc
    if len(vocab.tokens) != n_vocab:
        raise LitertlmError(
            f"{path}: {len(vocab.tokens)} tokens in the vocabulary, {n_vocab} rows in "
            "token_embd.weight; the GGUF's vocabulary and weights disagree"
        )
    return vocab


def read_weights(
    reader: GGUFReader,
    path: Path,
    expected: Mapping[str, tuple[int, ...]],
    *,
    architecture: str,
    layers: int,
    known_unsupported: dict[str, str] | None = None,
) -> dict[str, Weight]:
    """Every expected tensor of its (rows, columns) shape, after checking that the file holds
    exactly these and that they fit one flatbuffer. A quantized matrix becomes symmetric int8
    per row (the weights LiteRT-LM deploys on the CPU; a linear layer's rows are its output
    channels, the embedding's its tokens); a float one (F32, F16) and every vector stay
    float32, as the MLX weights keep the GGUF's float tensors dense: a float model (the tiny
    fixture) is computed as exactly as before."""
    present = {t.name: t for t in reader.tensors}
    tensors.check_tensors(
        path,
        present,
        dict(expected),
        LitertlmError,
        architecture=architecture,
        layers=layers,
        known_unsupported=known_unsupported,
    )
    quantized = {
        name for name, dims in expected.items() if len(dims) == 2 and not affine.is_dense(present[name])
    }
    total = sum(int(np.prod(dims)) * (1 if name in quantized else 4) for name, dims in expected.items())
    if total > FLATBUFFER_LIMIT:
        raise LitertlmError(
            f"{path}: {total / 2**30:.1f} GiB of int8 and float32 weights; a TFLite flatbuffer holds under "
            "2 GiB: use a smaller model"
        )
    weights: dict[str, Weight] = {}
    for name in expected:
        values = tensors.float32(path, present[name], LitertlmError)
        weights[name] = affine.int8_rows(values) if name in quantized else values
    return weights


@dataclass(frozen=True)
class CacheLayout:
    """The rows of each layer's key and value caches: the context's, or, for a layer that
    attends within a sliding window, a ring of `ring_rows` (0: none) that a position p writes
    at row p mod ring_rows. The engine allocates each cache from its own input's shape and
    reads the context from the mask's last dimension, so the layers may differ; a local
    layer's cost per step then follows its window, not the context."""

    rows: tuple[int, ...]
    context: int
    window: int = 0
    ring_rows: int = 0
    widest_prefill: int = 0

    @classmethod
    def full(cls, n_layer: int, context: int) -> CacheLayout:
        return cls(rows=(context,) * n_layer, context=context)

    @classmethod
    def sliding(
        cls, context: int, window: int, sliding: Sequence[bool], prefill_lengths: Sequence[int]
    ) -> CacheLayout:
        """Rings of window + the widest prefill rows for the sliding layers: a prefill of n
        rows needs window + n - 1 of them to keep every query's window (Signature.ring_mask),
        and the spare row lets a decode step go back one step. Where such a ring would not
        be shorter than the context, every layer keeps the context's rows."""
        ring = window + max(prefill_lengths, default=1)
        if window <= 0 or ring >= context or not any(sliding):
            return cls.full(len(sliding), context)
        return cls(
            rows=tuple(ring if s else context for s in sliding),
            context=context,
            window=window,
            ring_rows=ring,
            widest_prefill=max(prefill_lengths),
        )

    def as_record(self) -> dict[str, object]:
        """What the .litertlm's record says of its caches (its body needs the ring to know how
        far a session may be rewound in place: docs/backends.md)."""
        ring_layers = [i for i, rows in enumerate(self.rows) if rows != self.context]
        return {
            "global_rows": self.context,
            "ring_rows": self.ring_rows,
            "sliding_window": self.window,
            "widest_prefill": self.widest_prefill,
            "ring_layers": ring_layers,
        }


class Converter(Protocol):
    """One architecture's writer of one GGUF (`<architecture>.converter(reader, path, context)`):
    what the container needs of it."""

    @property
    def context(self) -> int: ...

    @property
    def n_vocab(self) -> int: ...

    @property
    def model_type(self) -> str:
        """The field of LlmModelType the metadata sets."""

    def stop_ids(self, vocab: SpmVocabulary) -> list[int]: ...

    def read_weights(self) -> dict[str, Weight]: ...

    def cache_layout(self, prefill_lengths: Sequence[int]) -> CacheLayout:
        """The rows of each layer's caches in the model `tflite_model` writes."""

    def tflite_model(self, weights: Mapping[str, Weight], prefill_lengths: Sequence[int]) -> bytes: ...
