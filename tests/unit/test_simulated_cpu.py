"""The perf check's simulated CPU, its pure parts: callgrind's output read into the inclusive
cost of the calls that cross into the library, the phases and their per-token figures, the
exact judgement, which instrument decides, where the instrument runs, and its matrix entry."""

from __future__ import annotations

from datetime import date

import pytest

from eliza.core.host import HostFacts, Tool, decide, simulated_cpu
from eliza.core.matrix import CycleWeights, Direction, Instrument, MetricRule, PerfWaiver
from eliza.core.perf_stats import Verdict, compare, exact, judge
from eliza.core.perf_waivers import FAILED, INCONCLUSIVE, VERIFIED, PerfPolicy, judge_with_waivers
from eliza.core.simulated_cpu import DECODE_FUNCTION, PREFILL_FUNCTION, simulated_run
from eliza.core.verify_plan import perf_identity, simulated_identity
from eliza.formats.callgrind import CallgrindError, parse_profile
from eliza.formats.matrix_yaml import parse_matrix
from tests.unit.test_matrix_loader import SOURCE, edit, only_problem
from tests.unit.test_perf_matrix import PERF as PERF_ENTRY

EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")

# A program (bench) calling into a library (lib.so), which calls libc: the shape of the
# files callgrind writes with --compress-strings=no --compress-pos=no (format version 1).
PLAIN = """# callgrind format
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
summary: 5000 900 300 40 30 20 9 8 7

ob=/tools/bench
fl=bench.cpp
fn=main
10 100 10 5
cob=/lib/lib.so
cfi=ffi.cpp
cfn=eliza_inference_llm_stream_next
calls=4 20
11 2000 400 100 10 10 5 3 2 1
cob=/lib/lib.so
cfn=eliza_inference_llm_stream_prefill
calls=2 30
12 600 100 50 4 4 2 1 1 1
cob=/lib/lib.so
cfn=eliza_inference_create
calls=1 40
13 1500 300 100 20 10 10 4 3 2
cfn=helper
calls=3 50
14 77 1 1

ob=/lib/lib.so
fl=ffi.cpp
fn=eliza_inference_llm_stream_next
20 1000 200 50
cob=/lib/libc.so
cfn=memcpy
calls=5 1
21 1000 200 50 3 3 1 1 1 1
cfn=eliza_inference_llm_stream_prefill
calls=1 30
22 9 9 9
"""

# The same calls with callgrind's default name compression: "(n) name" defines n, "(n)" reuses it.
COMPRESSED = """events: Ir I1mr D1mr D1mw ILmr DLmr DLmw
ob=(1) /tools/bench
fn=(1) main
1 10
cob=(2) /lib/lib.so
cfn=(2) eliza_inference_llm_stream_next
calls=1 0
1 300 1 2 3 1 1 1
fn=(1)
cob=(2)
cfn=(2)
calls=2 0
+1 700 1 1 1 0 0 0
fn=(3) (below main)
1 5
totals: 1020 2 3 4 1 1 1
"""


def test_the_calls_from_another_object_are_summed_per_callee_with_their_counts() -> None:
    profile = parse_profile(PLAIN.splitlines(keepends=True), "plain.out")
    assert profile.creator == "callgrind-3.19.0"
    assert profile.events == EVENTS
    assert profile.totals["Ir"] == 5000 and profile.totals["DLmw"] == 7
    assert profile.inclusive(DECODE_FUNCTION)["Ir"] == 2000
    assert profile.crossing_calls[DECODE_FUNCTION] == 4
    # next() calling prefill inside the library is the library's own business: only the
    # program's call counts.
    assert profile.inclusive(PREFILL_FUNCTION)["Ir"] == 600
    assert profile.crossing_calls[PREFILL_FUNCTION] == 2
    assert profile.inclusive("eliza_inference_create")["I1mr"] == 20
    assert "helper" not in profile.crossing  # a call within the program's own object
    assert profile.inclusive("memcpy")["Ir"] == 1000  # the library into libc crosses too
    assert profile.inclusive("never_called") == dict.fromkeys(EVENTS, 0)


