"""The LiteRT-LM file written from a llama GGUF (eliza.formats.litertlm).

The file is read back with the container's own header schema, its TFLite section is run in
ai_edge_litert's Interpreter the way LiteRT-LM's CPU executor drives it (padded prefill,
then decode, caches swapped back in), and the logits are compared with an independent
float64 forward pass of the GGUF as stored, with llama.cpp's adjacent-pair rope on the
permuted Q/K rows. The SentencePiece section is judged against the GGUF's token table; its
equality with llama.cpp's tokenizer is tests/backends/test_litertlm_tokenizer.py (needs the
built library).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import dequantize

from eliza.app.services.bundle import tiny_vocab
from eliza.cli import main
from eliza.formats import litertlm
from eliza.formats.files import sha256_file
from eliza.formats.litertlm import (
    CREATION_TIMESTAMP,
    FORMAT,
    WRITER_VERSION,
    LitertlmError,
    LitertlmRecord,
    default_out_path,
    record_path,
    stale_reason,
    write_litertlm,
)
from eliza.formats.sentencepiece_vocab import sentencepiece_model
from eliza.formats.tiny_gguf import TinyGemma3Spec, TinyModelSpec, write_tiny_gemma3_gguf, write_tiny_gguf
from tests.gemma3_reference import int8_rows
from tests.quantized_gguf import quantized_copy, write_out

PREFILL = (1, 8)
CONTEXT = 64
# Multi-byte UTF-8, characters only byte fallback covers, spaces and control characters.
CORPUS = (
    "Hello world",
    "Hello  world",
    " leading space",
    "trailing space ",
    "tabs\tand\nnewlines\n\nend",
    "naïve café — 東京 and €",
    "emoji 🙂🚀👍🏽 family 👨‍👩‍👧",
    "rare CJK 𠜎𠜱𡃁 and 䶵",
    "Привет, мир! مرحبا नमस्ते",
    "<s> literal </s> and <unk>",
    "\u00a0nbsp\u200bzwsp\u2028ls",
    "\u0001\u0007 control chars \u007f",
    "é (precomposed) vs é (decomposed)",
    "x = a*b + c/d; // code {}[]() 3.14159",
)
NEG = -0.7 * float(np.finfo(np.float32).max)  # the executor's masked-out value


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bundle") / "text" / "eliza-tiny.gguf"
    write_tiny_gguf(path, tiny_vocab(), TinyModelSpec())
    return path


@pytest.fixture(scope="module")
def reader(tiny_gguf: Path) -> GGUFReader:
    """Read once: a reader of the 32000-token vocabulary takes about a second to open."""
    return GGUFReader(tiny_gguf)


@pytest.fixture(scope="module")
def written(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> LitertlmRecord:
    """The tiny GGUF's file, written once (read-only: tests that alter one copy it)."""
    out = tmp_path_factory.mktemp("first") / "tiny.litertlm"
    return write_litertlm(tiny_gguf, out, prefill_lengths=PREFILL, context=CONTEXT)


@pytest.fixture(scope="module")
def sections(written: LitertlmRecord) -> dict[str, tuple[dict[str, Any], bytes]]:
    return read_litertlm(written.out)[1]


@pytest.fixture(scope="module")
def spm(sections: dict[str, tuple[dict[str, Any], bytes]]) -> Any:
    """The tokenizer the file carries."""
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_proto=sections["SP_Tokenizer"][1])


def read_litertlm(path: Path) -> tuple[dict[str, Any], dict[str, tuple[dict[str, Any], bytes]]]:
    """(system metadata, {section type: (its metadata, its bytes)}) through the container's
    header schema: magic, version, the header's end at byte 24, the metadata from byte 32."""
    from litert_lm_builder import litertlm_core, litertlm_peek
    from litert_lm_builder import litertlm_header_schema_py_generated as schema

    data = path.read_bytes()
    assert data[:8] == b"LITERTLM"
    end = struct.unpack_from("<Q", data, 24)[0]
    header = schema.LiteRTLMMetaData.GetRootAs(data[32:end], 0)

    def values(count: int, item: Any) -> dict[str, Any]:
        pairs = (litertlm_peek.kvp_to_dict(item(i)) for i in range(count))
        return {pair["key"]: pair["value"] for pair in pairs}

    system = header.SystemMetadata()
    found: dict[str, tuple[dict[str, Any], bytes]] = {}
    objects = header.SectionMetadata()
    for i in range(objects.ObjectsLength()):
        section = objects.Objects(i)
        kind = litertlm_core.any_section_data_type_to_string(section.DataType())
        found[kind] = (
            values(section.ItemsLength(), section.Items),
            data[section.BeginOffset() : section.EndOffset()],
        )
    return values(system.EntriesLength(), system.Entries), found


