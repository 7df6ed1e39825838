"""The simulated CPU's counts kept across verifies (eliza.app.services.counts_cache): a side is
counted once per set of bytes and inputs, whichever checkout it is in; any change to what
the counts depend on counts again; an entry that cannot be read is a miss. callgrind is
replaced here by a stand-in that writes the files a run writes and returns fixed counts."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from eliza.adapters.bench_tools import BenchSettings
from eliza.app.checks import perf, simulated
from eliza.app.services.bench_options import BenchOptions
from eliza.app.services.counts_cache import FOLDER, CountsCache
from eliza.app.services.recording import ArtifactHashes
from eliza.core.layout import REPO_ROOT
from eliza.core.simulated_cpu import PhaseCost, SimulatedRun
from eliza.formats.matrix_yaml import load_matrix

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
CELL = MATRIX.cell("linux-cpu.none")
INSTRUMENT = MATRIX.check("perf").simulated


def counts(instructions: int) -> SimulatedRun:
    cost = PhaseCost(instructions=instructions, l1_misses=instructions // 10, ll_misses=instructions // 100)
    return SimulatedRun(total=cost, prefill=cost, decode=cost, prompt_tokens=12, decoded_tokens=16)


class Callgrind:
    """Stands in for simulated._simulate: one call per side actually run, counts by library."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def __call__(self, tool_dir: Path, side: perf.Side, settings: BenchSettings, instrument: Any,
                 out: Path, name: str, library_sha256: str, threads: int) -> SimulatedRun:  # fmt: skip
        self.ran.append(name)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.callgrind.out").write_text(f"profile of {side.library.name}\n")
        (out / f"{name}.jsonl").write_text(f"records of {side.library.name}\n")
        return counts(len(side.library.read_bytes()) * 1000)


class Checkout:
    """A checkout's build folder: a cell's library and tool, the reference library, a bundle
    and a prompt file, at paths of its own."""

    def __init__(self, root: Path, *, prompts: str = "Once upon a time\n") -> None:
        build = root / "build"
        build.mkdir(parents=True)
        self.candidate = build / "libelizainference.so"
        self.candidate.write_bytes(b"candidate library")
        (build / "e2e_loop_bench").write_bytes(b"bench tool")
        self.reference = root / "baseline" / "libelizainference.so"
        self.reference.parent.mkdir()
        self.reference.write_bytes(b"reference library, longer")
        self.bundle = root / "bundle"
        (self.bundle / "text").mkdir(parents=True)
        (self.bundle / "text" / "model.gguf").write_bytes(b"GGUF weights")
        self.prompts = root / "prompts.txt"
        self.prompts.write_text(prompts)
        self.root = root

    def comparison(self, env: dict[str, str] | None = None) -> perf.Comparison:
        opts = BenchOptions(
            settings=BenchSettings(bundle=self.bundle, prompts=self.prompts), out_dir=self.root / "out"
        )
        return perf.Comparison(
            "",
            perf.Side(self.candidate, env or {}),
            perf.Side(self.reference),
            opts,
            self.root / "out" / "perf",
        )


def run_state(cache: Path) -> Any:
    """What measure_simulated reads of a verify's run: its hashes, the cache, its counts."""
    return SimpleNamespace(
        file_hashes=ArtifactHashes(),
        project=SimpleNamespace(cache=cache, repo=REPO_ROOT),
        simulated_counts={},
        detail=lambda line: None,
    )


def measure(checkout: Checkout, evidence: Any, env: dict[str, str] | None = None) -> simulated.Simulated:
    assert INSTRUMENT is not None
    return simulated.measure_simulated(
        CELL, checkout.comparison(env), INSTRUMENT, "valgrind 3.19.0", 1, evidence
    )


@pytest.fixture
def callgrind(monkeypatch: pytest.MonkeyPatch) -> Callgrind:
    stand_in = Callgrind()
    monkeypatch.setattr(simulated, "_simulate", stand_in)
    return stand_in


