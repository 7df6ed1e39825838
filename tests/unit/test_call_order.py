"""A verify starts its longest calls first, by what they took the last time."""

from __future__ import annotations

from pathlib import Path

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


def test_an_empty_cache_starts_by_the_shipped_seconds_of_calls_this_matrix_has() -> None:
    """The seconds shipped for a verify whose cache holds none name only calls of this
    matrix (a platform's group or a cell's check, on a bundle it declares), each a number
    of seconds, so a renamed cell, check or bundle cannot leave them silently stale."""
    from eliza.app import verification
    from eliza.core.layout import REPO_ROOT
    from eliza.core.verify_plan import PLATFORM_GROUPS
    from eliza.formats.matrix_yaml import load_matrix

    matrix = load_matrix(REPO_ROOT / "matrix.yaml")
    shipped = verification._empty_cache_seconds()
    assert len(shipped) >= 10 and all(seconds >= 0 for seconds in shipped.values())
    platforms = {p.id for p in matrix.platforms}
    cells = {str(c.id) for c in matrix.cells}
    bundles = {b.id for b in matrix.bundles}
    for call in shipped:
        caller, check, bundle = call.split("/")
        assert bundle in bundles, call
        if caller in platforms:  # a platform's group of checks
            assert check in set(PLATFORM_GROUPS.values()), call
        else:  # one cell's check
            assert caller in cells and matrix.check(check).bundle == bundle, call


def test_a_verify_starts_by_its_cache_or_the_shipped_seconds_and_keeps_only_its_own(
    tmp_path: Path,
) -> None:
    """An empty cache starts by the shipped seconds and keeps none of them (only what its
    own calls take is merged and written); a cache that keeps seconds starts by those; a
    damaged file counts as none."""
    from eliza.app import verification

    shipped = verification._empty_cache_seconds()
    assert verification.start_seconds(tmp_path) == ({}, shipped)
    kept = tmp_path / verification.CALL_SECONDS
    kept.write_text('{"linux-cpu/bench/tiny": 7.0}', encoding="utf-8")
    assert verification.start_seconds(tmp_path) == ({"linux-cpu/bench/tiny": 7.0},) * 2
    for damaged in (b"\xff\xfe not text", b"[1, 2]", b"{not json"):
        kept.write_bytes(damaged)
        assert verification.start_seconds(tmp_path) == ({}, shipped)
