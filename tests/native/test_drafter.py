"""Speculative decoding through the C ABI: with a draft model (the bundle's draft fixture,
or the text model drafting for itself) greedy output is byte-identical to plain greedy,
the per-step stats add up, the caller's buffers bound a step, the stream operations stay
coherent, and every bad drafter input is a clear error from _open.

Adaptive drafting (ELIZA_DRAFT_P_MIN, ELIZA_DRAFT_BACKOFF_MAX; docs/native.md) decides
when a step drafts. The tests of the draft mechanics (buffers, draft_min, partial
acceptance, reset, slots) run on an `eager` context with both rules off, so that every
step with room drafts; the tests of the rules run on the default context and on contexts
with one rule on."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
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
from eliza.core.layout import REPO_ROOT
from eliza.formats.tiny_gguf import PLANTED_CHAIN, draft_model
from tests.native.helpers import model_file

PROMPTS = ["Hello world, this is", "Once upon a time there was", "naïve café — 東京 and", "The price"]

# Both adaptive rules off: every step with room drafts up to its bound.
EAGER = {"ELIZA_DRAFT_P_MIN": "0", "ELIZA_DRAFT_BACKOFF_MAX": "0"}


def context_with(lib: Library, bundle: Path, env: dict[str, str]) -> Context:
    """A context created under env (the library reads these settings at create only)."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        return lib.open_context(bundle)


@pytest.fixture(scope="module")
def eager(lib: Library, tiny_bundle: Path) -> Iterator[Context]:
    with context_with(lib, tiny_bundle, EAGER) as context:
        yield context


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
    eager: Context, draft_path: Path, draft_max: int
) -> None:
    ctx = eager
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
def test_partly_accepted_drafts_are_byte_identical(eager: Context, near_path: Path, draft_max: int) -> None:
    ctx = eager
    partial = 0
    for prompt in PROMPTS:
        want = run(ctx, greedy_config(48), prompt)[:2]
        tokens, text, steps = run(ctx, drafted_config(48, near_path, draft_max=draft_max), prompt)
        assert (tokens, text) == want, prompt
        check_stats(steps)
        partial += sum(1 for s in steps if 0 < s.accepted < s.drafted)
    assert partial > 0


def test_text_model_as_its_own_drafter_accepts_everything(eager: Context, self_path: Path) -> None:
    ctx = eager
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
def test_tokens_cap_bounds_a_step(eager: Context, self_path: Path, tokens_cap: int) -> None:
    ctx = eager
    want = run(ctx, greedy_config(40), PROMPTS[1])[:2]
    tokens, text, steps = run(ctx, drafted_config(40, self_path, draft_max=8), PROMPTS[1], tokens_cap)
    assert (tokens, text) == want
    check_stats(steps, tokens_cap)
    assert max(s.drafted for s in steps) == tokens_cap - 1


def test_max_tokens_bounds_the_draft(eager: Context, self_path: Path) -> None:
    ctx = eager
    for max_tokens in (1, 2, 5, 7):
        want = run(ctx, greedy_config(max_tokens), PROMPTS[0])[:2]
        tokens, text, _ = run(ctx, drafted_config(max_tokens, self_path, draft_max=4), PROMPTS[0])
        assert (tokens, text) == want and len(tokens) == max_tokens


def test_draft_min_skips_short_drafts(eager: Context, self_path: Path, draft_path: Path) -> None:
    ctx = eager
    # tokens_cap 3 leaves room for 2 draft tokens, below draft_min 3: no step drafts.
    want = run(ctx, greedy_config(24), PROMPTS[2])[:2]
    tokens, text, steps = run(ctx, drafted_config(24, self_path, draft_min=3, draft_max=5), PROMPTS[2], 3)
    assert (tokens, text) == want and all(s.drafted == 0 for s in steps)
    tokens, text, steps = run(ctx, drafted_config(24, draft_path, draft_min=3, draft_max=5), PROMPTS[2])
    assert (tokens, text) == want and all(s.drafted in (0, 3, 4, 5) for s in steps)


def test_repeat_penalty_with_a_drafter_is_identical(
    eager: Context, draft_path: Path, self_path: Path, near_path: Path
) -> None:
    ctx = eager
    for prompt in PROMPTS[:2]:
        want = run(ctx, greedy_config(40, repeat_penalty=1.3), prompt)[:2]
        for drafter in (draft_path, self_path, near_path):
            got = run(ctx, drafted_config(40, drafter, repeat_penalty=1.3, draft_max=5), prompt)[:2]
            assert got == want, (prompt, drafter.name)


