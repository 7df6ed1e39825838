"""The SentencePiece tokenizer a .litertlm carries (eliza.formats.sentencepiece_vocab)
against llama.cpp's tokenizer of the same GGUF, through the built library: LiteRT-LM and
llama.cpp compute from the same prompt only when both split text into the same ids.

llama.cpp is asked with BOS and without parsing special tokens (a literal "<s>" is text),
the way a prompt reaches it; SentencePiece adds no BOS, so it is prepended here, and no
dummy prefix (the library hands the engine text that already carries llama.cpp's leading
space, as llama.cpp renders its tokens), so it is given " " + text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFReader

from eliza.adapters.ffi import Context
from eliza.formats.sentencepiece_vocab import sentencepiece_model
from tests.silence import pytest_runtest_makereport  # noqa: F401  (the silence check, for every test here)

# Multi-byte UTF-8, characters only byte fallback covers, runs of spaces, control and
# invisible characters, literal special-token text and the escaped-space character itself.
CORPUS = (
    "",
    "a",
    " ",
    "\n",
    "Hello world",
    "Hello  world",
    " leading space",
    "trailing space ",
    "  two leading",
    "tabs\tand\nnewlines\n\nend",
    "naïve café — 東京 and €",
    "日本語のテキスト",
    "emoji 🙂🚀👍🏽 family 👨‍👩‍👧",
    "rare CJK 𠜎𠜱𡃁 and 䶵",
    "Ωμέγα Ελληνικά",
    "Привет, мир!",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "x = a*b + c/d; // code {}[]()",
    "1234567890 3.14159 1e-9",
    "<s> literal </s> and <unk>",
    "▁ underscore-like ▁▁",
    "\u00a0nbsp\u200bzwsp\u2028ls",
    "ÅÄÖ åäö ß ẞ",
    "The quick brown fox jumps over the lazy dog.",
    "\u0001\u0007 control chars \u007f",
    "ﬁ ligature ① circled Ⅻ roman",
    "😀😃😄😁😆😅😂🤣",
    "mixed日本English한국어text",
    "é (precomposed) vs é (decomposed)",
)


@pytest.fixture(scope="module")
def sentencepiece(tiny_bundle: Path) -> Any:
    import sentencepiece as spm

    (model,) = sorted((tiny_bundle / "text").glob("*.gguf"))
    return spm.SentencePieceProcessor(model_proto=sentencepiece_model(GGUFReader(model)))


def test_sentencepiece_tokenizes_as_llama_cpp(ctx: Context, sentencepiece: Any) -> None:
    differ = {}
    for text in CORPUS:
        expected = ctx.tokenize(text, add_special=True, parse_special=False)
        actual = [sentencepiece.bos_id(), *(sentencepiece.encode(" " + text) if text else [])]
        if actual != expected:
            differ[text] = (expected, actual)
    assert not differ, f"{len(differ)} of {len(CORPUS)} texts tokenize otherwise than llama.cpp: {differ}"
