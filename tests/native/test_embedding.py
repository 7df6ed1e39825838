"""The library inside a host process: thread and memory limits, ggml assertions, printing,
concurrent streams, config values from loosely typed callers, error causes. Cases that
could end the process run in a child process; every child must print nothing."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType

from eliza.adapters.ffi import (
    ERR_INVALID_ARG,
    Context,
    ElizaError,
    Library,
    greedy_config,
)
from eliza.core.layout import TEST_KIT_NAME
from tests.native.helpers import rewritten_bundle, run_child

PROMPTS = [
    "Once upon a time there was",
    "The quick brown fox",
    "naïve café — 東京 and",
    "Hello world, this is",
]


def assert_silent_success(run) -> None:  # type: ignore[no-untyped-def]
    assert run.returncode == 0, f"child ended with {run.returncode}: {run.stderr[-2000:]!r}"
    assert run.stdout == b"", run.stdout[:2000]
    assert run.stderr == b"", run.stderr[:2000]
    assert run.result is not None


def test_thread_start_failure_at_open_is_an_error(
    library_path: Path, tiny_bundle: Path, tmp_path: Path
) -> None:
    # 63 worker threads cannot get their stacks within 32 MiB more address space.
    body = """
lib = Library(LIB)
ctx = lib.open_context(BUNDLE)
def run(c):
    s = c.open_stream(greedy_config(8))
    s.prefill(c.tokenize("Once upon a time"))
    result.setdefault("tokens", []).append(s.generate()[0])
    s.close()
soft = limit_address_space(32 << 20)
result["limited"] = error_of(lambda: run(ctx))
unlimit_address_space(soft)
os.environ["ELIZA_N_THREADS"] = "2"
result["after"] = error_of(lambda: run(lib.open_context(BUNDLE)))
"""
    run = run_child(body, library_path, tiny_bundle, tmp_path, env={"ELIZA_N_THREADS": "64"})
    assert_silent_success(run)
    assert run.result is not None
    _, message = run.result["limited"]
    assert "eliza_inference_llm_stream_open" in message
    assert "decode worker threads" in message and "could start only" in message
    assert run.result["after"] is None and len(run.result["tokens"]) == 1


def test_address_space_limit_before_next_cannot_abort_the_host(
    library_path: Path, tiny_bundle: Path, tmp_path: Path
) -> None:
    # Before: each decode started its worker threads, ggml asserted when one could not
    # start, ran gdb against the host and ended it with SIGABRT. Now the threads exist
    # from _open on, and decoding under the limit just works.
    body = """
lib = Library(LIB)
ctx = lib.open_context(BUNDLE)
s = ctx.open_stream(greedy_config(8))
soft = limit_address_space(16 << 20)
def run():
    s.prefill(ctx.tokenize("Once upon a time"))
    result["tokens"] = s.generate()[0]
result["limited"] = error_of(run)
unlimit_address_space(soft)
free = ctx.open_stream(greedy_config(8))
free.prefill(ctx.tokenize("Once upon a time")); result["free"] = free.generate()[0]
"""
    run = run_child(body, library_path, tiny_bundle, tmp_path, env={"ELIZA_N_THREADS": "4"})
    assert_silent_success(run)
    assert run.result is not None
    assert run.result["limited"] is None
    assert run.result["tokens"] == run.result["free"] and len(run.result["tokens"]) == 8


def test_a_ggml_assertion_becomes_an_error_status(
    library_path: Path, tiny_bundle: Path, tmp_path: Path
) -> None:
    # A model whose value heads are narrower than its key heads loads, but building its
    # graph at context creation fails GGML_ASSERT(n_embd_head == n_embd_head_k). Before,
    # that printed a backtrace (gdb attached to the host) and ended the process.
    bad = rewritten_bundle(
        tiny_bundle,
        tmp_path / "narrow-v",
        extra_kv={
            "llama.attention.key_length": (16, GGUFValueType.UINT32),
            "llama.attention.value_length": (8, GGUFValueType.UINT32),
        },
        tensors=lambda name, a: a[:16].copy() if name.endswith("attn_v.weight") else a,
    )
    body = """
