"""A stream that fills its context (docs/native.md, "Streaming"): the step that fills it is
the final one (status 1) and still emits its token; `_next` after it returns 1 with no
tokens; a `_prefill` that no longer fits is ELIZA_ERR_INVALID_ARG, naming the context size
and ELIZA_N_CTX, and changes nothing. The context is made small with ELIZA_N_CTX, which
each create reads ("Context size and threads")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from eliza.adapters.ffi import ERR_INVALID_ARG, Context, ElizaError, Library, greedy_config

# A multiple of llama.cpp's padding (256), so the size is not rounded up.
N_CTX = 256
PROMPT = "Once upon a time there was"  # greedy, it meets no EOS before 512 tokens are held


@pytest.fixture()
def small_ctx(lib: Library, tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Context]:
    monkeypatch.setenv("ELIZA_N_CTX", str(N_CTX))
    with lib.open_context(tiny_bundle) as context:
        yield context


def context_size(ctx: Context) -> int:
    """The size a stream of ctx holds, as the refusal of a prefill longer than it says."""
    with ctx.open_stream() as stream, pytest.raises(ElizaError) as err:
        stream.prefill([100] * (2 * N_CTX + 1))
    found = re.search(r"exceeds the context size (\d+)", err.value.message)
    assert found, err.value.message
    return int(found.group(1))


def test_eliza_n_ctx_sets_the_context_size(small_ctx: Context) -> None:
    assert context_size(small_ctx) == N_CTX


@pytest.mark.parametrize("max_tokens", [0, 10_000], ids=["until-eos-or-full", "more-than-fits"])
def test_a_stream_ends_at_a_full_context(small_ctx: Context, max_tokens: int) -> None:
    prompt = small_ctx.tokenize(PROMPT)
    bos = small_ctx.tokenize("", add_special=True)
    room = N_CTX - len(prompt)  # tokens decoded after the prompt until the context is full
    with small_ctx.open_stream(greedy_config(max_tokens)) as stream:
        stream.prefill(prompt)
        steps = list(stream.steps())
        # every step emits one token, the final one (the token that no longer fits) included
        assert [s.status for s in steps] == [0] * room + [1]
        assert [len(s.tokens) for s in steps] == [1] * (room + 1)
        tokens = [t for s in steps for t in s.tokens]
        assert b"".join(s.text for s in steps) == small_ctx.detokenize(bos + tokens, remove_special=True)
        after = stream.next()
        assert (after.status, after.tokens, after.text) == (1, [], b"")
        with pytest.raises(ElizaError) as err:
            stream.prefill(small_ctx.tokenize(" and more", add_special=False))
        assert err.value.code == ERR_INVALID_ARG
        message = err.value.message
        assert f"exceeds the context size {N_CTX}" in message and "ELIZA_N_CTX" in message, message
        assert stream.next() == after  # the refused prefill changed nothing
        # Keeping the prompt makes room again: the stream goes on as a fresh one would.
        assert stream.reset_keep(len(prompt)) == len(prompt)
        stream.prefill(tokens[:3])
        resumed = stream.next()
    with small_ctx.open_stream(greedy_config(max_tokens)) as fresh:
        fresh.prefill(prompt + tokens[:3])
        assert resumed == fresh.next()