def test_without_a_drafter_stats_are_zero(ctx: Context) -> None:
    steps = run(ctx, greedy_config(8), PROMPTS[0])[2]
    assert all(s.drafted == 0 and s.accepted == 0 for s in steps)


def test_cancel_reset_and_reset_keep(eager: Context, near_path: Path) -> None:
    ctx = eager
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


def test_save_and_restore_with_a_drafter(eager: Context, near_path: Path, tmp_path: Path) -> None:
    ctx = eager
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


# --- adaptive drafting ----------------------------------------------------------------


# The backoff rule as the header documents it (DraftBackoff, native/src/llama_drafter.h),
# with the constants the library is compiled with.
def _drafter_constant(name: str) -> int:
    header = (REPO_ROOT / "native" / "src" / "llama_drafter.h").read_text(encoding="utf-8")
    found = re.search(rf"static constexpr int32_t {name} = (\d+);", header)
    assert found is not None, f"{name} is not declared in llama_drafter.h"
    return int(found.group(1))


MISSES_BEFORE_BACKOFF = _drafter_constant("kMissesBeforeBackoff")
FIRST_SKIP = _drafter_constant("kFirstSkip")
SKIP_GROWTH = _drafter_constant("kSkipGrowth")
# The draft model's tokens after "▁price" and the text model's own <0xE2>, up to EOS.
CHAIN_DRAFT = len(PLANTED_CHAIN) - 3


class Backoff:
    """The documented backoff rule, replayed over the steps a stream reported."""

    def __init__(self, max_skip: int) -> None:
        self.max_skip = max_skip
        self.misses = self.skip = self.left = 0

    def should_draft(self) -> bool:
        if self.left == 0:
            return True
        self.left -= 1
        return False

    def record(self, hit: bool) -> None:
        if hit:
            self.misses = self.skip = 0
            return
        self.misses += 1
        if self.max_skip == 0 or self.misses < MISSES_BEFORE_BACKOFF:
            return
        self.skip = min(self.max_skip, FIRST_SKIP if self.skip == 0 else SKIP_GROWTH * self.skip)
        self.left = self.skip


def segments(ctx: Context, cfg: StreamConfig, prompts: Sequence[list[int]]) -> list[list[Step]]:
    """One stream: each prompt prefilled after the previous generation ended, then generated."""
    out = []
    with ctx.open_stream(cfg) as stream:
        for tokens in prompts:
            stream.prefill(tokens)
            out.append(steps_of(stream))
    return out


def predicted_drafting(parts: list[list[Step]], max_tokens: int, max_skip: int) -> list[list[bool]]:
    """Which steps the rule lets draft: a step with room for a draft (it emits a token and
    max_tokens leaves room after it) asks the rule; a prefill starts afresh."""
    rule = Backoff(max_skip)
    out = []
    for steps in parts:
        rule.misses = rule.skip = rule.left = 0
        generated, drafting = 0, []
        for s in steps:
            room = bool(s.tokens) and generated + 1 < max_tokens
            asks = room and rule.should_draft()
            if asks:
                rule.record(s.accepted > 0)
            drafting.append(asks)
            generated += len(s.tokens)
        out.append(drafting)
    return out


