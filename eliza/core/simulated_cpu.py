"""The perf check's simulated CPU: instructions and an estimated cycle count of the library's
own work, per decoded token and per prompt token, counted by valgrind's callgrind with its
cache simulation (cachegrind's simulator) on a declared cache geometry.

Why a simulator: wall time on a shared or small machine is noise the rounds may not beat;
the instructions a program executes, and the misses of a simulated cache of fixed geometry,
are the same on every run of the same binary on the same inputs, whatever else the host is
doing. One run per side then decides: the ratio is exact (eliza.core.perf_stats.exact).

The phases come from the call graph, not from timing: the inclusive cost of every call the
bench tool makes into the library's `eliza_inference_llm_stream_next` is decode work (divided
by the tokens those calls returned), into `_prefill` prefill work (divided by the prompt
tokens). Counting starts once the context exists (the tool's client request; callgrind runs
with --instr-atstart=no): the process start, the library's and the model's load run
uncounted at valgrind's plain speed, which halves a run. What is counted beyond the two
phases (tokenizing, opening and closing streams, writing records) is in the total only.

The cycle estimate: instructions + l1_miss x (L1 misses, instruction and data) + ll_miss x
(last-level misses), the cache terms of KCachegrind's cycle estimation (weights 10 and 100,
declared in matrix.yaml). It is a model, not a measurement: it ranks a change that adds
memory traffic above one that adds only arithmetic, it knows nothing of branch prediction,
prefetchers, SIMD port pressure or frequency, and it cannot see time spent waiting (sleeps,
locks, system calls): that is the wall-time instrument's part (docs/perf.md).

Pure: the counts come in, nothing is run or read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eliza.core.matrix import CycleWeights

__all__ = [
    "DECODE_FUNCTION",
    "METRICS",
    "PREFILL_FUNCTION",
    "PhaseCost",
    "SimulatedRun",
    "simulated_run",
]

# The C ABI entry points whose inclusive cost is a phase (native/include/eliza-inference-ffi.h).
DECODE_FUNCTION = "eliza_inference_llm_stream_next"
PREFILL_FUNCTION = "eliza_inference_llm_stream_prefill"

# metric -> (phase, figure): what the simulated instrument can judge.
METRICS: Mapping[str, tuple[str, str]] = {
    "decode_instructions_per_token": ("decode", "instructions"),
    "decode_cycles_per_token": ("decode", "cycles"),
    "prefill_instructions_per_token": ("prefill", "instructions"),
    "prefill_cycles_per_token": ("prefill", "cycles"),
}

# callgrind's event names with --cache-sim=yes
_L1_MISSES = ("I1mr", "D1mr", "D1mw")
_LL_MISSES = ("ILmr", "DLmr", "DLmw")


@dataclass(frozen=True, kw_only=True)
class PhaseCost:
    instructions: int
    l1_misses: int
    ll_misses: int

    @classmethod
    def of(cls, events: Mapping[str, int]) -> PhaseCost:
        missing = [e for e in ("Ir", *_L1_MISSES, *_LL_MISSES) if e not in events]
        if missing:
            raise ValueError(
                f"the profile has no {', '.join(missing)} counts: it was not made with --cache-sim=yes"
            )
        return cls(
            instructions=int(events["Ir"]),
            l1_misses=sum(int(events[e]) for e in _L1_MISSES),
            ll_misses=sum(int(events[e]) for e in _LL_MISSES),
        )

    def cycles(self, weights: CycleWeights) -> int:
        return self.instructions + weights.l1_miss * self.l1_misses + weights.ll_miss * self.ll_misses

    def as_dict(self, weights: CycleWeights) -> dict[str, int]:
        return {
            "instructions": self.instructions,
            "l1_misses": self.l1_misses,
            "ll_misses": self.ll_misses,
            "cycles": self.cycles(weights),
        }


@dataclass(frozen=True, kw_only=True)
class SimulatedRun:
    """One side's counts: all that was counted (from the context's creation on), and the two
    phases judged."""

    total: PhaseCost
    prefill: PhaseCost
    decode: PhaseCost
    prompt_tokens: int  # the prompt tokens the prefill calls were given
    decoded_tokens: int  # the tokens the next calls returned

    def figures(self, weights: CycleWeights) -> dict[str, float]:
        """Every metric of METRICS: a phase's instructions or cycles per token."""
        per = {"decode": (self.decode, self.decoded_tokens), "prefill": (self.prefill, self.prompt_tokens)}
        out: dict[str, float] = {}
        for metric, (phase, figure) in METRICS.items():
            cost, tokens = per[phase]
            value = cost.instructions if figure == "instructions" else cost.cycles(weights)
            out[metric] = value / tokens
        return out

    def as_dict(self, weights: CycleWeights) -> dict[str, object]:
        return {
            "total": self.total.as_dict(weights),
            "prefill": self.prefill.as_dict(weights),
            "decode": self.decode.as_dict(weights),
            "prompt_tokens": self.prompt_tokens,
            "decoded_tokens": self.decoded_tokens,
            "figures": {k: round(v, 3) for k, v in self.figures(weights).items()},
        }


def simulated_run(
    totals: Mapping[str, int],
    calls: Mapping[str, Mapping[str, int]],
    *,
    prompt_tokens: int,
    decoded_tokens: int,
    source: str,
) -> SimulatedRun:
    """A side's counts from a profile's totals and the inclusive cost of the calls into each
    ABI function (`calls`: function -> event -> count). ValueError, naming `source`, when a
    phase is missing or has no tokens to divide by."""
    if decoded_tokens <= 0:
        raise ValueError(f"{source}: no token was decoded: no per-token figure")
    if prompt_tokens <= 0:
        raise ValueError(f"{source}: no prompt token was prefilled: no per-token figure")
    for function in (DECODE_FUNCTION, PREFILL_FUNCTION):
        if not calls.get(function, {}).get("Ir"):
            raise ValueError(
                f"{source}: no call into {function} was counted (was the bench tool run under "
                "callgrind, does the library export it, and was the tool built with valgrind's "
                "client requests, valgrind/callgrind.h? Install valgrind and rebuild the cell)"
            )
    return SimulatedRun(
        total=PhaseCost.of(totals),
        prefill=PhaseCost.of(calls[PREFILL_FUNCTION]),
        decode=PhaseCost.of(calls[DECODE_FUNCTION]),
        prompt_tokens=prompt_tokens,
        decoded_tokens=decoded_tokens,
    )
