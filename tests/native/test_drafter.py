"""Speculative decoding through the C ABI: with a draft model (the bundle's draft fixture,
or the text model drafting for itself) greedy output is byte-identical to plain greedy,
the per-step stats add up, the caller's buffers bound a step, the stream operations stay
coherent, and every bad drafter input is a clear error from _open."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eliza.adapters.ffi import (
    ERR_CANCELLED,
    ERR_INVALID_ARG,
    ERR_NOT_IMPLEMENTED,
    Context,
    ElizaError,
    Library,
    Step,
    Stream,
    StreamConfig,
    greedy_config,
)
from eliza.formats.tiny_gguf import PLANTED_CHAIN, draft_model
from tests.native.helpers import model_file

PROMPTS = ["Hello world, this is", "Once upon a time there was", "naïve café — 東京 and", "The price"]


@pytest.fixture(scope="module")
def draft_path(tiny_bundle: Path) -> Path:
    path = draft_model(tiny_bundle)
    assert path is not None and path.is_file(), "the tiny bundle has no draft model"
    return path


@pytest.fixture(scope="module")
def self_path(tiny_bundle: Path) -> Path:
    return model_file(tiny_bundle)


@pytest.fixture(scope="module")
def near_path(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The text model with its blocks scaled by 0.97: it agrees with the text model on some
    tokens and not others, so drafts are accepted in part (0 < accepted < drafted), the
    case that removes some but not all drafted positions from both caches."""
    from tests.native.helpers import scaled_blocks_bundle

    return model_file(scaled_blocks_bundle(tiny_bundle, tmp_path_factory.mktemp("near") / "b", 0.97))


def drafted_config(max_tokens: int, drafter: Path, **overrides: object) -> StreamConfig:
    return greedy_config(max_tokens, mtp_drafter_path=str(drafter).encode(), **overrides)


def run(
    ctx: Context, cfg: StreamConfig, prompt: str, tokens_cap: int = 16
) -> tuple[list[int], bytes, list[Step]]:
    with ctx.open_stream(cfg) as stream:
        stream.prefill(ctx.tokenize(prompt))
        steps = list(steps_of(stream, tokens_cap))
    return [t for s in steps for t in s.tokens], b"".join(s.text for s in steps), steps


def steps_of(stream: Stream, tokens_cap: int = 16) -> list[Step]:
    out = []
    while True:
        step = stream.next(tokens_cap=tokens_cap)
        out.append(step)
        if step.status == 1:
            return out


def check_stats(steps: list[Step], tokens_cap: int = 16) -> tuple[int, int]:
    for s in steps:
        assert 0 <= s.accepted <= s.drafted, s
        assert len(s.tokens) <= tokens_cap
        if s.tokens:
            # The text model's own token, then the accepted draft prefix.
            assert len(s.tokens) == 1 + s.accepted, s
    return sum(s.drafted for s in steps), sum(s.accepted for s in steps)


@pytest.mark.parametrize("draft_max", [0, 1, 4, 8])
def test_draft_fixture_output_is_byte_identical_to_plain_greedy(
    ctx: Context, draft_path: Path, draft_max: int
) -> None:
    drafted = accepted = 0
    for prompt in PROMPTS:
        want_tokens, want_text, _ = run(ctx, greedy_config(48), prompt)
        tokens, text, steps = run(ctx, drafted_config(48, draft_path, draft_max=draft_max), prompt)
        assert (tokens, text) == (want_tokens, want_text), prompt
        d, a = check_stats(steps)
        drafted, accepted = drafted + d, accepted + a
    assert drafted > 0
    # The draft shares the planted transitions, so "The price" is accepted at least there.
    assert accepted > 0


@pytest.mark.parametrize("draft_max", [2, 5])
def test_partly_accepted_drafts_are_byte_identical(ctx: Context, near_path: Path, draft_max: int) -> None:
    partial = 0
    for prompt in PROMPTS:
        want = run(ctx, greedy_config(48), prompt)[:2]
        tokens, text, steps = run(ctx, drafted_config(48, near_path, draft_max=draft_max), prompt)
        assert (tokens, text) == want, prompt
        check_stats(steps)
        partial += sum(1 for s in steps if 0 < s.accepted < s.drafted)
    assert partial > 0


def test_text_model_as_its_own_drafter_accepts_everything(ctx: Context, self_path: Path) -> None:
    for prompt in PROMPTS:
        want = run(ctx, greedy_config(48), prompt)[:2]
        tokens, text, steps = run(ctx, drafted_config(48, self_path, draft_max=6), prompt)
        assert (tokens, text) == want, prompt
        drafted, accepted = check_stats(steps)
        assert drafted > 0 and accepted == drafted, (prompt, drafted, accepted)
        # Every step but the last (EOS or max_tokens bounds its draft) emits several tokens.
        assert any(len(s.tokens) > 1 for s in steps)


