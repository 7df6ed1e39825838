"""A SentencePiece model (the serialized `ModelProto`) from a GGUF's llama-spm vocabulary.

Runtimes that take a SentencePiece tokenizer (LiteRT-LM's `.litertlm`) must split text into
exactly the ids llama.cpp gives for the same GGUF, or the two runtimes compute from different
prompts. llama.cpp's "llama" tokenizer is SentencePiece's BPE with byte fallback, driven by
the GGUF's token table, so the table converts piece for piece:

- one piece per GGUF token, in id order, with the GGUF's score; GGUF token types use
  SentencePiece's numbering (1 normal, 2 unknown, 3 control, 4 user defined, 5 unused,
  6 byte), so they are copied unchanged;
- BPE with `byte_fallback`: text no piece covers becomes the `<0xNN>` byte pieces;
- the identity normalizer without `add_dummy_prefix`: the text a runtime is handed already
  carries llama.cpp's space prefix (the library sends each token as llama.cpp renders it,
  " The"), so SentencePiece of " " + text is llama.cpp of text; and a decoder with the dummy
  prefix on drops the first generated piece's leading space, which the C ABI's text keeps;
  `escape_whitespaces` (spaces become "▁" as in the pieces),
  `remove_extra_whitespaces` false (llama.cpp keeps runs of spaces) and no precompiled
  character map (llama.cpp applies no NFKC);
- `split_by_whitespace`, no `split_digits`: llama.cpp's SPM merges across neither;
- llama.cpp matches a user-defined token (type 4) in the raw text before spaces become "▁",
  SentencePiece in the normalized text after: a user-defined piece's spaces are written as
  "▁" (Gemma's "  ", "   ", ...), so both find it where the text has it;
- llama.cpp marks every token whose text is one of its end-of-generation texts as control
  (EOG_TEXTS: Gemma's user-defined "</s>" among them), so a prompt's literal text of one is
  plain text there: such a piece is written as control here too.

The proto is serialized deterministically, so one GGUF gives one byte string.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gguf import GGUFReader

from eliza.formats.gguf_models.header import field

TOKENIZER_MODEL = "llama"
# SentencePiece's ModelProto.SentencePiece.Type values, the same numbers GGUF writes.
_PIECE_TYPES = frozenset(range(1, 7))
UNKNOWN = 2
CONTROL = 3
USER_DEFINED = 4
# The texts llama.cpp's vocabulary treats as end of generation, whatever the GGUF's token
# type says (llama-vocab.cpp, special_eog_ids): it stops at them and never matches them in
# a prompt it is not asked to parse special tokens of.
EOG_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",  # deepseek, fullwidth bars
        "[e~[",
    }
)


class VocabularyError(ValueError):
    """A GGUF vocabulary that is not a SentencePiece (llama-spm) one, or is malformed; str()
    says what is wrong, the caller names the file."""


@dataclass(frozen=True, kw_only=True)
class SpmVocabulary:
    """The parts of a GGUF's `tokenizer.ggml.*` keys a SentencePiece model is made of."""

    tokens: Sequence[str]
    scores: Sequence[float]
    types: Sequence[int]
    bos_id: int
    eos_id: int
    unk_id: int
    add_space_prefix: bool