@pytest.mark.parametrize(("drafter", "max_skip"), [("draft", 40), ("near", 40), ("near", 3), ("draft", 0)])
def test_backoff_follows_the_rule_and_recovers(
    lib: Library, tiny_bundle: Path, draft_path: Path, near_path: Path, drafter: str, max_skip: int
) -> None:
    # The confidence rule off, so that every step the backoff lets draft does draft: the
    # fixture's draft model then drafts on such steps and is almost never accepted, the
    # scaled text model is accepted in part. After a long generation the stream is given
    # "The price", whose planted chain the drafter (after the prefill's fresh start) drafts.
    max_tokens = 120
    path = draft_path if drafter == "draft" else near_path
    env = {"ELIZA_DRAFT_P_MIN": "0", "ELIZA_DRAFT_BACKOFF_MAX": str(max_skip)}
    with context_with(lib, tiny_bundle, env) as ctx:
        prompts = [ctx.tokenize(PROMPTS[1]), ctx.tokenize("The price", add_special=False)]
        parts = segments(ctx, drafted_config(max_tokens, path, draft_max=4), prompts)
        plain = segments(ctx, greedy_config(max_tokens), prompts)
    for got, want in zip(parts, plain, strict=True):
        assert [t for s in got for t in s.tokens] == [t for s in want for t in s.tokens]
        assert b"".join(s.text for s in got) == b"".join(s.text for s in want)
        check_stats(got)
    predicted = predicted_drafting(parts, max_tokens, max_skip)
    observed = [[s.drafted > 0 for s in steps] for steps in parts]
    assert observed == predicted
    long_run, chain = parts[0], parts[1]
    room = predicted_drafting(parts, max_tokens, 0)[0]  # the steps with room for a draft
    asked = sum(predicted[0])
    if max_skip == 0:
        assert predicted[0] == room  # no backoff: every step with room drafts
    else:
        assert asked < sum(room)  # the backoff skipped steps
    if drafter == "draft" and max_skip:
        # A drafter that is (almost) never accepted drafts on far fewer steps than it could.
        assert asked * 4 < sum(room), (asked, sum(room))
    if drafter == "near" and max_skip:
        # An accepted draft ends the backoff: drafting resumes after a skip and is accepted.
        resumed = [i for i in range(1, len(long_run)) if room[i - 1] and not predicted[0][i - 1]]
        assert any(long_run[i].accepted > 0 for i in resumed), resumed
    # After the prefill the chain is drafted whole and accepted, whatever came before.
    assert (chain[0].drafted, chain[0].accepted) == (CHAIN_DRAFT, CHAIN_DRAFT)
    assert sum(s.drafted for s in long_run) <= 4 * asked


@pytest.mark.parametrize("draft_max", [0, 4])
def test_default_rules_keep_output_and_draft_the_sure_tokens(
    ctx: Context, eager: Context, draft_path: Path, self_path: Path, draft_max: int
) -> None:
    # The fixture's draft model is sure (p >= 0.75) only on the planted chain, which the text
    # model shares: with the default rules it drafts that and is accepted every time, where
    # drafting eagerly it is mostly rejected. The text model drafting for itself still
    # accepts all it drafts. Output is plain greedy's, byte for byte, either way.
    totals: dict[str, tuple[int, int]] = {}
    for name, path in (("draft", draft_path), ("self", self_path)):
        for label, context in (("default", ctx), ("eager", eager)):
            drafted = accepted = 0
            for prompt in PROMPTS:
                want = run(context, greedy_config(48), prompt)[:2]
                tokens, text, steps = run(context, drafted_config(48, path, draft_max=draft_max), prompt)
                assert (tokens, text) == want, (name, label, prompt)
                d, a = check_stats(steps)
                drafted, accepted = drafted + d, accepted + a
            totals[f"{name} {label}"] = (drafted, accepted)
    assert all(drafted > 0 for drafted, _ in totals.values()), totals
    assert totals["draft default"][0] == totals["draft default"][1]
    assert totals["self default"][0] == totals["self default"][1]
    assert totals["draft eager"][1] < totals["draft eager"][0]
    assert totals["draft default"][0] < totals["draft eager"][0]


def test_confidence_rule_alone_drafts_only_the_planted_chain(
    lib: Library, tiny_bundle: Path, draft_path: Path
) -> None:
    # Backoff off, so every step asks the drafter; the confidence rule alone keeps it from
    # drafting the random tokens it is unsure of. Only "The price" drafts, the chain whole.
    with context_with(lib, tiny_bundle, {"ELIZA_DRAFT_BACKOFF_MAX": "0"}) as ctx:
        for prompt in PROMPTS:
            steps = run(ctx, drafted_config(48, draft_path, draft_max=8), prompt)[2]
            drafted, accepted = check_stats(steps)
            if prompt == "The price":
                assert (steps[0].drafted, steps[0].accepted) == (CHAIN_DRAFT, CHAIN_DRAFT)
            assert drafted == accepted, prompt


def test_bad_adaptive_settings_fail_the_create(lib: Library, tiny_bundle: Path) -> None:
    cases = {
        "ELIZA_DRAFT_P_MIN": ["1.5", "-0.1", "abc", "0,5", "nan", " 0.5", "0.5x"],
        "ELIZA_DRAFT_BACKOFF_MAX": ["-1", "1025", "x", "2.5"],
    }
    for name, values in cases.items():
        for value in values:
            with pytest.raises(ElizaError) as err:
                context_with(lib, tiny_bundle, {name: value}).close()
            assert f"{name}='{value}' is not" in err.value.message, err.value.message
    # The range ends are accepted.
    for env in ({"ELIZA_DRAFT_P_MIN": "1", "ELIZA_DRAFT_BACKOFF_MAX": "1024"}, EAGER):
        context_with(lib, tiny_bundle, env).close()


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
