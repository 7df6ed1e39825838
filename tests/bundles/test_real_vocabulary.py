"""A real model's vocabulary through the C ABI (the Gemma bundle of matrix.yaml): BOS,
special tokens and byte fallback, judged against the GGUF's own token table, read with
the gguf reader (not through the library under test)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from eliza.adapters.ffi import Context, Library
from eliza.app.project import load_project_matrix
from eliza.app.services.bundle import ensure_bundle, sample_bundle

# From the GGUF's metadata and token table (gguf.GGUFReader), never from the library.
TOKENS = "tokenizer.ggml.tokens"
TYPES = "tokenizer.ggml.token_type"
BOS = "tokenizer.ggml.bos_token_id"
CONTROL = 3
BYTE = 6


class Vocabulary:
    """The token table and BOS id of a GGUF, read from its key-value header (the GGUF
    format's own layout: little-endian, strings as u64 length + bytes)."""

    def __init__(self, model: Path) -> None:
        fields = _gguf_fields(model, {TOKENS, TYPES, BOS})
        self.pieces = [str(p) for p in fields[TOKENS]]
        self.types = [int(t) for t in fields[TYPES]]
        self.bos = int(fields[BOS])
        self.ids = {piece: i for i, piece in enumerate(self.pieces)}


# GGUF value types: their struct codes (scalars), 8 string, 9 array
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def _gguf_fields(model: Path, wanted: set[str]) -> dict[str, object]:
    data = memoryview(model.read_bytes())
    at = 8  # magic, version
    count = struct.unpack_from("<Q", data, at + 8)[0]
    at += 16
    found: dict[str, object] = {}

    def string() -> str:
        nonlocal at
        size = struct.unpack_from("<Q", data, at)[0]
        at += 8 + size
        return bytes(data[at - size : at]).decode("utf-8")

    def value(kind: int) -> object:
        nonlocal at
        if kind == 8:
            return string()
        if kind == 9:
            item, size = struct.unpack_from("<IQ", data, at)
            at += 12
            if item in _SCALARS:
                code = f"<{size}{_SCALARS[item]}"
                items = list(struct.unpack_from(code, data, at))
                at += struct.calcsize(code)
                return items
            return [value(item) for _ in range(size)]
        code = "<" + _SCALARS[kind]
        (one,) = struct.unpack_from(code, data, at)
        at += struct.calcsize(code)
        return one

    for _ in range(count):
        key = string()
        (kind,) = struct.unpack_from("<I", data, at)
        at += 4
        got = value(kind)
        if key in wanted:
            found[key] = got
            if len(found) == len(wanted):
                break
    return found


@pytest.fixture(scope="module")
def bundle() -> Path:
    matrix = load_project_matrix()
    real = sample_bundle(matrix)
    if real.generated:
        pytest.skip("the matrix declares no real model bundle")
    return ensure_bundle(matrix, real)


@pytest.fixture(scope="module")
def vocabulary(bundle: Path) -> Vocabulary:
    return Vocabulary(next((bundle / "text").glob("*.gguf")))


@pytest.fixture(scope="module")
def ctx(lib: Library, bundle: Path) -> Iterator[Context]:
    with lib.open_context(bundle) as opened:
        yield opened


def test_bos_is_the_vocabularys_own_and_only_when_asked(ctx: Context, vocabulary: Vocabulary) -> None:
    with_bos = ctx.tokenize("The capital of France is")
    without = ctx.tokenize("The capital of France is", add_special=False)
    assert vocabulary.pieces[vocabulary.bos] == "<bos>"
    assert with_bos[0] == vocabulary.bos and with_bos[1:] == without
    assert vocabulary.bos not in without


def test_a_special_token_is_one_id_when_parsed_and_plain_text_when_not(
    ctx: Context, vocabulary: Vocabulary
) -> None:
    turn = vocabulary.ids["<start_of_turn>"]
    assert vocabulary.types[turn] == CONTROL
    parsed = ctx.tokenize("<start_of_turn>user\nHi", add_special=False, parse_special=True)
    plain = ctx.tokenize("<start_of_turn>user\nHi", add_special=False)
    assert parsed[0] == turn
    assert turn not in plain and len(plain) > len(parsed)
    # shown back only when asked: the text of a control token is not content
    assert ctx.detokenize(parsed, unparse_special=True) == b"<start_of_turn>user\nHi"
    assert ctx.detokenize(parsed) == b"user\nHi"


@pytest.mark.parametrize(
    "text",
    ["naïve café — 東京 and", "Москва — столица России", "Emoji are 🙂 and 🚀", "𓀀𓀁 hieroglyphs"],
)
def test_multi_byte_text_round_trips_byte_for_byte(ctx: Context, text: str) -> None:
    tokens = ctx.tokenize(text, add_special=False)
    assert ctx.detokenize(tokens) == text.encode("utf-8")


def test_characters_outside_the_vocabulary_fall_back_to_its_byte_tokens(
    ctx: Context, vocabulary: Vocabulary
) -> None:
    text = "𓀀"  # U+13000: no piece of its own in the vocabulary
    assert text not in vocabulary.ids and f"▁{text}" not in vocabulary.ids
    tokens = ctx.tokenize(text, add_special=False)
    expected = [vocabulary.ids[f"<0x{b:02X}>"] for b in text.encode("utf-8")]
    assert all(vocabulary.types[t] == BYTE for t in expected)
    assert tokens[-len(expected) :] == expected


# Whitespace runs the vocabulary has user-defined pieces of ("  ", "\t\t", "\n\n"), Gemma's
# end-of-generation text typed user-defined (</s>), and chat markup.
GEMMA_CORPUS = (
    "<start_of_turn>user\nHi<end_of_turn>",
    "line\n\n\nbreaks\t\t tabs    spaces",
    "<b>html</b> <div>",
    "    indented code\n\tx",
    "a  b   c    d\n  \n",
    "def f(x):\n    return x  # comment\n",
)


def test_the_litertlm_tokenizer_of_the_real_vocabulary_tokenizes_as_llama_cpp(
    ctx: Context, bundle: Path
) -> None:
    """The SentencePiece model a .litertlm carries, written from this GGUF's vocabulary,
    against llama.cpp's tokenizer of it (with BOS, special tokens not parsed: as a prompt
    reaches both). The one text left out has a literal "▁" beside a space: SentencePiece
    cannot tell it from an escaped space (the engine's prefill is then refused, never
    silently different)."""
    import sentencepiece
    from gguf import GGUFReader

    from eliza.formats.sentencepiece_vocab import read_vocabulary, sentencepiece_model
    from tests.backends.test_litertlm_tokenizer import CORPUS

    reader = GGUFReader(next((bundle / "text").glob("*.gguf")))
    prefix = " " if read_vocabulary(reader).add_space_prefix else ""
    model = sentencepiece.SentencePieceProcessor(model_proto=sentencepiece_model(reader))
    differ = {}
    texts = [t for t in CORPUS + GEMMA_CORPUS if "▁" not in t]
    for text in texts:
        expected = ctx.tokenize(text, add_special=True, parse_special=False)
        actual = [model.bos_id(), *(model.encode(prefix + text) if text else [])]
        if actual != expected:
            differ[text] = (expected, actual)
    assert not differ, f"{len(differ)} of {len(texts)} texts tokenize otherwise than llama.cpp: {differ}"