def test_the_same_bytes_in_another_checkout_are_read_back_not_counted_again(
    tmp_path: Path, callgrind: Callgrind
) -> None:
    cache = tmp_path / "cache"
    first = measure(Checkout(tmp_path / "one"), run_state(cache))
    assert callgrind.ran == ["candidate", "reference"] and first.cached == ()
    second_checkout = Checkout(tmp_path / "another" / "clone")
    second = measure(second_checkout, run_state(cache))
    assert callgrind.ran == ["candidate", "reference"], "nothing was counted again"
    assert second.cached == ("candidate", "reference")
    assert second.candidate == first.candidate and second.reference == first.reference
    # the profile and the records are where the run would have written them
    simulated = second_checkout.root / "out" / "perf" / "simulated"
    assert (simulated / "candidate.callgrind.out").read_text() == "profile of libelizainference.so\n"
    assert (simulated / "reference.jsonl").is_file()
    assert second.as_dict()["cached"] == ["candidate", "reference"]


@pytest.mark.parametrize(
    "change",
    ["library", "tool", "bundle", "prompts", "environment"],
)
def test_a_change_to_what_the_counts_depend_on_counts_again(
    tmp_path: Path, callgrind: Callgrind, change: str
) -> None:
    cache = tmp_path / "cache"
    measure(Checkout(tmp_path / "one"), run_state(cache))
    other = Checkout(
        tmp_path / "two", prompts="A different prompt\n" if change == "prompts" else "Once upon a time\n"
    )
    if change == "library":
        other.candidate.write_bytes(b"candidate library, rebuilt")
    if change == "tool":
        (other.candidate.parent / "e2e_loop_bench").write_bytes(b"bench tool, rebuilt")
    if change == "bundle":
        (other.bundle / "text" / "model.gguf").write_bytes(b"other GGUF weights")
    env = {"ELIZA_LLM_BACKEND": "llama.cpp"} if change == "environment" else None
    callgrind.ran.clear()
    measured = measure(other, run_state(cache), env)
    expected = ["candidate", "reference"] if change in ("tool", "bundle", "prompts") else ["candidate"]
    assert callgrind.ran == expected, change
    assert measured.cached == tuple(n for n in ("candidate", "reference") if n not in expected)


def test_the_reference_of_several_cells_is_counted_once_per_run(tmp_path: Path, callgrind: Callgrind) -> None:
    checkout = Checkout(tmp_path / "one")
    evidence = run_state(tmp_path / "cache")  # one verify, two cells
    measure(checkout, evidence)
    checkout.candidate.write_bytes(b"another cell's library")
    again = measure(checkout, evidence)
    assert callgrind.ran == ["candidate", "reference", "candidate"]
    assert again.reference_shared and again.cached == ()


def entry_files(cache: Path) -> list[Path]:
    return sorted((cache / FOLDER).glob("*.json"))


@pytest.mark.parametrize("damage", ["truncated", "another format", "another key", "no profile"])
def test_an_entry_that_cannot_be_read_is_a_miss_and_is_written_again(
    tmp_path: Path, callgrind: Callgrind, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    measure(Checkout(tmp_path / "one"), run_state(cache))
    entry = entry_files(cache)[0]
    text = entry.read_text()
    if damage == "truncated":
        entry.write_text(text[: len(text) // 2])
    elif damage == "another format":
        entry.write_text(text.replace('"format": 1', '"format": 99'))
    elif damage == "another key":
        entry.write_text(text.replace(entry.stem, "0" * 64))
    else:
        entry.with_suffix(".callgrind.out").unlink()
    callgrind.ran.clear()
    caplog.clear()
    measure(Checkout(tmp_path / "two"), run_state(cache))
    assert len(callgrind.ran) == 1, damage
    assert entry.read_text() == text  # counted again and kept again
    said = [r.getMessage() for r in caplog.records if r.name == "eliza.cache"]
    assert len(said) == 1 and str(entry) in said[0] and "written anew" in said[0], said


def test_a_save_then_a_load_gives_the_same_counts(tmp_path: Path) -> None:
    run = counts(123_456)
    made = tmp_path / "made"
    made.mkdir()
    (made / "p.callgrind.out").write_text("profile\n")
    (made / "p.jsonl").write_text("records\n")
    kept = CountsCache(tmp_path / "cache")
    assert kept.load("k" * 64, tmp_path / "out", "candidate") is None
    kept.save("k" * 64, run, made / "p.callgrind.out", made / "p.jsonl")
    assert kept.load("k" * 64, tmp_path / "out", "candidate") == run
    assert (tmp_path / "out" / "candidate.jsonl").read_text() == "records\n"
    shutil.rmtree(tmp_path / "cache")
    assert kept.load("k" * 64, tmp_path / "out2", "candidate") is None
