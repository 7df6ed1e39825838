"""The streaming LLM surface driven through ctypes on the tiny bundle."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from eliza.adapters.ffi import (
    ERR_CANCELLED,
    Context,
    ElizaError,
    Library,
    expected_abi_version,
    greedy_config,
)
from eliza.formats.tiny_gguf import PLANTED_CHAIN

PROMPTS = ["Hello world, this is", "Once upon a time there was", "naïve café — 東京 and", "The price"]


def generate(ctx: Context, prompt: str, max_tokens: int = 24) -> tuple[list[int], bytes]:
    with ctx.open_stream(greedy_config(max_tokens)) as stream:
        stream.prefill(ctx.tokenize(prompt))
        return stream.generate()


def test_abi_version_and_support_flags(lib: Library) -> None:
    assert lib.lib.eliza_inference_abi_version() == expected_abi_version().encode()
    assert lib.lib.eliza_inference_tokenize_supported() == 1
    assert lib.lib.eliza_inference_llm_stream_supported() == 1


def test_greedy_is_identical_across_two_streams(ctx: Context) -> None:
    for prompt in PROMPTS:
        first = generate(ctx, prompt)
        second = generate(ctx, prompt)
        assert first == second
        assert first[0], f"no tokens generated for {prompt!r}"


def test_greedy_is_identical_across_two_processes(
    library_path: Path, tiny_bundle: Path, ctx: Context
) -> None:
    script = (
        "import json, sys\n"
        "from eliza.adapters.ffi import Library, greedy_config\n"
        "lib = Library(__import__('pathlib').Path(sys.argv[1]))\n"
        "out = {}\n"
        "with lib.open_context(sys.argv[2]) as ctx:\n"
        "    for p in json.loads(sys.argv[3]):\n"
        "        with ctx.open_stream(greedy_config(24)) as s:\n"
        "            s.prefill(ctx.tokenize(p)); toks, text = s.generate()\n"
        "        out[p] = [toks, text.hex()]\n"
        "print(json.dumps(out))\n"
    )
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", script, str(library_path), str(tiny_bundle), json.dumps(PROMPTS)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    here = {p: [toks, text.hex()] for p in PROMPTS for toks, text in [generate(ctx, p)]}
    assert runs[0] == here


def test_context_changes_the_continuation(ctx: Context) -> None:
    # The same last token after different prefixes must lead elsewhere, or the KV-cache
    # tests below could pass with a broken cache.
    outputs = {
        generate(ctx, prefix + " the")[0][:8].__repr__() for prefix in ("Yesterday", "Under", "Quickly")
    }
    assert len(outputs) == 3


def test_text_concatenation_equals_detokenized_tokens(ctx: Context) -> None:
    bos = ctx.tokenize("", add_special=True)
    assert len(bos) == 1
    for prompt in PROMPTS:
        tokens, text = generate(ctx, prompt, 40)
        # A leading BOS with remove_special keeps the first piece's leading space, as in a stream.
        assert ctx.detokenize(bos + tokens, remove_special=True) == text


def test_utf8_is_never_split_across_steps(ctx: Context) -> None:
    with ctx.open_stream(greedy_config(16)) as stream:
        stream.prefill(ctx.tokenize("The price"))
        steps = list(stream.steps())
    texts = [s.text for s in steps]
    for text in texts:
        text.decode("utf-8")  # strict: raises on a split character
    # The planted chain emits "€" as its three byte tokens, one a step: each token is one
    # byte of the character, which a step's text cannot hold on its own.
    euro = "€".encode()
    assert [len(s.tokens) for s in steps[:3]] == [1, 1, 1]
    assert [ctx.detokenize(s.tokens) for s in steps[:3]] == [euro[i : i + 1] for i in range(3)]
    # The three byte tokens of "€" arrive in three steps but the text only with the third.
    assert texts[:4] == [b"", b"", euro, b"."]
    for prompt in PROMPTS[:3]:
        with ctx.open_stream(greedy_config(60)) as stream:
            stream.prefill(ctx.tokenize(prompt))
            for step in stream.steps():
                step.text.decode("utf-8")


def test_next_returns_final_at_max_tokens(ctx: Context) -> None:
    with ctx.open_stream(greedy_config(5)) as stream:
        stream.prefill(ctx.tokenize(PROMPTS[0]))
        steps = list(stream.steps())
        assert [s.status for s in steps] == [0, 0, 0, 0, 1]
        assert all(len(s.tokens) == 1 for s in steps)
        assert all(s.drafted == 0 and s.accepted == 0 for s in steps)
        again = stream.next()
        assert again.status == 1 and again.tokens == []


def planted_chain_ids(bundle: Path) -> list[int]:
    """The vocabulary ids of the planted chain, read from the tiny model's GGUF."""
    from gguf import GGUFReader

    (model,) = (bundle / "text").glob("*.gguf")
    tokens = [str(t) for t in GGUFReader(str(model)).fields["tokenizer.ggml.tokens"].contents()]
    return [tokens.index(t) for t in PLANTED_CHAIN]


