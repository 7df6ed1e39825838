"""matrix.yaml's perf entries: a perf check declares the rule of each metric, other kinds
have none, and every waiver names a judged metric and exactly one expiry; a waiver that
matches no cell is a warning."""

from __future__ import annotations

from datetime import date

from eliza.core.matrix import Direction
from eliza.formats.matrix_yaml import parse_matrix
from tests.unit.test_matrix_loader import SOURCE, edit, only_problem

PERF = """  - id: perf
    kind: perf
    description: perf
    pass_rule: no regression
    needs_run: true
    rounds: 5
    metrics:
      decode_tok_s: {better: higher, bound: 0.05}
      peak_rss_kb: {better: lower, bound: 0.1, max_interval: 0.3}
cells:
"""
WITH_PERF = edit("cells:\n", PERF)


def with_waiver(entry: str) -> str:
    return WITH_PERF + f"perf_waivers:\n  - {entry}\n"


def test_the_perf_rules_and_rounds_are_read() -> None:
    check = parse_matrix(WITH_PERF, SOURCE).check("perf")
    assert check.rounds == 5
    decode, rss = check.metrics
    assert (decode.metric, decode.direction, decode.threshold) == ("decode_tok_s", Direction.HIGHER, 0.95)
    assert (rss.metric, rss.direction, rss.threshold, rss.widest) == (
        "peak_rss_kb",
        Direction.LOWER,
        1.1,
        0.3,
    )


def test_a_perf_check_without_metrics_and_metrics_elsewhere_are_errors() -> None:
    rules = "".join(line + "\n" for line in PERF.splitlines()[6:9])
    text = edit(rules, "", WITH_PERF)
    assert "declares no metrics" in only_problem(text).message
    text = edit("    gated_cells_only: true\n", "    gated_cells_only: true\n    rounds: 5\n", WITH_PERF)
    assert "only a perf check has rounds" in only_problem(text).message


def test_an_unknown_metric_names_the_valid_ones() -> None:
    problem = only_problem(edit("decode_tok_s: {better", "decode_tps: {better", WITH_PERF))
    assert "decode_tps" in str(problem)


def test_a_waiver_is_read_with_its_expiry() -> None:
    m = parse_matrix(
        with_waiver(
            '{cells: "linux-cpu.*", metric: decode_tok_s, bound: 0.2, reason: why, expires: 2027-01-31}'
        ),
        SOURCE,
    )
    (w,) = m.perf_waivers
    assert (w.cells, w.metric, w.bound, w.reason, w.expires) == (
        "linux-cpu.*",
        "decode_tok_s",
        0.2,
        "why",
        date(2027, 1, 31),
    )
    assert not m.warnings


def test_a_waiver_needs_one_expiry_a_date_and_a_judged_metric() -> None:
    both = '{cells: "*", metric: decode_tok_s, bound: 0.2, reason: why, expires: 2027-01-31, milestone: M3}'
    assert "exactly one expiry" in only_problem(with_waiver(both)).message
    neither = '{cells: "*", metric: decode_tok_s, bound: 0.2, reason: why}'
    assert "exactly one expiry" in only_problem(with_waiver(neither)).message
    bad_date = '{cells: "*", metric: decode_tok_s, bound: 0.2, reason: why, expires: 2027-02-30}'
    assert "is not a date" in only_problem(with_waiver(bad_date)).message
    unjudged = '{cells: "*", metric: first_token_ms, bound: 0.2, reason: why, milestone: M3}'
    problem = only_problem(with_waiver(unjudged))
    assert "no perf check judges 'first_token_ms'" in problem.message and problem.line is not None


def test_a_waiver_matching_no_cell_is_a_warning() -> None:
    m = parse_matrix(
        with_waiver('{cells: "macos-*", metric: decode_tok_s, bound: 0.2, reason: why, milestone: M3}'),
        SOURCE,
    )
    assert [w.message for w in m.warnings] == ["'macos-*' matches no cell, so it waives nothing"]
