"""The backend-agreement judge: records of the llama.cpp path, the reference runner's
margins and a hard-selected backend in, a verdict out."""

from __future__ import annotations

import json

import pytest

from eliza.core.backend_agreement import AgreementInputError, judge, past_the_window
from eliza.core.bench_records import BenchRun, parse_run
from eliza.core.matrix import BackendAgreement

PROMPTS = ("Once upon a time", "naïve café")


def bench(
    tokens: list[list[int]],
    *,
    margins: list[list[float]] | None = None,
    texts: list[bytes] | None = None,
    text_ends: list[list[int]] | None = None,
) -> BenchRun:
    """A bench record file as the tools write it (header, one line per prompt)."""
    lines = [json.dumps({"type": "header", "format": "eliza-bench/1", "tool": "t", "cell": "c"})]
    for i, toks in enumerate(tokens):
        record = {
            "type": "prompt", "index": i, "prompt": PROMPTS[i], "prompt_tokens": [1], "tokens": toks,
            "text_hex": (texts[i] if texts else bytes(t % 256 for t in toks)).hex(), "final_status": 1,
            "repeats_identical": True, "drafter": [], "prefill_ms": [1.0], "first_token_ms": [1.0],
            "decode_tok_s": [1.0], "peak_rss_kb": 1,
        }  # fmt: skip
        if margins is not None:
            record["logit_margins"] = margins[i]
        if text_ends is not None:
            record["token_text_ends"] = text_ends[i]
        lines.append(json.dumps(record))
    return parse_run("\n".join(lines), "test")


REF = [[5, 6, 7, 8], [9, 10, 11]]
MARGINS = [[2.0, 0.01, 3.0, 3.0, 3.0], [1.0, 1.0, 1.0, 1.0]]
RULE = BackendAgreement(min_token_agreement=0.5, tie_margin=0.05)


def test_equal_runs_agree_fully() -> None:
    v = judge("mlx", bench(REF), bench(REF, margins=MARGINS), bench(REF), RULE)
    assert v.passed and v.agreement == 1.0 and v.positions == 7 and v.reason() == ""
    assert all(p.divergence is None for p in v.prompts)


def test_a_divergence_at_a_tie_is_allowed_and_counts_the_rest_as_disagreeing() -> None:
    got = [[5, 99, 98, 97], REF[1]]  # diverges at position 1, where llama.cpp's gap was 0.01
    v = judge("mlx", bench(REF), bench(REF, margins=MARGINS), bench(got), RULE)
    first = v.prompts[0]
    assert (first.divergence, first.agreed, first.margin, first.allowed) == (1, 1, 0.01, True)
    assert v.agreement == pytest.approx(4 / 7) and v.passed
    strict = BackendAgreement(min_token_agreement=0.9, tie_margin=0.05)
    v = judge("mlx", bench(REF), bench(REF, margins=MARGINS), bench(got), strict)
    assert not v.passed and "agreement 0.5714 is below the floor 0.9" in v.reason()


def test_a_divergence_where_llama_was_sure_fails_naming_the_gap() -> None:
    got = [[5, 6, 70, 8], REF[1]]  # position 2: llama.cpp's top-two gap was 3.0
    v = judge("mlx", bench(REF), bench(REF, margins=MARGINS), bench(got), RULE)
    assert not v.passed
    assert "prompt 0: diverges at position 2 of 4, llama.cpp's top-two gap 3 (not a tie)" in v.reason()


def test_a_shorter_or_longer_backend_run_diverges_where_one_ends() -> None:
    v = judge("mlx", bench(REF), bench(REF, margins=MARGINS), bench([REF[0][:2], REF[1]]), RULE)
    assert v.prompts[0].divergence == 2 and not v.prompts[0].allowed  # gap 3.0 there
    v = judge("mlx", bench(REF), bench(REF, margins=MARGINS), bench([[*REF[0], 1], REF[1]]), RULE)
    assert v.prompts[0].divergence == 4 and not v.passed