def test_compressed_names_relative_positions_and_a_totals_line_read_the_same() -> None:
    profile = parse_profile(COMPRESSED.splitlines(), "compressed.out")
    decode = profile.inclusive(DECODE_FUNCTION)
    assert (decode["Ir"], decode["D1mr"], decode["ILmr"]) == (300 + 700, 2 + 1, 1)
    assert profile.crossing_calls[DECODE_FUNCTION] == 3
    assert profile.totals["Ir"] == 1020


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("hello\n", "before any 'events:' line (is this a callgrind output file?)"),
        ("events: Ir\nfn=main\n1 2 3\n", "2 counts for 1 events"),
        ("events: Ir\nfn=main\ncalls=1 0\n1 2\n", "calls= without a cfn="),
        ("events: Ir\nfn=(7)\n1 2\n", "name id (7) used before it was defined"),
        ("# callgrind format\n", "no 'events:' line"),
    ],
)
def test_what_is_not_callgrind_output_is_named_with_its_line(text: str, said: str) -> None:
    with pytest.raises(CallgrindError, match=r"bad\.out") as raised:
        parse_profile(text.splitlines(), "bad.out")
    assert said in str(raised.value)


WEIGHTS = CycleWeights(l1_miss=10, ll_miss=100)


def test_the_figures_divide_each_phase_by_its_tokens_and_weigh_the_misses() -> None:
    profile = parse_profile(PLAIN.splitlines(), "plain.out")
    run = simulated_run(
        profile.totals,
        {f: profile.inclusive(f) for f in (DECODE_FUNCTION, PREFILL_FUNCTION)},
        prompt_tokens=6,
        decoded_tokens=8,
        source="plain.out",
    )
    decode_cycles = 2000 + 10 * (10 + 10 + 5) + 100 * (3 + 2 + 1)
    prefill_cycles = 600 + 10 * (4 + 4 + 2) + 100 * (1 + 1 + 1)
    assert run.figures(WEIGHTS) == {
        "decode_instructions_per_token": 2000 / 8,
        "decode_cycles_per_token": decode_cycles / 8,
        "prefill_instructions_per_token": 600 / 6,
        "prefill_cycles_per_token": prefill_cycles / 6,
    }
    assert run.total.instructions == 5000
    assert run.as_dict(WEIGHTS)["decoded_tokens"] == 8


def test_a_run_without_tokens_or_without_the_calls_has_no_figures() -> None:
    profile = parse_profile(PLAIN.splitlines(), "plain.out")
    calls = {f: profile.inclusive(f) for f in (DECODE_FUNCTION, PREFILL_FUNCTION)}
    with pytest.raises(ValueError, match="no token was decoded"):
        simulated_run(profile.totals, calls, prompt_tokens=6, decoded_tokens=0, source="x")
    with pytest.raises(ValueError, match=f"no call into {DECODE_FUNCTION}"):
        simulated_run(profile.totals, {PREFILL_FUNCTION: calls[PREFILL_FUNCTION]}, prompt_tokens=6,
                      decoded_tokens=8, source="x")  # fmt: skip
    with pytest.raises(ValueError, match="--cache-sim=yes"):
        simulated_run({"Ir": 1}, {f: {"Ir": 5} for f in calls}, prompt_tokens=1, decoded_tokens=1, source="x")


SIM_RULE = MetricRule(
    metric="decode_instructions_per_token",
    direction=Direction.LOWER,
    bound=0.05,
    min_samples=1,
    instrument=Instrument.SIMULATED,
)


def sim_row(candidate: float, reference: float = 3_800_000.0) -> dict[str, object]:
    j = judge(exact(SIM_RULE.metric, candidate, reference), SIM_RULE)
    return {**j.as_dict(), "instrument": Instrument.SIMULATED.value}


def test_an_exact_count_is_failed_beyond_the_bound_and_verified_within_never_inconclusive() -> None:
    reference = 3_800_000.0
    for factor, verdict in ((1.10, Verdict.FAILED), (1.0 + 0.049, Verdict.VERIFIED), (0.9, Verdict.VERIFIED)):
        j = judge(exact(SIM_RULE.metric, reference * factor, reference), SIM_RULE)
        assert j.verdict is verdict, (factor, j.words)
        assert j.comparison.low == j.comparison.high == pytest.approx(factor)
    failed = judge(exact(SIM_RULE.metric, reference * 1.1, reference), SIM_RULE)
    assert "exact count: 4,180,000 against 3,800,000" in failed.words and "REGRESSION" in failed.words
    with pytest.raises(ValueError, match="must be positive"):
        exact(SIM_RULE.metric, 1.0, 0.0)


WALL = MetricRule(metric="decode_tok_s", direction=Direction.HIGHER, bound=0.05)
RSS = MetricRule(metric="peak_rss_kb", direction=Direction.LOWER, bound=0.05, instrument=Instrument.MEMORY)
STEADY = [100.0, 101.0, 99.0, 100.5, 99.5]


