"""The fuzz targets replayed over their seed corpus and every minimized finding
(tests/fuzz/regressions/<target>/): the default suite keeps each input that once broke
the library from breaking it again, and checks the targets' own contract checks on the
seeds (a seed the library answers wrongly fails here before any fuzzing): each input's
outcome, accepted or refused, is the one SEED_OUTCOMES declares, so a valid seed the
library refuses fails here even where a target cannot judge the input on its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eliza.adapters.ffi import Library
from tests.fuzz.targets import CORPUS, SEED_OUTCOMES, TARGETS, Harness, inputs_of, seed_key

CASES = [(target, path) for target in sorted(TARGETS) for path in inputs_of(target)]


@pytest.fixture(scope="module")
def harness(lib: Library, tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    h = Harness(lib, tiny_bundle, tmp_path_factory.mktemp("fuzz"))
    yield h
    h.close()


def test_every_target_has_a_seed_corpus() -> None:
    assert sorted(p.name for p in CORPUS.iterdir() if p.is_dir()) == sorted(TARGETS)
    for target in TARGETS:
        assert inputs_of(target), f"{target}: no seeds"


def test_every_input_declares_its_outcome() -> None:
    inputs = {seed_key(path) for _, path in CASES}
    assert sorted(inputs - set(SEED_OUTCOMES)) == [], "inputs without an outcome in SEED_OUTCOMES"
    assert sorted(set(SEED_OUTCOMES) - inputs) == [], "outcomes of inputs that do not exist"


@pytest.mark.parametrize(
    ("target", "path"), CASES, ids=[f"{t}/{p.parent.parent.name}/{p.name}" for t, p in CASES]
)
def test_input_keeps_the_contract(harness: Harness, target: str, path: Path) -> None:
    accepted = TARGETS[target](harness, path.read_bytes())
    expected = SEED_OUTCOMES.get(seed_key(path))
    assert expected is not None, f"{seed_key(path)} has no outcome in SEED_OUTCOMES (tests/fuzz/targets.py)"
    said = {True: "accepted", False: "refused"}
    assert accepted == expected, f"the library {said[accepted]} {seed_key(path)}: it must be {said[expected]}"