lib = Library(LIB)
ctx = lib.open_context(BUNDLE)
result["open"] = error_of(lambda: ctx.open_stream(greedy_config(4)))
good = lib.open_context(Path(ARGS))
s = good.open_stream(greedy_config(4)); s.prefill(good.tokenize("hello")); result["tokens"] = s.generate()[0]
"""
    run = run_child(body, library_path, bad, tmp_path, args=str(tiny_bundle))
    assert_silent_success(run)
    assert run.result is not None
    _, message = run.result["open"]
    assert message.startswith("eliza_inference_llm_stream_open: ")
    assert "GGML_ASSERT(n_embd_head == hparams.n_embd_head_k()) failed" in message
    assert len(run.result["tokens"]) == 4  # the host and the library carry on


def test_non_finite_config_values_are_refused_at_open(ctx: Context) -> None:
    cases = {
        "temperature": dict(temperature=float("nan")),
        "top_p": dict(temperature=0.8, top_p=float("inf")),
        "repeat_penalty": dict(repeat_penalty=float("-inf")),
        "draft_min": dict(draft_min=-1),
        "draft_max": dict(draft_min=4, draft_max=2),
    }
    for field, values in cases.items():
        with pytest.raises(ElizaError) as err:
            ctx.open_stream(greedy_config(4, **values))
        assert err.value.code == ERR_INVALID_ARG
        assert f"cfg->{field}" in err.value.message, err.value.message
        assert err.value.message.startswith("eliza_inference_llm_stream_open: ")


def test_nan_temperature_no_longer_samples_the_last_vocabulary_id(ctx: Context) -> None:
    # Before: NaN passed the "<= 0 means greedy" test, and every step returned id 31999.
    with pytest.raises(ElizaError) as err:
        ctx.open_stream(greedy_config(4, temperature=float("nan")))
    assert "cfg->temperature is NaN" in err.value.message


def test_concurrent_streams_on_separate_contexts_match_their_serial_runs(
    lib: Library, tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ELIZA_N_THREADS", "2")  # pools of 2 and a budget of 2 for 4 streams
    contexts = [lib.open_context(tiny_bundle) for _ in PROMPTS]
    try:
        serial = []
        for ctx, prompt in zip(contexts, PROMPTS, strict=True):
            with ctx.open_stream(greedy_config(12)) as s:
                s.prefill(ctx.tokenize(prompt))
                serial.append(s.generate())
        results: list[object] = [None] * len(PROMPTS)

        def worker(i: int) -> None:
            ctx = contexts[i]
            with ctx.open_stream(greedy_config(12)) as s:
                s.prefill(ctx.tokenize(PROMPTS[i]))
                results[i] = s.generate()

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert results == serial
    finally:
        for ctx in contexts:
            ctx.close()


def test_cancel_reaches_a_stream_waiting_for_threads(
    lib: Library, tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three streams share a budget of two threads; cancelling each ends its generation
    # promptly whether it is decoding or waiting for its share of threads.
    monkeypatch.setenv("ELIZA_N_THREADS", "2")
    with lib.open_context(tiny_bundle) as ctx:
        streams = [ctx.open_stream(greedy_config(0)) for _ in range(3)]
        errors: list[int] = []

        def run(s) -> None:  # type: ignore[no-untyped-def]
            try:
                s.prefill(ctx.tokenize("Once upon a time"))
                for _ in range(100_000):
                    s.next()
            except ElizaError as e:
                errors.append(e.code)

        threads = [threading.Thread(target=run, args=(s,)) for s in streams]
        for t in threads:
            t.start()
        for s in streams:
            assert s.cancel() == 0
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert errors == [-7, -7, -7]
        for s in streams:
            s.close()


def test_error_messages_carry_llama_cpp_causes(lib: Library, tiny_bundle: Path, tmp_path: Path) -> None:
    # Before: a truncated GGUF reported only llama.cpp's last line, "failed to load model".
    model = next((tiny_bundle / "text").glob("*.gguf"))
    truncated = tmp_path / "truncated"
    (truncated / "text").mkdir(parents=True)
    (truncated / "text" / "m.gguf").write_bytes(model.read_bytes()[: model.stat().st_size // 3])
    with pytest.raises(ElizaError) as err:
        lib.open_context(truncated)
    message = err.value.message
    assert message.startswith("eliza_inference_create: cannot load text model")
    causes = message.split(": ", 2)[-1].split("; ")
    assert len(causes) >= 2, message
    assert "failed to load model" in causes[-1]
    assert len(message) < 8 * 420 + 400  # bounded


def test_a_nul_byte_token_ends_the_step_text(lib: Library, tiny_bundle: Path, tmp_path: Path) -> None:
    """ABI 9 limitation (header, _next): text_out has no length, so the byte token <0x00>
    shows as an empty text while tokens_out reports it; detokenize has the byte."""
    tokens = (
        GGUFReader(next((tiny_bundle / "text").glob("*.gguf"))).fields["tokenizer.ggml.tokens"].contents()
    )
    nul = [tokens.index("<0x00>")]

    def plant(name: str, a: np.ndarray) -> np.ndarray:
        # "▁price" owns the first reserved dimension (eliza/formats/tiny_gguf.py); let the <0x00>
        # row read it twice as strongly as the planted <0xE2>.
        if name == "output.weight":
            a = a.copy()
            a[nul[0], :] = 0.0
            a[nul[0], 64 - 5] = 24.0
        return a

    bundle = rewritten_bundle(tiny_bundle, tmp_path / "nul", tensors=plant)
    with lib.open_context(bundle) as ctx, ctx.open_stream(greedy_config(3)) as stream:
        stream.prefill(ctx.tokenize("The price"))
        step = stream.next()
        assert step.tokens == nul
        assert step.text == b""  # the NUL byte terminates the text
        assert ctx.detokenize(step.tokens) == b"\x00"


def test_backend_errors_are_prefixed_and_configs_checked_first(
    library_path: Path, tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: an alternate backend's message reached the caller without the entry point's
    # name (and a failure without a message left *out_error NULL); configs were checked
    # only on the llama.cpp path.
    from tests.selector.kit import TestKit

    monkeypatch.delenv("ELIZA_LLM_BACKEND", raising=False)
    kit = TestKit(library_path.with_name(TEST_KIT_NAME))
    kit.clear()
    try:
        kit.register_fake("fake-prefix", rank=5)
        with kit.open_context(tiny_bundle) as ctx:
            with pytest.raises(ElizaError) as err:
                ctx.open_stream(greedy_config(4, temperature=float("nan")))
            assert "cfg->temperature is NaN" in err.value.message
            with ctx.open_stream() as stream:
                stream.prefill([1, 2, 3])
                with pytest.raises(ElizaError) as err:
                    stream.next(text_cap=4)
                assert err.value.message == (
                    "eliza_inference_llm_stream_next: backend 'fake-prefix': fake session: buffers too small"
                )
                with pytest.raises(ElizaError) as err:
                    stream.save_slot(Path("/nonexistent/slot.bin"))
                assert err.value.message == (
                    "eliza_inference_llm_stream_save_slot: backend 'fake-prefix': "
                    "this backend does not support slot files"
                )
    finally:
        kit.clear()


def test_reference_runner_takes_any_bundle_path(
    library_path: Path, tiny_bundle: Path, tmp_path: Path
) -> None:
    # Before: it listed the bundle through a shell command built from the path, so a quote
    # in the path broke it (and anything after it ran as shell).
    import shutil
    import subprocess

    odd = tmp_path / "it's a bundle; touch pwned"
    shutil.copytree(tiny_bundle, odd)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Once upon a time\n")
    out = tmp_path / "ref.jsonl"
    proc = subprocess.run(
        [str(library_path.parent / "reference_runner"), "--bundle", str(odd), "--prompts", str(prompts),
         "--out", str(out), "--max-tokens", "4"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert '"type": "prompt"' in out.read_text()
    assert not (tmp_path / "pwned").exists()