def test_planted_chain_comes_out_in_one_step_with_utf8_intact(ctx: Context, self_path: Path) -> None:
    # "▁price" -> <0xE2> <0x82> <0xAC> "." </s>: plain greedy needs three steps for the euro
    # sign (two hold bytes back); with the text model drafting, one step carries it whole.
    want = run(ctx, greedy_config(32), "The price")[:2]
    tokens, text, steps = run(ctx, drafted_config(32, self_path, draft_max=8), "The price")
    assert (tokens, text) == want and text == "€.".encode()
    assert steps[0].text == "€.".encode() and len(steps[0].tokens) == len(PLANTED_CHAIN) - 2
    assert steps[-1].status == 1


@pytest.mark.parametrize("tokens_cap", [1, 2, 3])
def test_tokens_cap_bounds_a_step(ctx: Context, self_path: Path, tokens_cap: int) -> None:
    want = run(ctx, greedy_config(40), PROMPTS[1])[:2]
    tokens, text, steps = run(ctx, drafted_config(40, self_path, draft_max=8), PROMPTS[1], tokens_cap)
    assert (tokens, text) == want
    check_stats(steps, tokens_cap)
    assert max(s.drafted for s in steps) == tokens_cap - 1


def test_max_tokens_bounds_the_draft(ctx: Context, self_path: Path) -> None:
    for max_tokens in (1, 2, 5, 7):
        want = run(ctx, greedy_config(max_tokens), PROMPTS[0])[:2]
        tokens, text, _ = run(ctx, drafted_config(max_tokens, self_path, draft_max=4), PROMPTS[0])
        assert (tokens, text) == want and len(tokens) == max_tokens


def test_draft_min_skips_short_drafts(ctx: Context, self_path: Path, draft_path: Path) -> None:
    # tokens_cap 3 leaves room for 2 draft tokens, below draft_min 3: no step drafts.
    want = run(ctx, greedy_config(24), PROMPTS[2])[:2]
    tokens, text, steps = run(ctx, drafted_config(24, self_path, draft_min=3, draft_max=5), PROMPTS[2], 3)
    assert (tokens, text) == want and all(s.drafted == 0 for s in steps)
    tokens, text, steps = run(ctx, drafted_config(24, draft_path, draft_min=3, draft_max=5), PROMPTS[2])
    assert (tokens, text) == want and all(s.drafted in (0, 3, 4, 5) for s in steps)


def test_repeat_penalty_with_a_drafter_is_identical(
    ctx: Context, draft_path: Path, self_path: Path, near_path: Path
) -> None:
    for prompt in PROMPTS[:2]:
        want = run(ctx, greedy_config(40, repeat_penalty=1.3), prompt)[:2]
        for drafter in (draft_path, self_path, near_path):
            got = run(ctx, drafted_config(40, drafter, repeat_penalty=1.3, draft_max=5), prompt)[:2]
            assert got == want, (prompt, drafter.name)


def test_without_a_drafter_stats_are_zero(ctx: Context) -> None:
    steps = run(ctx, greedy_config(8), PROMPTS[0])[2]
    assert all(s.drafted == 0 and s.accepted == 0 for s in steps)


def test_cancel_reset_and_reset_keep(ctx: Context, near_path: Path) -> None:
    cfg = drafted_config(24, near_path, draft_max=4)
    prompt = ctx.tokenize(PROMPTS[1])
    want = run(ctx, greedy_config(24), PROMPTS[1])[:2]
    with ctx.open_stream(cfg) as stream:
        stream.prefill(prompt)
        stream.next()
        assert stream.cancel() == 0
        with pytest.raises(ElizaError) as err:
            stream.next()
        assert err.value.code == ERR_CANCELLED
        assert stream.reset() == 0
        stream.prefill(prompt)
        assert stream.generate() == want
        # Keep the prompt, drop the generated tokens from both caches, and generate again.
        assert stream.reset_keep(len(prompt)) == len(prompt)
        stream.prefill(ctx.tokenize(" again", add_special=False))
        got = stream.generate()
    with ctx.open_stream(greedy_config(24)) as plain:
        plain.prefill(prompt + ctx.tokenize(" again", add_special=False))
        assert got == plain.generate()


def test_save_and_restore_with_a_drafter(ctx: Context, near_path: Path, tmp_path: Path) -> None:
    draft_path = near_path
    slot = tmp_path / "slot.bin"
    with ctx.open_stream(drafted_config(30, draft_path, draft_max=4)) as stream:
        stream.prefill(ctx.tokenize(PROMPTS[0]))
        head = sum(len(stream.next().tokens) for _ in range(3))
        stream.save_slot(slot)
        tail = stream.generate()
    assert head > 3  # the drafted steps returned several tokens
    # The slot holds the text model's state only: a drafter stream and a plain stream both
    # continue from it exactly as the saving stream did.
    for cfg in (drafted_config(30, draft_path, draft_max=4), greedy_config(30)):
        with ctx.open_stream(cfg) as stream:
            stream.prefill(ctx.tokenize("something else entirely"))
            stream.next()
            stream.restore_slot(slot)
            assert stream.generate() == tail
    with ctx.open_stream(greedy_config(30)) as plain:
        plain.prefill(ctx.tokenize(PROMPTS[0]))
        for _ in range(head):
            plain.next()
        plain.save_slot(slot)
    with ctx.open_stream(drafted_config(30, draft_path, draft_max=4)) as stream:
        stream.restore_slot(slot)
        assert stream.generate() == tail


