"""A verify starts its longest calls first, by what they took the last time."""

from __future__ import annotations

from eliza.core.call_order import remembered, start_order

PLAN = [
    "linux-cpu.none/perf/tiny",
    "linux-cpu/bench/tiny",
    "linux-arm64/bench/tiny",
    "linux-arm64.none/abi/tiny",
]


def test_the_longest_call_starts_first_and_one_never_timed_before_it() -> None:
    assert start_order(PLAN, {}) == PLAN  # nothing timed yet: the plan's order
    timed = {"linux-cpu.none/perf/tiny": 3.0, "linux-cpu/bench/tiny": 40.0, "linux-arm64/bench/tiny": 62.0}
    assert start_order(PLAN, timed) == [
        "linux-arm64.none/abi/tiny",  # never timed: first
        "linux-arm64/bench/tiny",
        "linux-cpu/bench/tiny",
        "linux-cpu.none/perf/tiny",
    ]
    tie = {c: 5.0 for c in PLAN}
    assert start_order(PLAN, tie) == PLAN  # a tie keeps the plan's order
    assert start_order(PLAN[:2], timed) == ["linux-cpu/bench/tiny", "linux-cpu.none/perf/tiny"]


def test_a_verify_of_some_calls_forgets_nothing_of_the_others() -> None:
    before = {"a": 10.0, "b": 20.0}
    assert remembered(before, {"b": 7.04, "c": 1.26}) == {"a": 10.0, "b": 7.0, "c": 1.3}
