"""Sampled decoding (temperature > 0) through the C ABI. docs/native.md, "Streaming":
top-k, top-p, temperature and a distribution sampler seeded from `slot_id` (>= 0, else 0),
so a seed reproduces its stream, other seeds draw other tokens, and a draw is always one
of the top_k most likely tokens."""

from __future__ import annotations

from collections.abc import Sequence

from eliza.adapters.ffi import Context, StreamConfig, greedy_config

# Not "The price": the tiny model's planted chain after it is near-certain at any temperature.
PROMPTS = ["Hello world, this is", "Once upon a time there was", "naïve café — 東京 and"]
SEEDS = range(8)
DRAWS = range(48)  # seeds drawing one token each at one context


def sampled(max_tokens: int, seed: int, *, temperature: float = 1.0, top_k: int = 0) -> StreamConfig:
    return greedy_config(max_tokens, temperature=temperature, top_p=1.0, top_k=top_k, slot_id=seed)


def run(ctx: Context, tokens: Sequence[int], cfg: StreamConfig) -> list[int]:
    with ctx.open_stream(cfg) as stream:
        stream.prefill(tokens)
        return stream.generate()[0]


def test_the_same_seed_draws_the_same_tokens(ctx: Context) -> None:
    for prompt in PROMPTS:
        tokens = ctx.tokenize(prompt)
        for seed in (0, 7, 12345):
            first = run(ctx, tokens, sampled(24, seed))
            assert len(first) == 24, prompt
            assert run(ctx, tokens, sampled(24, seed)) == first, (prompt, seed)
            # a reset clears the sampler: the stream draws its seed's tokens again
            with ctx.open_stream(sampled(24, seed)) as stream:
                stream.prefill(tokens)
                stream.generate()
                assert stream.reset() == 0
                stream.prefill(tokens)
                assert stream.generate()[0] == first, (prompt, seed)


def test_a_negative_seed_is_seed_0(ctx: Context) -> None:
    for prompt in PROMPTS:
        tokens = ctx.tokenize(prompt)
        assert run(ctx, tokens, sampled(16, -1)) == run(ctx, tokens, sampled(16, 0)), prompt


def test_different_seeds_draw_different_tokens(ctx: Context) -> None:
    tokens = [ctx.tokenize(p) for p in PROMPTS]
    greedy = [run(ctx, t, greedy_config(16)) for t in tokens]
    runs = {seed: [run(ctx, t, sampled(16, seed)) for t in tokens] for seed in SEEDS}
    for a in SEEDS:
        assert runs[a] != greedy, f"seed {a} decoded greedily"
        for b in SEEDS:
            if a < b:
                assert runs[a] != runs[b], f"seeds {a} and {b} drew the same tokens for every prompt"


def test_top_k_1_is_greedy_whatever_the_seed(ctx: Context) -> None:
    for prompt in PROMPTS:
        tokens = ctx.tokenize(prompt)
        greedy = run(ctx, tokens, greedy_config(16))
        for seed in SEEDS:
            assert run(ctx, tokens, sampled(16, seed, temperature=2.0, top_k=1)) == greedy, (prompt, seed)


def first_draws(ctx: Context, tokens: Sequence[int], top_k: int) -> set[int]:
    """The tokens drawn first after `tokens` by many seeds, hot (temperature 2)."""
    return {run(ctx, tokens, sampled(1, seed, temperature=2.0, top_k=top_k))[0] for seed in DRAWS}


def test_each_draw_is_among_the_top_k(ctx: Context) -> None:
    """At a given context, however many seeds draw, top_k = k gives at most k tokens, the
    most likely (the greedy one) among them; without top_k the same seeds draw many more.
    Checked after each prompt and at points along a sampled stream."""
    contexts = []
    for prompt in PROMPTS:
        tokens = ctx.tokenize(prompt)
        drawn = run(ctx, tokens, sampled(12, 3))
        contexts += [tokens, tokens + drawn[:6], tokens + drawn]
    for tokens in contexts:
        best = run(ctx, tokens, greedy_config(1))[0]
        unlimited = first_draws(ctx, tokens, 0)
        assert len(unlimited) > 8, f"{len(unlimited)} different tokens from {len(DRAWS)} seeds without top_k"
        for k in (2, 3, 5):
            drawn = first_draws(ctx, tokens, k)
            assert 2 <= len(drawn) <= k, (k, drawn)
            assert best in drawn, (k, best, drawn)