def read_vocabulary(reader: GGUFReader) -> SpmVocabulary:
    """The llama-spm vocabulary of `reader`'s GGUF, checked to be usable as a SentencePiece
    model; raises VocabularyError."""
    model = _value(reader, "tokenizer.ggml.model")
    if model != TOKENIZER_MODEL:
        found = "no tokenizer.ggml.model" if model is None else f"tokenizer.ggml.model {model!r}"
        raise VocabularyError(f"{found}, not {TOKENIZER_MODEL!r} (a SentencePiece vocabulary)")
    tokens = _value(reader, "tokenizer.ggml.tokens")
    scores = _value(reader, "tokenizer.ggml.scores")
    types = _value(reader, "tokenizer.ggml.token_type")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise VocabularyError("tokenizer.ggml.tokens is missing or not a list of strings")
    for key, values in (("tokenizer.ggml.scores", scores), ("tokenizer.ggml.token_type", types)):
        if not isinstance(values, list) or len(values) != len(tokens):
            found = (
                "missing" if values is None else f"{len(values) if isinstance(values, list) else values!r}"
            )
            raise VocabularyError(f"{key} is {found}, not one value for each of the {len(tokens)} tokens")
    assert isinstance(scores, list) and isinstance(types, list)
    bad_types = sorted({int(t) for t in types} - _PIECE_TYPES)
    if bad_types:
        raise VocabularyError(
            f"tokenizer.ggml.token_type holds {bad_types[:3]}, outside SentencePiece's piece types 1..6"
        )
    ids = {
        name: _token_id(reader, f"tokenizer.ggml.{key}", default, len(tokens))
        for name, key, default in (
            ("bos", "bos_token_id", 1),
            ("eos", "eos_token_id", 2),
            ("unk", "unknown_token_id", 0),
        )
    }
    add_space_prefix = _value(reader, "tokenizer.ggml.add_space_prefix")
    return SpmVocabulary(
        tokens=[str(t) for t in tokens],
        scores=[float(s) for s in scores],
        types=[int(t) for t in types],
        bos_id=ids["bos"],
        eos_id=ids["eos"],
        unk_id=ids["unk"],
        add_space_prefix=True if add_space_prefix is None else bool(add_space_prefix),
    )


def sentencepiece_model(reader: GGUFReader) -> bytes:
    """The serialized SentencePiece ModelProto of `reader`'s GGUF vocabulary (see the module
    docstring for the fields); raises VocabularyError."""
    return model_proto(read_vocabulary(reader))


def model_proto(vocab: SpmVocabulary) -> bytes:
    # A protobuf module without type information: its messages are used as Any.
    from sentencepiece import sentencepiece_model_pb2

    spm: Any = sentencepiece_model_pb2
    model: Any = spm.ModelProto()
    taken = set(vocab.tokens)
    typed_unknown = UNKNOWN in vocab.types
    for index, (token, score, kind) in enumerate(zip(vocab.tokens, vocab.scores, vocab.types, strict=True)):
        if index == vocab.unk_id and not typed_unknown:
            kind = UNKNOWN  # Gemma's GGUF types <unk> control; a SentencePiece model needs one unknown piece
        elif kind == USER_DEFINED and token in EOG_TEXTS:
            kind = CONTROL
        elif kind == USER_DEFINED and " " in token and token.replace(" ", "▁") not in taken:
            token = token.replace(" ", "▁")
        piece = model.pieces.add()
        piece.piece = token
        piece.score = score
        piece.type = kind
    trainer = model.trainer_spec
    trainer.model_type = spm.TrainerSpec.BPE
    trainer.vocab_size = len(vocab.tokens)
    trainer.byte_fallback = True
    trainer.unk_id = vocab.unk_id
    trainer.bos_id = vocab.bos_id
    trainer.eos_id = vocab.eos_id
    trainer.pad_id = -1
    trainer.unk_piece = vocab.tokens[vocab.unk_id]
    trainer.bos_piece = vocab.tokens[vocab.bos_id]
    trainer.eos_piece = vocab.tokens[vocab.eos_id]
    trainer.split_digits = False
    trainer.split_by_whitespace = True
    trainer.allow_whitespace_only_pieces = False
    normalizer = model.normalizer_spec
    normalizer.name = "identity"
    normalizer.add_dummy_prefix = False  # the text comes with llama.cpp's space prefix (above)
    normalizer.remove_extra_whitespaces = False
    normalizer.escape_whitespaces = True
    normalizer.precompiled_charsmap = b""
    serialized: bytes = model.SerializeToString(deterministic=True)
    return serialized


_value = field


def eog_ids(vocab: SpmVocabulary) -> list[int]:
    """EOS, then every other token llama.cpp ends a generation at (EOG_TEXTS), by id."""
    return [vocab.eos_id, *(i for i, t in enumerate(vocab.tokens) if t in EOG_TEXTS and i != vocab.eos_id)]


def _token_id(reader: GGUFReader, key: str, default: int, n_tokens: int) -> int:
    value = _value(reader, key)
    if value is None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < n_tokens:
        raise VocabularyError(f"{key} is {value!r}, not the id of one of the {n_tokens} tokens")
    return value