def wall_row(
    candidate: list[float], reference: list[float] = STEADY, rule: MetricRule = WALL
) -> dict[str, object]:
    return {
        **judge(compare(rule.metric, candidate, reference), rule).as_dict(),
        "instrument": rule.instrument.value,
    }


NOISY = [60.0, 140.0, 95.0, 130.0, 70.0]  # an interval far wider than the bound: undecided
SLEEPY = [v * 0.5 for v in STEADY]  # half the speed in every round: decisive
POLICY = PerfPolicy(waivers=(), today=date(2026, 12, 3))


def test_wall_time_that_cannot_decide_leaves_the_verdict_to_the_simulated_cpu() -> None:
    undecided = wall_row(NOISY)
    assert undecided["verdict"] == INCONCLUSIVE
    alone = judge_with_waivers("linux-cpu.none", [undecided], POLICY)
    assert alone.verdict == INCONCLUSIVE and alone.decision() == "no instrument could decide"
    both = judge_with_waivers("linux-cpu.none", [sim_row(3_800_000.0), undecided], POLICY)
    assert both.verdict == VERIFIED
    assert both.decided_by == ("simulated CPU",)
    assert both.decision().startswith("simulated CPU (wall time could not decide: decode_tok_s ratio")


def test_a_decisive_wall_time_regression_still_fails_and_says_so() -> None:
    state = judge_with_waivers("linux-cpu.none", [sim_row(3_800_000.0), wall_row(SLEEPY)], POLICY)
    assert state.verdict == FAILED
    assert state.decided_by == ("wall time",)
    assert "decode_tok_s" in state.words


def test_more_work_per_token_fails_on_the_simulated_cpu_whatever_wall_time_says() -> None:
    state = judge_with_waivers("linux-cpu.none", [sim_row(3_800_000.0 * 1.1), wall_row(NOISY)], POLICY)
    assert state.verdict == FAILED and state.decided_by == ("simulated CPU",)


def test_peak_rss_that_cannot_decide_is_not_settled_by_the_simulated_cpu() -> None:
    rss = wall_row([30_000.0, 50_000.0, 36_000.0, 44_000.0, 33_000.0], [36_000.0] * 5, RSS)
    assert rss["verdict"] == INCONCLUSIVE
    state = judge_with_waivers("linux-cpu.none", [sim_row(3_800_000.0), rss], POLICY)
    assert state.verdict == INCONCLUSIVE


def test_a_record_made_before_instruments_were_named_reads_as_wall_time_and_memory() -> None:
    old = {k: v for k, v in wall_row(NOISY).items() if k != "instrument"}
    assert judge_with_waivers("linux-cpu.none", [sim_row(3_800_000.0), old], POLICY).verdict == VERIFIED
    assert judge_with_waivers("linux-cpu.none", [old], POLICY).verdict == INCONCLUSIVE


def test_a_waiver_accepts_a_simulated_regression_up_to_its_bound() -> None:
    waiver = PerfWaiver(
        cells="linux-cpu.*",
        metric=SIM_RULE.metric,
        bound=0.15,
        reason="the KV cache is checked per token",
        expires=date(2027, 1, 31),
    )
    policy = PerfPolicy(waivers=(waiver,), today=date(2026, 12, 3))
    accepted = judge_with_waivers("linux-cpu.none", [sim_row(3_800_000.0 * 1.1)], policy)
    assert accepted.verdict == VERIFIED and "the KV cache is checked per token" in accepted.words
    beyond = judge_with_waivers("linux-cpu.none", [sim_row(3_800_000.0 * 1.2)], policy)
    assert beyond.verdict == FAILED and "beyond even the waiver's bound 0.15" in beyond.words


# -- where it runs


def facts(**kw: object) -> HostFacts:
    base: dict[str, object] = {
        "os": "linux",
        "arch": "x86_64",
        "cpu_flags": frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave", "cx16",
                                "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}),
        "programs": {"valgrind": Tool(name="valgrind", path="/usr/bin/valgrind", version="3.19.0")},
    }  # fmt: skip
    return HostFacts(**(base | kw))  # type: ignore[arg-type]


def platforms() -> dict[str, object]:
    from eliza.app.project import load_project_matrix

    return {p.id: p for p in load_project_matrix().platforms}