def test_next_returns_final_at_eos(ctx: Context, tiny_bundle: Path) -> None:
    price, *emitted, eos = planted_chain_ids(tiny_bundle)
    prompt = ctx.tokenize("The price")
    assert prompt[-1] == price  # the prompt ends where the chain starts
    with ctx.open_stream(greedy_config(100)) as stream:
        stream.prefill(prompt)
        steps = list(stream.steps())
    assert steps[-1].status == 1 and steps[-1].tokens == []  # EOS is not emitted as a token
    assert all(s.status == 0 for s in steps[:-1])
    # bytes of €, ".", then EOS: exactly the chain's tokens, one a step
    assert [s.tokens for s in steps[:-1]] == [[t] for t in emitted]
    assert ctx.detokenize([eos], unparse_special=True) == b"</s>"


def test_cancel_from_another_thread(ctx: Context) -> None:
    expected = generate(ctx, PROMPTS[1], 12)
    with ctx.open_stream(greedy_config(0)) as stream:
        stream.prefill(ctx.tokenize(PROMPTS[1]))
        started = threading.Event()
        cancelled = threading.Event()

        def canceller() -> None:
            started.wait(10)
            assert stream.cancel() == 0
            cancelled.set()

        worker = threading.Thread(target=canceller)
        worker.start()
        steps_after_cancel = 0
        with pytest.raises(ElizaError) as err:
            for i in range(10_000):
                if i == 3:
                    started.set()
                if cancelled.is_set():
                    steps_after_cancel += 1
                stream.next()
        worker.join()
        assert err.value.code == ERR_CANCELLED
        assert steps_after_cancel <= 1
        with pytest.raises(ElizaError) as again:
            stream.next()
        assert again.value.code == ERR_CANCELLED
        # Reset clears the cancel and the stream is reusable.
        assert stream.reset() == 0
        stream.prefill(ctx.tokenize(PROMPTS[1]))
        tokens = [t for _ in range(12) for t in stream.next().tokens]
    assert tokens == expected[0]


def test_cancel_when_idle_returns_ok(ctx: Context) -> None:
    with ctx.open_stream(greedy_config(4)) as stream:
        assert stream.cancel() == 0
        with pytest.raises(ElizaError) as err:
            stream.prefill(ctx.tokenize("x"))
        assert err.value.code == ERR_CANCELLED


def test_reset_keep_then_same_suffix_equals_fresh_run(ctx: Context) -> None:
    prefix = ctx.tokenize("Once upon a time there was a")
    suffix = ctx.tokenize(" small village by the sea", add_special=False)
    with ctx.open_stream(greedy_config(20)) as fresh:
        fresh.prefill(prefix + suffix)
        want = fresh.generate()
    with ctx.open_stream(greedy_config(20)) as stream:
        stream.prefill(prefix)
        stream.generate()
        stream.prefill(ctx.tokenize(" and more", add_special=False))
        assert stream.reset_keep(len(prefix)) == len(prefix)
        stream.prefill(suffix)
        assert stream.generate() == want


def test_reset_keep_clamps_and_falls_back(ctx: Context) -> None:
    prompt = ctx.tokenize(PROMPTS[0])
    with ctx.open_stream(greedy_config(4)) as stream:
        stream.prefill(prompt)
        assert stream.reset_keep(10_000) == len(prompt)
        assert stream.reset_keep(-3) == 0
        stream.prefill(prompt)
        assert stream.reset_keep(0) == 0


def test_save_then_restore_into_new_stream_continues_identically(ctx: Context, tmp_path: Path) -> None:
    slot = tmp_path / "slot.bin"
    with ctx.open_stream(greedy_config(30)) as stream:
        stream.prefill(ctx.tokenize("naïve café — 東京 and"))
        head = [stream.next() for _ in range(7)]
        stream.save_slot(slot)
        tail = list(stream.steps())
    with ctx.open_stream(greedy_config(30)) as restored:
        restored.restore_slot(slot)
        assert list(restored.steps()) == tail
    assert head and tail and not list(tmp_path.glob("*.tmp"))


def test_restore_works_mid_character(ctx: Context, tmp_path: Path) -> None:
    slot = tmp_path / "mid.bin"
    with ctx.open_stream(greedy_config(30)) as stream:
        stream.prefill(ctx.tokenize("The price"))
        assert stream.next().text == b""  # first byte of € held back
        stream.save_slot(slot)
        rest = list(stream.steps())
    with ctx.open_stream(greedy_config(30)) as restored:
        restored.restore_slot(slot)
        assert list(restored.steps()) == rest
    assert b"".join(s.text for s in rest) == "€.".encode()


def test_restore_continues_identically_with_a_repeat_penalty(ctx: Context, tmp_path: Path) -> None:
    slot = tmp_path / "penalty.bin"
    cfg = greedy_config(40, repeat_penalty=1.5)
    with ctx.open_stream(cfg) as stream:
        stream.prefill(ctx.tokenize("Once upon a time there was"))
        for _ in range(10):
            stream.next()
        stream.save_slot(slot)
        tail = list(stream.steps())
    with ctx.open_stream(greedy_config(40, repeat_penalty=1.5)) as restored:
        restored.restore_slot(slot)
        assert list(restored.steps()) == tail