# --- bad drafter input ----------------------------------------------------------------


def open_error(ctx: Context, cfg: StreamConfig) -> ElizaError:
    with pytest.raises(ElizaError) as err:
        ctx.open_stream(cfg).close()
    return err.value


@pytest.fixture(scope="module")
def other_vocab_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Draft models of another vocabulary: fewer tokens, and the same count with one
    token's text changed (patched in place: a same-length text keeps the file's layout)."""
    from eliza.app.services.bundle import tiny_vocab
    from eliza.formats.tiny_gguf import TinyModelSpec, write_tiny_gguf

    out = tmp_path_factory.mktemp("vocab")
    smaller = out / "smaller.gguf"
    write_tiny_gguf(smaller, tiny_vocab(), TinyModelSpec(seed=3, n_layer=1, vocab_size=31000))
    renamed = out / "renamed.gguf"
    write_tiny_gguf(renamed, tiny_vocab(), TinyModelSpec(seed=3, n_layer=1))
    data = bytearray(renamed.read_bytes())
    old, new = "▁price".encode(), "▁pr#ce".encode()
    pos = data.find(len(old).to_bytes(8, "little") + old)
    assert pos > 0 and len(new) == len(old)
    data[pos + 8 : pos + 8 + len(old)] = new
    renamed.write_bytes(bytes(data))
    return {"smaller": smaller, "renamed": renamed}


def test_bad_drafter_input_is_a_clear_error(
    ctx: Context, tiny_bundle: Path, draft_path: Path, tmp_path: Path, other_vocab_models: dict[str, Path]
) -> None:
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(draft_path.read_bytes()[: draft_path.stat().st_size // 2])
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("not a model\n")
    vocab = "cannot draft for this text model"
    cases: list[tuple[StreamConfig, int, list[str]]] = [
        (drafted_config(8, tmp_path / "missing.gguf"), ERR_INVALID_ARG,
         ["mtp_drafter_path", "missing.gguf", "does not exist"]),
        (drafted_config(8, tmp_path), ERR_INVALID_ARG, ["mtp_drafter_path", "not a regular file"]),
        (drafted_config(8, truncated), ERR_INVALID_ARG, ["mtp_drafter_path", "cannot load the draft model"]),
        (drafted_config(8, not_gguf), ERR_INVALID_ARG, ["mtp_drafter_path", "cannot load the draft model"]),
        (drafted_config(8, other_vocab_models["smaller"]), ERR_INVALID_ARG, [vocab, "31000 tokens"]),
        (drafted_config(8, other_vocab_models["renamed"]), ERR_INVALID_ARG, [vocab, "▁pr#ce", "▁price"]),
        (drafted_config(8, draft_path, draft_min=5, draft_max=4), ERR_INVALID_ARG,
         ["draft_min 5", "draft_max 4"]),
        (drafted_config(8, draft_path, draft_min=17), ERR_INVALID_ARG, ["draft_min 17", "default"]),
        (drafted_config(8, draft_path, draft_min=-1), ERR_INVALID_ARG, ["draft_min", "-1"]),
        (drafted_config(8, draft_path, draft_max=-3), ERR_INVALID_ARG, ["draft_max", "-3"]),
        (drafted_config(8, draft_path, temperature=0.8), ERR_NOT_IMPLEMENTED,
         ["temperature", "not implemented", "greedy"]),
    ]  # fmt: skip
    for cfg, code, words in cases:
        err = open_error(ctx, cfg)
        assert err.code == code, (words, err.message)
        assert err.message.startswith("eliza_inference_llm_stream_open: "), err.message
        for word in words:
            assert word in err.message, (word, err.message)
    # The context is unharmed and an empty path means no drafter.
    steps = run(ctx, greedy_config(6, mtp_drafter_path=b""), PROMPTS[0])[2]
    assert all(s.drafted == 0 for s in steps)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def test_failed_opens_leak_nothing(
    lib: Library, tiny_bundle: Path, draft_path: Path, other_vocab_models: dict[str, Path]
) -> None:
    with lib.open_context(tiny_bundle) as ctx:
        for _ in range(3):  # warm up llama.cpp's one-time allocations
            open_error(ctx, drafted_config(8, other_vocab_models["smaller"]))
            ctx.open_stream(drafted_config(8, draft_path)).close()
        fds, rss = _fds(), _rss_kb()
        for _ in range(25):
            open_error(ctx, drafted_config(8, other_vocab_models["smaller"]))
            open_error(ctx, drafted_config(8, draft_path, temperature=0.5))
            ctx.open_stream(drafted_config(8, draft_path)).close()
        assert _fds() == fds
        # Each load maps a draft model of over 8 MB; 25 leaked ones would add 200 MB.
        assert _rss_kb() - rss < 64 * 1024