def test_the_simulator_runs_where_valgrind_runs_the_cells_binaries_natively() -> None:
    plats = platforms()
    cpu, cuda, arm = plats["linux-cpu"], plats["linux-cuda"], plats["linux-arm64"]
    assert simulated_cpu(facts(), cpu) == ("valgrind 3.19.0", "valgrind 3.19.0 at /usr/bin/valgrind")  # type: ignore[arg-type]
    tool, why = simulated_cpu(facts(), cuda)  # type: ignore[arg-type]
    assert tool == "" and "do not see it" in why
    tool, why = simulated_cpu(facts(programs={}), cpu)  # type: ignore[arg-type]
    assert tool == "" and "valgrind is not on PATH" in why and "ci/setup.sh" in why
    tool, why = simulated_cpu(facts(os="macos", arch="arm64"), cpu)  # type: ignore[arg-type]
    assert tool == "" and "macos/arm64" in why
    # linux-arm64 on an x86-64 host runs under qemu: no simulator there.
    can = decide(facts(programs={"qemu-aarch64": Tool(name="qemu-aarch64", path="/usr/bin/qemu-aarch64"),
                                 "aarch64-linux-gnu-g++": Tool(name="g++", path="/usr/bin/x")}), arm)  # type: ignore[arg-type]  # fmt: skip
    assert can.simulator == ""
    assert decide(facts(), cpu).simulator == "valgrind 3.19.0"  # type: ignore[arg-type]


# -- the matrix entry and the fingerprint

SIMULATED = """    simulated:
      max_tokens: 8
      caches:
        I1: {size: 32768, ways: 8, line: 64}
        D1: {size: 32768, ways: 8, line: 64}
        LL: {size: 8388608, ways: 16, line: 64}
      cycle_weights: {l1_miss: 10, ll_miss: 100}
      metrics:
        decode_instructions_per_token: {better: lower, bound: 0.05}
"""
# test_perf_matrix's perf entry (decode tok/s, peak RSS), before its closing "cells:".
PERF = PERF_ENTRY.removesuffix("cells:\n")


def test_the_simulated_entry_is_read_and_its_identity_changes_with_what_the_counts_depend_on() -> None:
    m = parse_matrix(edit("cells:\n", PERF + SIMULATED + "cells:\n"), SOURCE)
    check = m.check("perf")
    assert check.simulated is not None
    (rule,) = check.simulated.metrics
    assert (rule.metric, rule.threshold, rule.instrument) == (
        "decode_instructions_per_token",
        1.05,
        Instrument.SIMULATED,
    )
    assert [r.instrument for r in check.metrics] == [Instrument.WALL_TIME, Instrument.MEMORY]
    argv = check.simulated.tool_argv("/tmp/x.out")
    assert argv[:3] == ["valgrind", "--tool=callgrind", "--cache-sim=yes"]
    assert "--instr-atstart=no" in argv  # the tool's client request starts the counting
    assert "--LL=8388608,16,64" in argv and "--callgrind-out-file=/tmp/x.out" in argv
    here = simulated_identity(check, "valgrind 3.19.0")
    assert simulated_identity(check, "") == "none"
    assert here != simulated_identity(check, "valgrind 3.22.0")
    assert perf_identity("abc", 5, here) != perf_identity("abc", 5, "none") != perf_identity("abc", 5)


def test_a_backend_check_may_not_count_instructions_and_a_waiver_may_name_a_simulated_metric() -> None:
    backend = edit(
        "cells:\n",
        PERF.replace("kind: perf\n", "kind: perf\n    subject: backend\n") + SIMULATED + "cells:\n",
    )
    assert "not comparable" in str(only_problem(backend))
    waived = edit("cells:\n", PERF + SIMULATED + "cells:\n") + (
        "perf_waivers:\n  - {cells: '*', metric: decode_instructions_per_token, bound: 0.2, reason: r, "
        "expires: 2027-01-31}\n"
    )
    (waiver,) = parse_matrix(waived, SOURCE).perf_waivers
    assert waiver.metric == "decode_instructions_per_token"


def test_the_project_matrix_sizes_the_simulated_run_per_bundle() -> None:
    from eliza.app.project import load_project_matrix

    m = load_project_matrix()
    tiny, gemma = m.check("perf"), m.check("perf.gemma3-270m")
    assert tiny.simulated is not None and gemma.simulated is not None
    gemma_tokens = next(b for b in m.bundles if b.id == "gemma3-270m").bench.perf_simulated_max_tokens
    assert gemma.simulated.max_tokens == gemma_tokens != tiny.simulated.max_tokens
    assert m.check("backend-perf").simulated is None
