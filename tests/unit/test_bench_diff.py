"""The diff engine on runs built in code: identity, first divergence, spreads and ratios."""

from __future__ import annotations

import json
import statistics

import pytest

from eliza.core.bench_diff import compare_identity, drafter_problems, drafter_totals, ratio_report, spread
from eliza.core.bench_records import BenchFormatError, BenchRun, PromptRecord, parse_run


def prompt(index: int, tokens: tuple[int, ...], text: bytes, *, identical: bool = True) -> PromptRecord:
    return PromptRecord(
        index=index,
        prompt=f"p{index}",
        prompt_tokens=(1, 2),
        tokens=tokens,
        text=text,
        final_status=1,
        repeats_identical=identical,
        drafter=tuple((0, 0) for _ in tokens),
        prefill_ms=(1.0,),
        first_token_ms=(2.0,),
        decode_tok_s=(100.0,),
        peak_rss_kb=1000,
    )


def run(*prompts: PromptRecord, cell: str = "c") -> BenchRun:
    return BenchRun(source="mem", header={"tool": "t", "cell": cell}, prompts=prompts)


def test_identical_runs() -> None:
    a = run(prompt(0, (5, 6, 7), b"abc"), prompt(1, (8,), b"d"))
    result = compare_identity(a, a)
    assert result.identical
    assert (result.prompts_compared, result.tokens_compared) == (2, 4)
    assert "IDENTICAL (2 prompts, 4 tokens)" in result.summary()


def test_first_divergence_names_step_tokens_and_both_texts() -> None:
    left = run(prompt(0, (5, 6, 7, 8), b"hello world, this is"))
    right = run(prompt(0, (5, 6, 9, 8), b"hello wonder, this is"))
    result = compare_identity(left, right, left_label="FFI", right_label="reference")
    assert not result.identical
    (d,) = result.divergences
    assert (d.step, d.left_token, d.right_token) == (2, 7, 9)
    assert d.byte_offset == len(b"hello wo")
    assert "rld" in d.left_window and "nder" in d.right_window
    text = result.report()
    assert "first divergence at step 2" in text and "FFI: token 7" in text and "reference: token 9" in text


def test_one_side_stops_early() -> None:
    result = compare_identity(run(prompt(0, (5, 6), b"ab")), run(prompt(0, (5, 6, 7), b"abc")))
    (d,) = result.divergences
    assert (d.step, d.left_token, d.right_token, d.byte_offset) == (2, None, 7, 2)
    assert "end of output" in result.report()


def test_structural_problems_are_never_identical() -> None:
    two = run(prompt(0, (1,), b"a"), prompt(1, (2,), b"b"))
    one = run(prompt(0, (1,), b"a"))
    assert "prompt counts differ (2 vs 1)" in compare_identity(two, one).problems
    unstable = run(prompt(0, (1,), b"a", identical=False))
    assert not compare_identity(unstable, unstable).identical
    assert not compare_identity(run(), run()).identical  # nothing compared is never identical


def test_spread_and_ratio_of_interleaved_pairs() -> None:
    values = [3.0, 1.0, 4.0, 1.0, 5.0]
    s = spread(values)
    assert s.median == statistics.median(values) and (s.low, s.high, s.n) == (1.0, 5.0, 5)
    q1, _, q3 = statistics.quantiles(sorted(values), n=4, method="inclusive")
    assert (s.q1, s.q3) == (q1, q3)
    pairs = [(2.0, 1.0), (3.0, 1.0), (4.0, 2.0)]
    report = ratio_report("decode tok/s", "FFI", "reference", pairs)
    assert report.ratios.median == statistics.median([a / b for a, b in pairs])
    with pytest.raises(ValueError):
        ratio_report("x", "a", "b", [(1.0, 0.0)])


def test_parse_errors_name_file_and_line() -> None:
    header = json.dumps({"type": "header", "format": "eliza-bench/1", "tool": "t", "cell": "c"})
    with pytest.raises(BenchFormatError, match=r"runs.jsonl: empty"):
        parse_run("", "runs.jsonl")
    with pytest.raises(BenchFormatError, match=r"runs.jsonl:2: not JSON"):
        parse_run(header + "\n{oops\n", "runs.jsonl")
    with pytest.raises(BenchFormatError, match=r"runs.jsonl:1: first record must be"):
        parse_run('{"type": "prompt"}\n', "runs.jsonl")
    with pytest.raises(BenchFormatError, match=r"runs.jsonl:2: malformed prompt record"):
        parse_run(header + '\n{"type": "prompt", "index": 0}\n', "runs.jsonl")


def test_differing_settings_are_reported_first() -> None:
    left = BenchRun(
        source="a", header={"tool": "t", "cell": "c", "max_tokens": 64}, prompts=(prompt(0, (5, 6), b"ab"),)
    )
    right = BenchRun(
        source="b", header={"tool": "t", "cell": "c", "max_tokens": 256}, prompts=(prompt(0, (5, 7), b"ac"),)
    )
    result = compare_identity(left, right)
    assert not result.identical
    assert result.problems[0] == "settings differ: max_tokens 64 vs 256"
    assert result.summary().index("settings differ") < result.summary().index("divergent prompt")


def test_pretty_printed_json_is_named_as_not_json_lines() -> None:
    with pytest.raises(BenchFormatError, match=r"x.json:1: not JSON lines .* one JSON object per line"):
        parse_run(json.dumps({"type": "header"}, indent=2), "x.json")


def with_drafter(record: PromptRecord, steps: tuple[tuple[int, int], ...]) -> PromptRecord:
    from dataclasses import replace

    return replace(record, drafter=steps)


def test_drafter_stats_and_their_problems() -> None:
    good = run(with_drafter(prompt(0, (5, 6, 7), b"abc"), ((2, 2), (4, 1), (0, 0))))
    assert drafter_totals(good) == (6, 3)
    assert drafter_problems("draft", good) == []
    assert drafter_problems("self", good, must_accept_all=True) == [
        "self: accepted 3 of 6 drafted tokens (must be all)"
    ]
    over = run(with_drafter(prompt(0, (5,), b"a"), ((1, 1), (2, 3))))
    assert drafter_problems("draft", over) == ["draft: prompt 0 step 1: accepted 3 of 2 drafted"]
    idle = run(prompt(0, (5, 6), b"ab"))
    assert drafter_problems("draft", idle) == ["draft: no step drafted anything"]


def test_a_speedup_compares_only_prompts_with_a_decode_phase_on_both_sides() -> None:
    from dataclasses import replace

    from eliza.core.bench_diff import paired_decode_tok_s, run_decode_tok_s

    plain = run(
        *(
            replace(prompt(i, (5, 6, 7), b"abc"), decode_tok_s=(rate,))
            for i, rate in enumerate((90.0, 100.0, 4500.0))
        )
    )
    # the drafter emitted prompt 2's whole output in its first step: no decode phase to time
    drafted = run(
        *(
            replace(prompt(i, (5, 6, 7), b"abc"), decode_tok_s=(rate,))
            for i, rate in enumerate((80.0, 100.0, 0.0))
        )
    )
    mine, theirs = paired_decode_tok_s(drafted, plain)
    assert (mine, theirs) == (statistics.median([80.0, 100.0]), statistics.median([90.0, 100.0]))
    # the unpaired medians would count the untimed prompt as a slowdown
    assert run_decode_tok_s(drafted) / run_decode_tok_s(plain) < mine / theirs
    assert paired_decode_tok_s(run(), plain) == (0.0, 0.0)
