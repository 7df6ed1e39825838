"""The LiteRT-LM backend behind the unchanged C ABI, on the CPU, through its text-only C
API: its greedy text equals the llama.cpp path's, ids that cannot survive text are refused,
and it keeps the stream contract (cancel from another thread, reset, reset_keep, slots)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from eliza.adapters.ffi import ERR_CANCELLED, Context, ElizaError, Library, greedy_config
from tests.backends.conftest import LITERT, bench, runs_without_the_runtime

PROMPTS = (
    "Once upon a time there was",
    "The price",  # the planted chain: "€." (three byte tokens) then EOS
    "naïve café — 東京 and",
    "Москва — столица России, и",
)


def as_text_api_gives(text: bytes) -> bytes:
    """What a text-only API can hand back for llama.cpp's bytes: a byte token that is not
    part of valid UTF-8 comes back as U+FFFD (the engine's SentencePiece decoder replaces it)."""
    return text.decode("utf-8", errors="replace").encode("utf-8")


def greedy(ctx: Context, prompt: str, max_tokens: int = 32) -> tuple[list[int], bytes]:
    with ctx.open_stream(greedy_config(max_tokens)) as stream:
        stream.prefill(ctx.tokenize(prompt))
        return stream.generate()


def test_greedy_text_equals_the_llama_path(litert_ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ELIZA_LLM_BACKEND", "llama.cpp")
    reference = [greedy(litert_ctx, p) for p in PROMPTS]
    monkeypatch.setenv("ELIZA_LLM_BACKEND", LITERT)
    served = [greedy(litert_ctx, p) for p in PROMPTS]
    assert [text for _, text in served] == [text for _, text in reference]
    assert served[1][1] == "€.".encode()
    # ids: the engine's tokenizer re-encoding that text, so they are llama.cpp's own where the
    # text's encoding is canonical (the ids of the first prompt's first words are)
    assert served[0][0][:4] == reference[0][0][:4]


@pytest.mark.usefixtures("use_litert")
def test_ids_that_do_not_survive_text_are_refused_naming_the_first(litert_ctx: Context) -> None:
    ids = litert_ctx.tokenize("Once upon a time")
    with litert_ctx.open_stream(greedy_config(4)) as stream:
        with pytest.raises(ElizaError, match=r"must begin with BOS"):
            stream.prefill(ids[1:])
        with pytest.raises(ElizaError, match=r"token_ids\[2\] = 1 does not survive the engine's text input"):
            stream.prefill([ids[0], ids[1], ids[0], *ids[2:]])  # a BOS inside the prompt
        stream.prefill(ids)  # nothing was sent by the refusals: the stream is as new
        assert stream.next().status in (0, 1)


@pytest.mark.usefixtures("use_litert")
def test_cancel_from_another_thread_ends_the_stream(litert_ctx: Context) -> None:
    with litert_ctx.open_stream(greedy_config(0)) as stream:  # no token budget: only cancel ends it
        stream.prefill(litert_ctx.tokenize(PROMPTS[0]))
        outcome: list[object] = []
        steps = [0]

        def generate() -> None:
            try:
                while stream.next().status == 0:
                    steps[0] += 1
                outcome.append("final")
            except ElizaError as exc:
                outcome.append(exc.code)

        worker = threading.Thread(target=generate)
        worker.start()
        while steps[0] < 3 and worker.is_alive():
            time.sleep(0.001)
        assert stream.cancel() == 0
        worker.join(timeout=30)
        assert not worker.is_alive() and outcome in (["final"], [ERR_CANCELLED]), outcome
        with pytest.raises(ElizaError) as cancelled:
            stream.next()
        assert cancelled.value.code == ERR_CANCELLED
        assert stream.reset() == 0  # a fresh engine session: usable again
        stream.prefill(litert_ctx.tokenize(PROMPTS[2]))
        assert stream.next().status in (0, 1)


def test_reset_and_reset_keep_continue_as_the_llama_path(
    litert_ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    head, tail = litert_ctx.tokenize(PROMPTS[0]), litert_ctx.tokenize(" and then", add_special=False)

    def session() -> list[object]:
        """What each call of one stream's lifecycle answers (texts, counts)."""
        said: list[object] = []
        with litert_ctx.open_stream(greedy_config(16)) as fresh:
            fresh.prefill(head + tail)
            said.append(fresh.generate()[1])
        with litert_ctx.open_stream(greedy_config(16)) as stream:
            stream.prefill(head)
            said.append(stream.reset_keep(10**6))  # all the prompt it holds
            said.append(stream.reset_keep(len(head) - 1))  # the prompt but its last token
            stream.prefill(head[-1:] + tail)
            said.append(stream.generate()[1])  # continues as a fresh prefill of head + tail
            said.append(stream.reset_keep(0))  # nothing to keep: the full reset
            said.append(stream.reset())
            stream.prefill(head + tail)
            said.append(stream.generate()[1])
        with litert_ctx.open_stream(greedy_config(16)) as stream:  # after a decode: the engine's rewind
            stream.prefill(head)
            stream.generate()
            said.append(stream.reset_keep(len(head) - 1))
            stream.prefill(head[-1:] + tail)
            said.append(stream.generate()[1])
        return said

    monkeypatch.setenv("ELIZA_LLM_BACKEND", "llama.cpp")
    llama = [as_text_api_gives(x) if isinstance(x, bytes) else x for x in session()]
    monkeypatch.setenv("ELIZA_LLM_BACKEND", LITERT)
    served = session()
    assert served == llama
    assert served[1] == len(head) and served[2] == served[7] == len(head) - 1
    assert served[3] == served[0] == served[6] == served[8]


@pytest.mark.usefixtures("use_litert")
def test_a_slot_restores_the_stream_where_it_was(litert_ctx: Context, tmp_path: Path) -> None:
    slot = tmp_path / "slot.bin"
    with litert_ctx.open_stream(greedy_config(24)) as stream:
        stream.prefill(litert_ctx.tokenize(PROMPTS[0]))
        for _ in range(5):
            stream.next()
        stream.save_slot(slot)
        rest = stream.generate()
    with litert_ctx.open_stream(greedy_config(24)) as other:
        other.restore_slot(slot)
        assert other.generate() == rest
        corrupt = tmp_path / "corrupt.bin"
        data = bytearray(slot.read_bytes())
        data[20] ^= 0xFF
        corrupt.write_bytes(bytes(data))
        with pytest.raises(ElizaError, match="corrupt"):
            other.restore_slot(corrupt)


def test_a_litertlm_not_written_from_the_bundles_gguf_is_refused_in_one_line(
    litert_library: Path, runtime_bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eliza.app.services.bundle import tiny_vocab
    from eliza.formats.litertlm import write_litertlm
    from eliza.formats.tiny_gguf import TinyModelSpec, write_tiny_gguf

    bundle = tmp_path / "bundle"
    (bundle / "text").mkdir(parents=True)
    gguf = next((runtime_bundle / "text").glob("*.gguf"))
    shutil.copyfile(gguf, bundle / "text" / gguf.name)
    other = tmp_path / "other.gguf"
    write_tiny_gguf(other, tiny_vocab(), TinyModelSpec(seed=9))
    write_litertlm(other, bundle / "text" / "other.litertlm", prefill_lengths=(1, 8))
    monkeypatch.setenv("ELIZA_LLM_BACKEND", LITERT)
    with Library(litert_library).open_context(bundle) as ctx, pytest.raises(ElizaError) as refused:
        ctx.open_stream(greedy_config(4))
    message = str(refused.value)
    assert "was written from a GGUF with sha256" in message and "eliza litertlm" in message
    assert "\n" not in message


def test_without_the_engine_a_hard_selection_fails_and_auto_selection_falls_through(
    litert_library: Path, runtime_bundle: Path, tmp_path: Path
) -> None:
    """The same gate-ON build on a host without LiteRT-LM: the engine is not where the
    library looks (ELIZA_BACKEND_MODULE_DIR, an empty folder)."""
    forced, auto = runs_without_the_runtime(litert_library, runtime_bundle, LITERT, tmp_path)
    assert forced.returncode != 0 and "unavailable on this host" in forced.stderr, forced.stderr
    assert auto.returncode == 0, auto.stderr


def test_another_llama_gguf_written_by_the_documented_command_is_served_and_agrees(
    litert_library: Path, tmp_path: Path
) -> None:
    """Other widths, layers, heads and vocabulary size than the fixture's; written with
    `eliza litertlm`, served in processes of their own (each selects its backend once)."""
    import sys

    from eliza.app.services.bundle import tiny_vocab
    from eliza.formats.bench_jsonl import load_run
    from eliza.formats.tiny_gguf import TinyModelSpec, write_tiny_gguf

    spec = TinyModelSpec(seed=5, n_embd=96, n_layer=3, n_head=6, n_head_kv=2, n_ff=160, vocab_size=30000)
    bundle = tmp_path / "bundle"
    gguf = bundle / "text" / "other.gguf"
    write_tiny_gguf(gguf, tiny_vocab(), spec)
    written = subprocess.run(
        [sys.executable, "-m", "eliza.cli", "litertlm", str(gguf)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert written.returncode == 0 and (bundle / "text" / "other.litertlm").is_file(), written.stderr
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    runs = {}
    for backend in ("llama.cpp", LITERT):
        out = tmp_path / f"{backend}.jsonl"
        env = {**os.environ, "ELIZA_LLM_BACKEND": backend}
        done = bench(litert_library, bundle, prompts, out, max_tokens=32, env=env)
        assert done.returncode == 0, done.stderr
        runs[backend] = load_run(out)
    assert runs[LITERT].header["build"]["llm_backend"] == LITERT
    texts = [as_text_api_gives(p.text) for p in runs["llama.cpp"].prompts]
    assert [p.text for p in runs[LITERT].prompts] == texts and sum(len(t) for t in texts) > 0


def gemma3_bundle(folder: Path, spec: object | None = None) -> Path:
    """A bundle of a random-weights Gemma 3 GGUF and its .litertlm (as bundles stage it)."""
    from eliza.app.services.bundle import ensure_litertlm, tiny_vocab
    from eliza.formats.tiny_gguf import TinyGemma3Spec, write_tiny_gemma3_gguf

    write_tiny_gemma3_gguf(folder / "text" / "gemma.gguf", tiny_vocab(), spec or TinyGemma3Spec())
    ensure_litertlm(folder)
    return folder


def test_a_gemma3_bundle_is_served_as_the_llama_path_serves_it(
    litert_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prompts and generations past the sliding window (6 on the tiny model): the local
    layers' window is in the graph, the engine's mask is causal only."""
    bundle = gemma3_bundle(tmp_path / "gemma")
    with Library(litert_library).open_context(bundle) as ctx:
        monkeypatch.setenv("ELIZA_LLM_BACKEND", "llama.cpp")
        reference = [greedy(ctx, p) for p in PROMPTS]
        monkeypatch.setenv("ELIZA_LLM_BACKEND", LITERT)
        served = [greedy(ctx, p) for p in PROMPTS]
    texts = [as_text_api_gives(text) for _, text in reference]
    assert [text for _, text in served] == texts and all(len(t) > 0 for t in texts)


def test_another_gemma3_gguf_written_by_the_documented_command_is_served_and_agrees(
    litert_library: Path, tmp_path: Path
) -> None:
    """Untied, other widths, heads, window and pattern; written with `eliza litertlm`."""
    import sys

    from eliza.app.services.bundle import tiny_vocab
    from eliza.formats.bench_jsonl import load_run
    from eliza.formats.tiny_gguf import TinyGemma3Spec, write_tiny_gemma3_gguf

    spec = TinyGemma3Spec(
        seed=3, n_embd=64, n_layer=5, n_head=4, n_head_kv=2, head_dim=32, n_ff=96, sliding_window=4,
        swa_pattern=2, rope_base=500000.0, rope_base_local=20000.0, tied=False, vocab_size=30000,
        context_length=256,
    )  # fmt: skip
    bundle = tmp_path / "bundle"
    gguf = bundle / "text" / "other.gguf"
    write_tiny_gemma3_gguf(gguf, tiny_vocab(), spec)
    written = subprocess.run(
        [sys.executable, "-m", "eliza.cli", "litertlm", str(gguf)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert written.returncode == 0 and (bundle / "text" / "other.litertlm").is_file(), written.stderr
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    runs = {}
    for backend in ("llama.cpp", LITERT):
        out = tmp_path / f"{backend}.jsonl"
        env = {**os.environ, "ELIZA_LLM_BACKEND": backend}
        done = bench(litert_library, bundle, prompts, out, max_tokens=32, env=env)
        assert done.returncode == 0, done.stderr
        runs[backend] = load_run(out)
    assert runs[LITERT].header["build"]["llm_backend"] == LITERT
    texts = [as_text_api_gives(p.text) for p in runs["llama.cpp"].prompts]
    assert [p.text for p in runs[LITERT].prompts] == texts and sum(len(t) for t in texts) > 0


def test_a_gemma3_bundle_with_a_foreign_litertlm_is_refused_in_one_line(
    litert_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eliza.formats.tiny_gguf import TinyGemma3Spec

    bundle = gemma3_bundle(tmp_path / "gemma")
    other = gemma3_bundle(tmp_path / "other", TinyGemma3Spec(seed=11))
    shutil.copyfile(other / "text" / "gemma.litertlm", bundle / "text" / "gemma.litertlm")
    shutil.copyfile(other / "text" / "gemma.litertlm.json", bundle / "text" / "gemma.litertlm.json")
    monkeypatch.setenv("ELIZA_LLM_BACKEND", LITERT)
    with Library(litert_library).open_context(bundle) as ctx, pytest.raises(ElizaError) as refused:
        ctx.open_stream(greedy_config(4))
    message = str(refused.value)
    assert "was written from a GGUF with sha256" in message and "eliza litertlm" in message
    assert "\n" not in message
