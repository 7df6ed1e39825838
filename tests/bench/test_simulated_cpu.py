"""The perf check's simulated CPU on a real build: e2e_loop_bench under valgrind's callgrind,
through the perf runner's own adapter. Twice with the same arguments, the counts of every
phase are the same to the last instruction and miss; with longer paths (the heap laid out
at other addresses) the figures move by less than 0.1 %. And the bench tool's
--library-sha256, which spares the simulator hashing the library file."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from eliza.adapters.bench_tools import BenchSettings, BenchToolError, bench_argv, run_tool
from eliza.app.checks.perf import Side
from eliza.app.checks.simulated import _simulate
from eliza.app.project import load_project_matrix
from eliza.core.simulated_cpu import DECODE_FUNCTION, SimulatedRun
from eliza.formats.callgrind import load_profile

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None, reason="no valgrind on PATH")


@pytest.fixture(scope="module")
def two_prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "p.txt"
    path.write_text("Once upon a time there was\nThe quick brown fox jumps over the lazy dog and then\n")
    return path


def test_two_runs_count_the_same_phases_exactly(library_path: Path, tiny_bundle: Path, two_prompts: Path,
                                                 tmp_path: Path) -> None:  # fmt: skip
    instrument = load_project_matrix().check("perf").simulated
    assert instrument is not None
    settings = BenchSettings(bundle=tiny_bundle, prompts=two_prompts, max_tokens=6, repeats=1)
    sha = hashlib.sha256(library_path.read_bytes()).hexdigest()

    def simulate(out: str, name: str) -> SimulatedRun:
        return _simulate(
            library_path.parent, Side(library_path), settings, instrument, tmp_path / out, name, sha, 1
        )

    # The same arguments, twice: every phase to the last instruction. The simulated caches'
    # misses follow the heap's addresses, which the tool's own timing text (a few bytes more
    # or less in an earlier record) can shift: a miss or two in hundreds of thousands.
    first, second = simulate("a", "candidate"), simulate("b", "candidate")
    assert first.decoded_tokens == second.decoded_tokens == 2 * 6
    assert first.prompt_tokens == second.prompt_tokens > 2
    # (The total also counts the tool writing its records, whose timing text varies.)
    for phase in ("prefill", "decode"):
        a, b = getattr(first, phase), getattr(second, phase)
        assert a.instructions == b.instructions, phase
        for misses in ("l1_misses", "ll_misses"):
            assert abs(getattr(a, misses) - getattr(b, misses)) <= max(2, getattr(a, misses) // 100_000), (
                phase,
                a,
                b,
            )
    figures = first.figures(instrument.weights)
    for name, value in second.figures(instrument.weights).items():
        same = value == figures[name] if "instructions" in name else abs(value / figures[name] - 1) < 1e-5
        assert same, (name, value, figures[name])
    # a decode step of the tiny model is millions of instructions, its cycles more
    assert 1e6 < figures["decode_instructions_per_token"] < figures["decode_cycles_per_token"]
    # What is counted besides the phases (tokenizing, opening streams, records) is in the total.
    assert first.total.instructions > first.prefill.instructions + first.decode.instructions
    # Counting starts once the context exists (the tool's client request, callgrind started
    # with --instr-atstart=no): the stream calls are counted, the load is not.
    profile = load_profile(tmp_path / "a" / "candidate.callgrind.out")
    assert profile.inclusive(DECODE_FUNCTION)["Ir"] == first.decode.instructions
    assert not profile.inclusive("eliza_inference_create").get("Ir")
    # Longer paths and another label move the heap's addresses: what varies is bounded.
    other = simulate("a/much/longer/folder/than/before", "another-label")
    for name, value in other.figures(instrument.weights).items():
        assert abs(value / figures[name] - 1) < 1e-3, (name, value, figures[name])


def test_the_bench_tool_takes_the_callers_hash_and_refuses_a_malformed_one(
    library_path: Path, tiny_bundle: Path, two_prompts: Path, tmp_path: Path
) -> None:
    settings = BenchSettings(bundle=tiny_bundle, prompts=two_prompts, max_tokens=2, repeats=1)
    given = "ab" * 32
    argv = bench_argv(library_path.parent, library_path, settings, "t", tmp_path / "r.jsonl")
    run = run_tool([*argv, "--library-sha256", given], tmp_path / "r.jsonl")
    assert run.header["build"]["library_sha256"] == given
    with pytest.raises(BenchToolError, match="--library-sha256 takes 64 lowercase hex digits"):
        run_tool([*argv, "--library-sha256", "XYZ"], tmp_path / "bad.jsonl")