def write_small_gguf(path: Path, *, arch: str = "llama", vocab: bool = True, int_q: bool = False) -> Path:
    """A one-layer GGUF of 8 tokens, in milliseconds; `int_q` stores attn_q as I32, a type
    gguf cannot dequantize."""
    rng = np.random.default_rng(3)
    d, ff, n_vocab = 8, 16, 8
    weights = {
        "token_embd.weight": rng.standard_normal((n_vocab, d)),
        "output_norm.weight": np.ones(d),
        "blk.0.attn_norm.weight": np.ones(d),
        "blk.0.ffn_norm.weight": np.ones(d),
        "blk.0.attn_q.weight": rng.standard_normal((d, d)),
        "blk.0.attn_k.weight": rng.standard_normal((d, d)),
        "blk.0.attn_v.weight": rng.standard_normal((d, d)),
        "blk.0.attn_output.weight": rng.standard_normal((d, d)),
        "blk.0.ffn_gate.weight": rng.standard_normal((ff, d)),
        "blk.0.ffn_up.weight": rng.standard_normal((ff, d)),
        "blk.0.ffn_down.weight": rng.standard_normal((d, ff)),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(str(path), arch=arch)
    writer.add_context_length(16)
    writer.add_embedding_length(d)
    writer.add_block_count(1)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    if vocab:
        writer.add_tokenizer_model("llama")
        writer.add_token_list(["<unk>", "<s>", "</s>", "▁a", "▁b", "a", "b", "▁"])
        writer.add_token_scores([0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0])
        writer.add_token_types([2, 3, 3, 1, 1, 1, 1, 1])
    for name, tensor in weights.items():
        integer = int_q and name == "blk.0.attn_q.weight"
        writer.add_tensor(name, tensor.astype(np.int32 if integer else np.float32))
    write_out(writer)
    return path


# ------------------------------------------------------------------ an independent forward pass


def reference_logits(reader: GGUFReader, tokens: list[int], matrices: Any = None) -> np.ndarray[Any, Any]:
    """Logits of every position in float64, from the GGUF as stored: Q/K rows permuted, so
    dimensions 2i and 2i+1 rotate together (llama.cpp's NORM rope); `matrices`, when given,
    maps every matrix first, by name and values (to int8_rows: a .litertlm's int8 weights)."""

    def value(key: str) -> Any:
        return reader.fields[key].contents()

    def values(t: Any) -> np.ndarray[Any, Any]:
        data = t.data if t.tensor_type.name in ("F32", "F16") else dequantize(t.data, t.tensor_type)
        return np.asarray(data, dtype=np.float64).reshape(tuple(reversed(t.shape.tolist())))

    w = {t.name: values(t) for t in reader.tensors}
    if matrices is not None:
        w = {name: matrices(name, v) if v.ndim == 2 else v for name, v in w.items()}
    n_head, n_kv = value("llama.attention.head_count"), value("llama.attention.head_count_kv")
    hd, eps = value("llama.embedding_length") // n_head, value("llama.attention.layer_norm_rms_epsilon")
    n = len(tokens)
    angles = np.arange(n)[:, None, None] * 10000.0 ** (-np.arange(0, hd, 2) / hd)

    def norm(x: np.ndarray[Any, Any], weight: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.asarray(x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * weight)

    def rope(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out = np.empty_like(x)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x1 * np.cos(angles) - x2 * np.sin(angles)
        out[..., 1::2] = x1 * np.sin(angles) + x2 * np.cos(angles)
        return out

    x = w["token_embd.weight"][tokens]
    for i in range(value("llama.block_count")):
        p = f"blk.{i}."
        h = norm(x, w[p + "attn_norm.weight"])
        q = rope((h @ w[p + "attn_q.weight"].T).reshape(n, n_head, hd))
        k = np.repeat(rope((h @ w[p + "attn_k.weight"].T).reshape(n, n_kv, hd)), n_head // n_kv, 1)
        v = np.repeat((h @ w[p + "attn_v.weight"].T).reshape(n, n_kv, hd), n_head // n_kv, 1)
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)
        scores[:, np.triu(np.ones((n, n), dtype=bool), 1)] = -np.inf
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        x = x + np.einsum("hts,shd->thd", probs, v).reshape(n, n_head * hd) @ w[p + "attn_output.weight"].T
        h = norm(x, w[p + "ffn_norm.weight"])
        gate = h @ w[p + "ffn_gate.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    return np.asarray(norm(x, w["output_norm.weight"]) @ w["output.weight"].T)


# ------------------------------------------------------------------ determinism and the record


def test_writing_twice_gives_identical_bytes(
    tiny_gguf: Path, written: LitertlmRecord, tmp_path: Path
) -> None:
    again = write_litertlm(tiny_gguf, tmp_path / "again.litertlm", prefill_lengths=PREFILL, context=CONTEXT)
    assert again.out.read_bytes() == written.out.read_bytes()
    assert again.output_sha256 == written.output_sha256 == sha256_file(written.out)
    system, _ = read_litertlm(written.out)
    assert system["creation_timestamp"] == CREATION_TIMESTAMP
    assert len(system["uuid"]) == 36 and system["uuid"][14] == "5"  # name-based, from the sections
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.litertlm", "again.litertlm.json"]


def test_record_names_the_source_and_the_writer(tiny_gguf: Path, written: LitertlmRecord) -> None:
    record = json.loads(record_path(written.out).read_text())
    assert record == {
        "format": FORMAT,
        "writer_version": WRITER_VERSION,
        "eliza_version": record["eliza_version"],
        "source_gguf": "eliza-tiny.gguf",
        "source_sha256": sha256_file(tiny_gguf),
        "output": "tiny.litertlm",
        "output_sha256": sha256_file(written.out),
        "prefill_lengths": list(PREFILL),
        "context": CONTEXT,
        # llama attends over the whole context in every layer: no ring
        "cache": {
            "global_rows": CONTEXT,
            "ring_rows": 0,
            "sliding_window": 0,
            "widest_prefill": 0,
            "ring_layers": [],
        },
    }
    assert record_path(written.out).name == "tiny.litertlm.json"
    assert written.size == written.out.stat().st_size
    assert default_out_path(tiny_gguf) == tiny_gguf.parent / "eliza-tiny.litertlm"


def test_stale_reason_names_what_changed(tiny_gguf: Path, written: LitertlmRecord, tmp_path: Path) -> None:
    gguf = shutil.copy2(tiny_gguf, tmp_path / "model.gguf")
    out = shutil.copy2(written.out, tmp_path / "model.litertlm")
    record = shutil.copy2(record_path(written.out), record_path(Path(out)))
    gguf, out, record = Path(gguf), Path(out), Path(record)
    assert stale_reason(gguf, out) is None
    assert stale_reason(gguf, out, prefill_lengths=(8, 1, 8), context=CONTEXT) is None
    assert str(stale_reason(gguf, out, context=512)).endswith(
        f": has context 64, not 512; rewrite it: eliza litertlm {gguf} --context 512"
    )
    assert "prefill lengths [1, 8], not [1, 8, 32]" in str(
        stale_reason(gguf, out, prefill_lengths=(1, 8, 32))
    )

    data = bytearray(out.read_bytes())
    data[len(data) // 2] ^= 1
    out.write_bytes(bytes(data))
    reason = str(stale_reason(gguf, out))
    assert reason.startswith(f"{out}: changed since it was written")
    assert reason.endswith(f"; rewrite it: eliza litertlm {gguf}")  # out is the default: no --out

    shutil.copy2(written.out, out)
    with gguf.open("r+b") as handle:  # one byte of the tensor data: still a readable GGUF
        handle.seek(-1, 2)
        last = handle.read(1)
        handle.seek(-1, 2)
        handle.write(bytes([last[0] ^ 1]))
    assert f"written from eliza-tiny.gguf (sha256 {written.source_sha256[:12]})" in str(
        stale_reason(gguf, out)
    )

    shutil.copy2(tiny_gguf, gguf)
    stored = json.loads(record.read_text())
    record.write_text(json.dumps(stored | {"writer_version": "0"}))
    assert f"written by writer version '0', this is version {WRITER_VERSION!r}" in str(
        stale_reason(gguf, out)
    )
    record.unlink()
    assert "no model.litertlm.json beside it" in str(stale_reason(gguf, out))
    out.unlink()
    assert str(stale_reason(gguf, out)).startswith(f"{out}: missing")
    with pytest.raises(LitertlmError, match="no such GGUF file"):
        stale_reason(tmp_path / "absent.gguf", out)


def test_an_interrupted_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = write_small_gguf(tmp_path / "text" / "small.gguf")
    out = write_litertlm(small, tmp_path / "small.litertlm").out
    before = out.read_bytes()

    def torn(path: Path, sections: object) -> None:
        path.write_bytes(b"LITERTLM half")
        raise OSError("disk full")

    monkeypatch.setattr(litertlm, "_pack", torn)
    with pytest.raises(OSError, match="disk full"):
        write_litertlm(small, out)
    assert out.read_bytes() == before
    assert stale_reason(small, out) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.litertlm", "small.litertlm.json", "text"]


# ------------------------------------------------------------------ refusals


def test_refusals_name_the_file_and_the_reason(tmp_path: Path) -> None:
    cases = {
        "not a GGUF": (tmp_path / "noise.gguf", "not a readable GGUF file"),
        "gpt2": (write_small_gguf(tmp_path / "gpt2.gguf", arch="gpt2"), "architecture 'gpt2', not 'llama'"),
        "no vocabulary": (
            write_small_gguf(tmp_path / "bare.gguf", vocab=False),
            "no tokenizer.ggml.model, not 'llama'",
        ),
        "unreadable tensor": (
            write_small_gguf(tmp_path / "int.gguf", int_q=True),
            "blk.0.attn_q.weight is of type I32, which gguf cannot dequantize",
        ),
        "missing": (tmp_path / "absent.gguf", "no such GGUF file"),
    }
    (tmp_path / "noise.gguf").write_bytes(b"GGUF" + bytes(range(60)))
    for case, (gguf, message) in cases.items():
        out = tmp_path / f"{gguf.stem}.litertlm"
        with pytest.raises(LitertlmError) as caught:
            write_litertlm(gguf, out)
        text = str(caught.value)
        assert text.startswith(f"{gguf}: ") and message in text and "\n" not in text, (case, text)
        assert not out.exists() and not record_path(out).exists(), case
    small = write_small_gguf(tmp_path / "small.gguf")
    for options, message in (
        ({"prefill_lengths": (0, 8)}, "prefill lengths [0, 8] are not one or more integers in 1..16"),
        ({"prefill_lengths": (32,)}, "in 1..16"),
        ({"context": 17}, "context 17 is outside 1..16"),
    ):
        with pytest.raises(LitertlmError, match=message.replace("[", r"\[").replace("]", r"\]")):
            write_litertlm(small, tmp_path / "small.litertlm", **options)  # type: ignore[arg-type]
    with pytest.raises(LitertlmError, match="would replace the GGUF"):
        write_litertlm(small, small)


def test_cli_writes_beside_the_gguf_and_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small = write_small_gguf(tmp_path / "text" / "small.gguf")
    assert main(["litertlm", str(small), "--prefill", "1", "4", "--context", "8"]) == 0
    printed = capsys.readouterr().out
    assert (
        printed.startswith(f"{tmp_path / 'text' / 'small.litertlm'}: ")
        and "(prefill 1, 4; context 8)" in printed
    )
    assert (
        stale_reason(small, tmp_path / "text" / "small.litertlm", prefill_lengths=(1, 4), context=8) is None
    )
    assert main(["litertlm", str(write_small_gguf(tmp_path / "gpt2.gguf", arch="gpt2"))]) == 2
    error = capsys.readouterr().err
    assert error.startswith("eliza: error: ") and "architecture 'gpt2'" in error and error.count("\n") == 1


# ------------------------------------------------------------------ the sections


def test_sections_are_the_metadata_the_tokenizer_and_the_model(
    reader: GGUFReader, sections: dict[str, tuple[dict[str, Any], bytes]]
) -> None:
    from litert_lm_builder.runtime.proto import llm_metadata_pb2

    assert sorted(sections) == ["LlmMetadataProto", "SP_Tokenizer", "TFLiteModel"]
    assert sections["TFLiteModel"][0] == {"model_type": "tf_lite_prefill_decode"}
    assert sections["SP_Tokenizer"][1] == sentencepiece_model(reader)  # computed again: deterministic
    metadata = llm_metadata_pb2.LlmMetadata.FromString(sections["LlmMetadataProto"][1])
    assert list(metadata.start_token.token_ids.ids) == [1]  # tokenizer.ggml.bos_token_id
    assert [list(t.token_ids.ids) for t in metadata.stop_tokens] == [[2]]  # eos_token_id
    assert metadata.max_num_tokens == CONTEXT
    assert metadata.llm_model_type.WhichOneof("model_type") == "generic_model"


def test_sentencepiece_model_is_the_ggufs_vocabulary(reader: GGUFReader) -> None:
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto.FromString(sentencepiece_model(reader))
    assert [p.piece for p in model.pieces] == reader.fields["tokenizer.ggml.tokens"].contents()
    assert [p.type for p in model.pieces] == reader.fields["tokenizer.ggml.token_type"].contents()
    np.testing.assert_array_equal(
        [p.score for p in model.pieces], np.float32(reader.fields["tokenizer.ggml.scores"].contents())
    )
    trainer, normalizer = model.trainer_spec, model.normalizer_spec
    assert trainer.model_type == sentencepiece_model_pb2.TrainerSpec.BPE and trainer.byte_fallback
    assert (trainer.unk_id, trainer.bos_id, trainer.eos_id, trainer.pad_id) == (0, 1, 2, -1)
    assert trainer.split_by_whitespace and not trainer.split_digits
    assert normalizer.name == "identity" and normalizer.escape_whitespaces
    assert not normalizer.add_dummy_prefix  # the text arrives with llama.cpp's space prefix
    assert not normalizer.remove_extra_whitespaces and normalizer.precompiled_charsmap == b""


def test_sentencepiece_round_trips_the_corpus_with_byte_fallback(spm: Any) -> None:
    for text in CORPUS:
        assert spm.decode(spm.encode(text)) == text, text
    # A character without a piece becomes the byte pieces of its UTF-8 encoding.
    pieces = spm.encode("𠜎", out_type=str)
    assert pieces[-4:] == [f"<0x{b:02X}>" for b in "𠜎".encode()]


def test_model_has_the_executors_signatures(sections: dict[str, tuple[dict[str, Any], bytes]]) -> None:
    interpreter_module = pytest.importorskip("ai_edge_litert.interpreter")
    interpreter = interpreter_module.Interpreter(model_content=sections["TFLiteModel"][1])
    caches = {f"kv_cache_{kind}_{i}" for kind in "kv" for i in range(2)}
    signatures = interpreter.get_signature_list()
    assert sorted(signatures) == ["decode", "prefill_1", "prefill_8"]
    for key, n in (("prefill_1", 1), ("prefill_8", 8), ("decode", 1)):
        runner = interpreter.get_signature_runner(key)
        inputs, outputs = runner.get_input_details(), runner.get_output_details()
        expected = {"tokens": ([1, n], np.int32), "input_pos": ([n], np.int32)}
        expected |= {"mask": ([1, 1, n, CONTEXT], np.float32)}
        expected |= {name: ([1, CONTEXT, 2, 16], np.float32) for name in caches}
        assert {name: (list(d["shape"]), d["dtype"]) for name, d in inputs.items()} == expected, key
        output_names = caches | ({"logits"} if key == "decode" else set())
        assert set(outputs) == output_names, key
        if key == "decode":
            assert list(outputs["logits"]["shape"]) == [1, 1, 32000]


def test_model_computes_the_ggufs_logits(
    reader: GGUFReader, sections: dict[str, tuple[dict[str, Any], bytes]]
) -> None:
    """Driven as the executor does: a prefill padded to 8 (rows past the prompt at position
    0, fully masked), a prefill of 1, then decodes, the caches handed back each time."""
    interpreter_module = pytest.importorskip("ai_edge_litert.interpreter")
    interpreter = interpreter_module.Interpreter(model_content=sections["TFLiteModel"][1])
    tokens = [1, 450, 4996, 310, 278, 8666, 29889, 13, 100, 29871]
    expected = reference_logits(reader, tokens)
    decode = interpreter.get_signature_runner("decode")
    caches = {
        name: np.zeros(d["shape"], np.float32)
        for name, d in decode.get_input_details().items()
        if name.startswith("kv_cache")
    }

    def run(key: str, chunk: list[int], start: int, width: int) -> dict[str, Any]:
        ids, pos = np.zeros((1, width), np.int32), np.zeros(width, np.int32)
        ids[0, : len(chunk)], pos[: len(chunk)] = chunk, np.arange(start, start + len(chunk))
        mask = np.full((1, 1, width, CONTEXT), NEG, np.float32)
        for row in range(len(chunk)):
            mask[0, 0, row, : start + row + 1] = 0
        out: dict[str, Any] = interpreter.get_signature_runner(key)(
            tokens=ids, input_pos=pos, mask=mask, **caches
        )
        caches.update({name: out[name] for name in caches})
        return out

    run("prefill_8", tokens[:5], 0, 8)
    run("prefill_1", tokens[5:6], 5, 1)
    for step in range(6, len(tokens)):
        logits = run("decode", [tokens[step]], step, 1)["logits"][0, 0]
        assert int(np.argmax(logits)) == int(np.argmax(expected[step])), step
        np.testing.assert_allclose(logits, expected[step], atol=2e-3, rtol=0)


# ------------------------------------------------------------------ Gemma 3

# Two shapes: the default (tied, 3 heads over 1 KV head, window 6, every 3rd layer global)
# and an untied one of other widths, heads (4 over 2), window (4) and pattern (2).
GEMMA_SHAPES = {
    "tied": TinyGemma3Spec(vocab_size=4000),
    "untied": TinyGemma3Spec(
        seed=3,
        n_embd=64,
        n_layer=5,
        n_head=4,
        n_head_kv=2,
        head_dim=32,
        n_ff=96,
        sliding_window=4,
        swa_pattern=2,
        rope_base=500000.0,
        rope_base_local=20000.0,
        tied=False,
        vocab_size=3000,
    ),
}
GEMMA_CONTEXT = 48
# Measured: 3e-6 against logits of magnitude about 2 (float32 graph, float64 reference).
GEMMA_ATOL = 5e-5


@pytest.fixture(scope="module", params=sorted(GEMMA_SHAPES))
def gemma(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the GGUF, its .litertlm) of one Gemma 3 shape."""
    path = tmp_path_factory.mktemp(f"gemma-{request.param}") / "text" / "gemma.gguf"
    write_tiny_gemma3_gguf(path, tiny_vocab(), GEMMA_SHAPES[request.param])
    out = write_litertlm(path, default_out_path(path), prefill_lengths=PREFILL, context=GEMMA_CONTEXT).out
    return path, out


def run_as_the_executor(model: bytes, context: int, tokens: list[int], chunks: list[tuple[str, int]]) -> Any:
    """Drives the model as LiteRT-LM's CPU executor does: each chunk (signature, count) of
    the prompt padded to its width, rows past the prompt at position 0 and fully masked,
    the caches handed back each time; then a decode of each remaining token. Yields
    (position, logits) of every decode."""
    interpreter_module = pytest.importorskip("ai_edge_litert.interpreter")
    interpreter = interpreter_module.Interpreter(model_content=model)
    decode = interpreter.get_signature_runner("decode")
    caches = {
        name: np.zeros(d["shape"], np.float32)
        for name, d in decode.get_input_details().items()
        if name.startswith("kv_cache")
    }

    def run(key: str, chunk: list[int], start: int, width: int) -> dict[str, Any]:
        ids, pos = np.zeros((1, width), np.int32), np.zeros(width, np.int32)
        ids[0, : len(chunk)], pos[: len(chunk)] = chunk, np.arange(start, start + len(chunk))
        mask = np.full((1, 1, width, context), NEG, np.float32)
        for row in range(len(chunk)):
            mask[0, 0, row, : start + row + 1] = 0
        out: dict[str, Any] = interpreter.get_signature_runner(key)(
            tokens=ids, input_pos=pos, mask=mask, **caches
        )
        caches.update({name: out[name] for name in caches})
        return out

    at = 0
    for key, count in chunks:
        run(key, tokens[at : at + count], at, int(key.removeprefix("prefill_")))
        at += count
    for step in range(at, len(tokens)):
        yield step, run("decode", [tokens[step]], step, 1)["logits"][0, 0]


def test_gemma3_model_computes_the_ggufs_logits_past_the_sliding_window(gemma: tuple[Path, Path]) -> None:
    """Prefills of 8 (one padded), then 1, then decodes: 20 tokens, three times and more the
    window, so every local layer's window masks keys the global layers still see."""
    from tests.gemma3_reference import reference_logits as gemma3_reference

    gguf, out = gemma
    reader = GGUFReader(gguf)
    window = int(reader.fields["gemma3.attention.sliding_window"].contents())
    tokens = [1, *np.random.default_rng(4).integers(3, len(reader.fields["tokenizer.ggml.tokens"].data), 19)]
    assert len(tokens) > 3 * window
    expected = gemma3_reference(reader, [int(t) for t in tokens])
    model = read_litertlm(out)[1]["TFLiteModel"][1]
    decoded = 0
    chunks = [("prefill_8", 8), ("prefill_8", 5), ("prefill_1", 1)]
    for step, logits in run_as_the_executor(model, GEMMA_CONTEXT, tokens, chunks):
        assert int(np.argmax(logits)) == int(np.argmax(expected[step])), step
        np.testing.assert_allclose(logits, expected[step], atol=GEMMA_ATOL, rtol=0)
        decoded += 1
    assert decoded == len(tokens) - 14


def test_gemma3_local_layers_keep_ring_caches_of_their_window(gemma: tuple[Path, Path]) -> None:
    """Each sliding-window layer's caches are a ring of window + the widest prefill rows, each
    global layer's the context's; the record states the layout (the backend's rewind reads it)."""
    from ai_edge_litert.interpreter import Interpreter

    gguf, out = gemma
    reader = GGUFReader(gguf)
    window = int(reader.fields["gemma3.attention.sliding_window"].contents())
    pattern = int(reader.fields["gemma3.attention.sliding_window_pattern"].contents())
    n_layer = int(reader.fields["gemma3.block_count"].contents())
    ring = window + max(PREFILL)
    expected = [GEMMA_CONTEXT if i % pattern == pattern - 1 else ring for i in range(n_layer)]
    interpreter = Interpreter(model_content=read_litertlm(out)[1]["TFLiteModel"][1])
    for key in ("decode", *(f"prefill_{n}" for n in PREFILL)):
        inputs = interpreter.get_signature_runner(key).get_input_details()
        assert [int(inputs[f"kv_cache_k_{i}"]["shape"][1]) for i in range(n_layer)] == expected, key
        assert [int(inputs[f"kv_cache_v_{i}"]["shape"][1]) for i in range(n_layer)] == expected, key
        assert int(inputs["mask"]["shape"][-1]) == GEMMA_CONTEXT  # the engine's context
    record = json.loads(record_path(out).read_text())
    assert record["cache"] == {
        "global_rows": GEMMA_CONTEXT,
        "ring_rows": ring,
        "sliding_window": window,
        "widest_prefill": max(PREFILL),
        "ring_layers": [i for i, rows in enumerate(expected) if rows == ring],
    }


def test_gemma3_ring_caches_compute_the_ggufs_logits_far_past_the_window(gemma: tuple[Path, Path]) -> None:
    """45 tokens, more than three times each ring (window + 8 rows): prefill chunks that wrap
    around the ring, a padded one right after a wrap, a one-token prefill, then decodes, each
    position's logits against the float64 pass."""
    from tests.gemma3_reference import reference_logits as gemma3_reference

    gguf, out = gemma
    reader = GGUFReader(gguf)
    window = int(reader.fields["gemma3.attention.sliding_window"].contents())
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    tokens = [1, *np.random.default_rng(7).integers(3, vocab, GEMMA_CONTEXT - 4)]
    assert len(tokens) >= 3 * (window + max(PREFILL))
    expected = gemma3_reference(reader, [int(t) for t in tokens])
    model = read_litertlm(out)[1]["TFLiteModel"][1]
    chunks = [("prefill_8", 8), ("prefill_8", 5), ("prefill_8", 8), ("prefill_8", 3), ("prefill_1", 1)]
    decoded = 0
    for step, logits in run_as_the_executor(model, GEMMA_CONTEXT, tokens, chunks):
        assert int(np.argmax(logits)) == int(np.argmax(expected[step])), step
        np.testing.assert_allclose(logits, expected[step], atol=GEMMA_ATOL, rtol=0)
        decoded += 1
    assert decoded == len(tokens) - 25


def test_gemma3_a_context_within_the_ring_keeps_every_layer_whole(tmp_path: Path) -> None:
    """A context no longer than window + the widest prefill gains nothing from a ring."""
    path = tmp_path / "text" / "gemma.gguf"
    spec = GEMMA_SHAPES["tied"]
    write_tiny_gemma3_gguf(path, tiny_vocab(), spec)
    record = write_litertlm(
        path, default_out_path(path), prefill_lengths=PREFILL, context=spec.sliding_window + 8
    )
    assert record.cache["ring_rows"] == 0 and record.cache["ring_layers"] == []


def test_gemma3_sections_name_the_model_type_and_its_stop_tokens(gemma: tuple[Path, Path]) -> None:
    from litert_lm_builder.runtime.proto import llm_metadata_pb2

    gguf, out = gemma
    reader = GGUFReader(gguf)
    sections = read_litertlm(out)[1]
    metadata = llm_metadata_pb2.LlmMetadata.FromString(sections["LlmMetadataProto"][1])
    assert metadata.llm_model_type.WhichOneof("model_type") == "gemma3"
    assert list(metadata.start_token.token_ids.ids) == [1]
    assert [list(t.token_ids.ids) for t in metadata.stop_tokens] == [[2]]  # no <end_of_turn> here
    assert metadata.max_num_tokens == GEMMA_CONTEXT
    assert sections["SP_Tokenizer"][1] == sentencepiece_model(reader)
    assert stale_reason(gguf, out, prefill_lengths=PREFILL, context=GEMMA_CONTEXT) is None


def test_gemma3_tied_embedding_is_one_buffer(gemma: tuple[Path, Path]) -> None:
    from ai_edge_litert import schema_py_generated as schema

    gguf, out = gemma
    reader = GGUFReader(gguf)
    model = schema.Model.GetRootAs(read_litertlm(out)[1]["TFLiteModel"][1], 0)
    vocab, width = (
        int(n) for n in reversed(next(t for t in reader.tensors if t.name == "token_embd.weight").shape)
    )
    table = vocab * width * 4
    tied = all(t.name != "output.weight" for t in reader.tensors)
    sizes = [model.Buffers(i).DataLength() for i in range(model.BuffersLength())]
    assert sizes.count(table) == (1 if tied else 2)


# ------------------------------------------------------------------ int8 weights

# XNNPACK multiplies int8 weights with activations it quantizes to int8 per row as it goes
# (its dynamically quantized kernels), so even against a float64 pass over the same int8
# weights a logit moves: by at most 4.0 % of the step's largest logit over the 26 decode
# steps of the three models below (measured). The bound is half as much again.
INT8_LOGIT_TOLERANCE = 0.06


def assert_int8_logits(logits: Any, int8: Any, step: int) -> None:
    """Within the tolerance of the pass over the int8 weights; the same argmax wherever the
    pass's top two lie further apart than twice the tolerance."""
    bound = INT8_LOGIT_TOLERANCE * float(np.abs(int8).max())
    error = float(np.abs(logits - int8).max())
    assert error <= bound, (step, error, bound)
    top_two = np.sort(int8)[-2:]
    if top_two[1] - top_two[0] > 2 * bound:
        assert int(np.argmax(logits)) == int(np.argmax(int8)), step


# Widths of multiples of 32, so every matrix can be stored as Q8_0.
INT8_GEMMA_SHAPES = {
    "tied": TinyGemma3Spec(
        seed=5, n_embd=64, n_layer=3, n_head=2, n_head_kv=1, head_dim=32, n_ff=128, sliding_window=4,
        swa_pattern=2, tied=True, vocab_size=3000,
    ),
    "untied": GEMMA_SHAPES["untied"],
}  # fmt: skip


@pytest.mark.parametrize("arch", ["llama", *sorted(INT8_GEMMA_SHAPES)])
def test_a_quantized_models_matrices_are_int8_per_channel_and_compute_its_logits(
    arch: str, tmp_path: Path
) -> None:
    """A Q8_0 model: every quantized matrix of the graph (the embedding too, once) int8 with
    one scale per row, float ones and the norms float32; its logits those of these weights,
    driven as the executor does."""
    from ai_edge_litert import schema_py_generated as schema

    from tests.gemma3_reference import reference_logits as gemma3_reference

    source = tmp_path / "float.gguf"
    if arch == "llama":
        write_tiny_gguf(source, tiny_vocab(), TinyModelSpec())
        context, chunks = CONTEXT, [("prefill_8", 5), ("prefill_1", 1)]
    else:
        write_tiny_gemma3_gguf(source, tiny_vocab(), INT8_GEMMA_SHAPES[arch])
        context, chunks = GEMMA_CONTEXT, [("prefill_8", 8), ("prefill_8", 5), ("prefill_1", 1)]
    gguf = quantized_copy(source, tmp_path / "text" / "q8.gguf", GGMLQuantizationType.Q8_0)
    out = write_litertlm(gguf, tmp_path / "q8.litertlm", prefill_lengths=PREFILL, context=context).out
    floats = write_litertlm(source, tmp_path / "float.litertlm", prefill_lengths=PREFILL, context=context).out
    assert out.stat().st_size < floats.stat().st_size / 2
    model_bytes = read_litertlm(out)[1]["TFLiteModel"][1]
    model = schema.Model.GetRootAs(model_bytes, 0)
    reader = GGUFReader(gguf)
    shapes = {t.name: tuple(reversed(t.shape.tolist())) for t in reader.tensors}
    quantized = {t.name for t in reader.tensors if t.tensor_type == GGMLQuantizationType.Q8_0}
    assert quantized == {name for name, shape in shapes.items() if len(shape) == 2}
    decode = next(
        model.Subgraphs(i) for i in range(model.SubgraphsLength()) if model.Subgraphs(i).Name() == b"decode"
    )
    named = {decode.Tensors(i).Name().decode(): decode.Tensors(i) for i in range(decode.TensorsLength())}
    for name, shape in shapes.items():
        tensor = named[name]
        if name in quantized:
            assert tensor.Type() == schema.TensorType.INT8, name
            quantization = tensor.Quantization()
            assert quantization.ScaleLength() == shape[0] and quantization.QuantizedDimension() == 0, name
            assert all(quantization.ZeroPoint(i) == 0 for i in range(shape[0])), name
        else:
            assert tensor.Type() == schema.TensorType.FLOAT32, name
    vocab, width = shapes["token_embd.weight"]
    sizes = [model.Buffers(i).DataLength() for i in range(model.BuffersLength())]
    assert sizes.count(vocab * width) == (1 if "output.weight" not in shapes else 2)  # once for both uses
    tokens = [1, *np.random.default_rng(4).integers(3, 3000, 19).tolist()]

    def as_int8(name: str, w: Any) -> Any:
        return int8_rows(w) if name in quantized else w

    reference = reference_logits if arch == "llama" else gemma3_reference
    int8 = reference(reader, tokens, as_int8)
    dense = reference(reader, tokens)
    steps = dict(run_as_the_executor(model_bytes, context, tokens, chunks))
    assert sorted(steps) == list(range(sum(n for _, n in chunks), len(tokens)))
    for step, logits in steps.items():
        assert_int8_logits(logits, int8[step], step)
    # nearer the pass over the int8 weights than the pass over the GGUF's own values, over
    # every step: the int8 weights are what the model computes with
    got = np.stack(list(steps.values()))
    rms = {
        k: float(np.sqrt(np.mean((got - ref[sorted(steps)]) ** 2)))
        for k, ref in (("int8", int8), ("gguf", dense))
    }
    assert rms["int8"] < rms["gguf"], rms


def test_gemma3_stop_tokens_are_llama_cpps_end_of_generation_tokens() -> None:
    from eliza.formats.litertlm import gemma3
    from eliza.formats.sentencepiece_vocab import SpmVocabulary

    pieces = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "▁a", "</s>"]
    vocab = SpmVocabulary(
        tokens=pieces, scores=[0.0] * 8, types=[3, 3, 3, 2, 3, 3, 1, 4], bos_id=2, eos_id=1, unk_id=3,
        add_space_prefix=False,
    )  # fmt: skip
    assert gemma3.stop_ids(vocab) == [1, 5, 7]  # as llama.cpp's end-of-generation set


def write_small_gemma3(path: Path, *, drop: str = "", extra: dict[str, Any] | None = None) -> Path:
    """A one-layer Gemma 3 GGUF of 8 tokens; `drop` a key or tensor left out, `extra` keys added."""
    rng = np.random.default_rng(5)
    d, ff, hd, n_vocab = 8, 16, 4, 8
    names = {"attn_q": (2 * hd, d), "attn_k": (hd, d), "attn_v": (hd, d), "attn_output": (d, 2 * hd)}
    names |= {"ffn_gate": (ff, d), "ffn_up": (ff, d), "ffn_down": (d, ff), "attn_q_norm": (hd,)}
    names |= {"attn_k_norm": (hd,), "attn_norm": (d,), "ffn_norm": (d,), "post_attention_norm": (d,)}
    names |= {"post_ffw_norm": (d,)}
    weights = {f"blk.0.{k}.weight": rng.standard_normal(s) for k, s in names.items()}
    weights |= {"token_embd.weight": rng.standard_normal((n_vocab, d)), "output_norm.weight": np.ones(d)}
    keys: dict[str, Any] = {
        "gemma3.context_length": 16,
        "gemma3.embedding_length": d,
        "gemma3.block_count": 1,
        "gemma3.feed_forward_length": ff,
        "gemma3.attention.head_count": 2,
        "gemma3.attention.head_count_kv": 1,
        "gemma3.attention.key_length": hd,
        "gemma3.attention.value_length": hd,
        "gemma3.attention.layer_norm_rms_epsilon": 1e-6,
        "gemma3.attention.sliding_window": 4,
    } | (extra or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(str(path), arch="gemma3")
    for key, value in keys.items():
        if key == drop:
            continue
        if isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, list):
            writer.add_array(key, value)
        else:
            writer.add_uint32(key, value)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["<pad>", "<eos>", "<bos>", "<unk>", "▁a", "▁b", "a", "▁"])
    writer.add_token_scores([0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0])
    writer.add_token_types([3, 3, 3, 2, 1, 1, 1, 1])
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)
    writer.add_unk_token_id(3)
    for name, tensor in weights.items():
        if name != drop:
            writer.add_tensor(name, tensor.astype(np.float32))
    write_out(writer)
    return path


def test_gemma3_refusals_name_the_file_and_the_key(tmp_path: Path) -> None:
    cases = {
        "no epsilon": (
            {"drop": "gemma3.attention.layer_norm_rms_epsilon"},
            "gemma3.attention.layer_norm_rms_epsilon is missing, not a number",
        ),
        "softcap": (
            {"extra": {"gemma3.final_logit_softcapping": 30.0}},
            "gemma3.final_logit_softcapping 30.0",
        ),
        "per-layer pattern": (
            {"extra": {"gemma3.attention.sliding_window_pattern": [True]}},
            "gemma3.attention.sliding_window_pattern is a per-layer array",
        ),
        "27B": ({"extra": {"gemma3.block_count": 62}}, "62 layers (Gemma 3 27B)"),
        "no q norm": (
            {"drop": "blk.0.attn_q_norm.weight"},
            "tensor(s) missing for 1 layers: blk.0.attn_q_norm",
        ),
    }
    for case, (options, message) in cases.items():
        gguf = write_small_gemma3(tmp_path / f"{case.replace(' ', '-')}.gguf", **options)
        out = default_out_path(gguf)
        with pytest.raises(LitertlmError) as caught:
            write_litertlm(gguf, out)
        text = str(caught.value)
        assert text.startswith(f"{gguf}: ") and message in text and "\n" not in text, (case, text)
        assert not out.exists() and not record_path(out).exists(), case
    small = write_small_gemma3(tmp_path / "small.gguf")
    record = write_litertlm(small, default_out_path(small))
    assert record.context == 16 and record.prefill_lengths == (1, 8)


def test_sentencepiece_of_a_gemma_style_vocabulary_is_what_llama_cpp_matches() -> None:
    """Gemma's GGUF types <unk> control (SentencePiece needs one unknown piece), has
    user-defined whitespace runs (matched by llama.cpp before spaces become "▁") and a
    user-defined </s> (llama.cpp makes it control: an end-of-generation text)."""
    from sentencepiece import sentencepiece_model_pb2

    from eliza.formats.sentencepiece_vocab import SpmVocabulary, model_proto

    pieces = ["<pad>", "<eos>", "<bos>", "<unk>", "  ", "</s>", "\n", "▁a"]
    vocab = SpmVocabulary(
        tokens=pieces, scores=[0.0] * 8, types=[3, 3, 3, 3, 4, 4, 4, 1], bos_id=2, eos_id=1, unk_id=3,
        add_space_prefix=False,
    )  # fmt: skip
    model = sentencepiece_model_pb2.ModelProto.FromString(model_proto(vocab))
    assert [(p.piece, p.type) for p in model.pieces][3:7] == [("<unk>", 2), ("▁▁", 4), ("</s>", 3), ("\n", 4)]