def test_text_is_compared_by_bytes_and_judged_by_the_token_that_holds_the_first_difference() -> None:
    # "once" is tokens "on" "ce" (text ends at 2, 4); "café" is "caf" "é" (ends 3, 5)
    texts = [b"once", "café".encode()]
    ends = [[2, 4], [3, 5]]
    margins = [[2.0, 0.01], [1.0, 1.0]]
    rule = BackendAgreement(compare="text", min_token_agreement=0.0, tie_margin=0.05)
    ref, mar = bench(REF, texts=texts), bench(REF, margins=margins, text_ends=ends)
    same = judge("litert", ref, mar, bench([[1], [2]], texts=texts), rule)
    assert same.passed and same.positions == 4 + 4  # characters, not tokens
    # byte 3 belongs to the second token, where llama.cpp's gap was 0.01: a tie
    tie = judge("litert", ref, mar, bench(REF, texts=[b"onc3", texts[1]]), rule)
    assert tie.prompts[0].divergence == 3 and tie.prompts[0].margin == 0.01 and tie.prompts[0].allowed
    assert tie.passed
    # byte 1 belongs to the first token, gap 2.0: not a tie
    sure = judge("litert", ref, mar, bench(REF, texts=[b"oNce", texts[1]]), rule)
    assert sure.prompts[0].margin == 2.0 and not sure.prompts[0].allowed and not sure.passed
    # a lone byte token is U+FFFD through a text API: equal, not a divergence
    lone = [b"on\x84e", texts[1]]
    replaced = [b"on\xef\xbf\xbde", texts[1]]
    ref_lone = bench(REF, texts=lone)
    assert judge("litert", ref_lone, mar, bench(REF, texts=replaced), rule).passed
    # a character cut off by max_tokens: llama.cpp flushes its 3 bytes, a text API renders each
    # byte token alone (3 x U+FFFD): equal, whereas a plain "replace" decode makes 1 of 3
    cut = [b"on" + "🫖".encode()[:3], texts[1]]
    each = [b"on" + "\ufffd".encode() * 3, texts[1]]
    sure_margins = bench(REF, margins=[[2.0, 2.0], [1.0, 1.0]], text_ends=ends)
    assert judge("litert", bench(REF, texts=cut), sure_margins, bench(REF, texts=each), rule).passed
    # after a multi-byte character, character 2 of "éab" is byte 3: the third token's (a tie),
    # not the second's (character index taken as a byte index would say)
    multi = bench(REF, texts=[texts[0], "éab".encode()])
    multi_margins = bench(REF, margins=[margins[0], [1.0, 1.0, 0.02]], text_ends=[ends[0], [2, 3, 4]])
    after = judge("litert", multi, multi_margins, bench(REF, texts=[texts[0], "éaX".encode()]), rule)
    assert after.prompts[1].divergence == 2 and after.prompts[1].margin == 0.02 and after.passed
    with pytest.raises(AgreementInputError, match="no token_text_ends"):
        judge("litert", ref, bench(REF, margins=margins), bench(REF, texts=[b"onc3", texts[1]]), rule)


def test_nothing_generated_never_passes() -> None:
    empty = [[], []]
    v = judge("mlx", bench(empty), bench(empty, margins=[[1.0], [1.0]]), bench(empty), RULE)
    assert not v.passed and "nothing was generated" in v.reason()


def test_runs_that_cannot_be_compared_are_refused() -> None:
    with pytest.raises(AgreementInputError, match="other prompts"):
        judge("mlx", bench(REF), bench(REF[:1], margins=MARGINS[:1]), bench(REF), RULE)
    with pytest.raises(AgreementInputError, match="reference runner's tokens differ"):
        judge("mlx", bench(REF), bench([[5], REF[1]], margins=MARGINS), bench(REF), RULE)
    with pytest.raises(AgreementInputError, match="recorded 0 logit margins"):
        judge("mlx", bench(REF), bench(REF, margins=[[], []]), bench([[6], REF[1]]), RULE)


def test_past_the_window_a_near_tie_still_decides_but_no_floor_applies() -> None:
    """A long prompt that parts from llama.cpp early at a near-tie passes (its share of
    agreeing positions says only where the tie fell); one that parts where llama.cpp's top two
    lay far apart fails all the same."""
    long_rule = past_the_window(BackendAgreement(min_token_agreement=0.9, tie_margin=0.05))
    early_tie = [[5, 99, 98, 97], REF[1]]  # position 1: llama.cpp's gap 0.01
    v = judge("litert", bench(REF), bench(REF, margins=MARGINS), bench(early_tie), long_rule)
    assert v.passed and v.agreement < 0.9
    clear = [[99, 6, 7, 8], REF[1]]  # position 0: llama.cpp's gap 2.0
    v = judge("litert", bench(REF), bench(REF, margins=MARGINS), bench(clear), long_rule)
    assert not v.passed and v.prompts[0].divergence == 0 and not v.prompts[0].allowed
