"""The perf check's simulated-CPU instrument: one run of the cell's bench tool per side
under callgrind (valgrind) with a fixed cache geometry, read into counts per decoded and per
prompt token (eliza.core.simulated_cpu). The counts of the same bytes and inputs are the same
on every run, so a side counted once in a verify is not counted again for another cell, and
counts kept in the cache (counts_cache) are read back by content, whichever checkout asks."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from eliza.adapters.bench_tools import BenchSettings, bench_argv, run_tool
from eliza.app.services.bench_options import BenchOptions
from eliza.app.services.counts_cache import FOLDER as COUNTS_FOLDER
from eliza.app.services.counts_cache import CountsCache
from eliza.app.services.run import Run
from eliza.core.matrix import Cell, SimulatedInstrument
from eliza.core.simulated_cpu import DECODE_FUNCTION, PREFILL_FUNCTION, SimulatedRun, simulated_run
from eliza.formats.callgrind import load_profile
from eliza.formats.files import tree_hash


class CountedSide(Protocol):
    """One side the simulator runs: a library, and what the bench tool's environment adds."""

    @property
    def library(self) -> Path: ...

    @property
    def env(self) -> Mapping[str, str]: ...


class CountedComparison(Protocol):
    """What a perf series gives the simulator: its two sides, its bench options (bundle,
    prompts) and its output folder."""

    @property
    def candidate(self) -> CountedSide: ...

    @property
    def reference(self) -> CountedSide: ...

    @property
    def opts(self) -> BenchOptions: ...

    @property
    def out(self) -> Path: ...


@dataclass(frozen=True, kw_only=True)
class Simulated:
    """Both sides' simulated-CPU counts of one comparison."""

    candidate: SimulatedRun
    reference: SimulatedRun
    instrument: SimulatedInstrument
    simulator: str  # "valgrind 3.19.0"
    reference_shared: bool  # the reference's counts were measured for another cell of this run
    # the sides whose counts were read back from the cache: the same bytes counted by an earlier run
    cached: tuple[str, ...] = ()

    def figures(self) -> tuple[dict[str, float], dict[str, float]]:
        weights = self.instrument.weights
        return self.candidate.figures(weights), self.reference.figures(weights)

    def as_dict(self) -> dict[str, object]:
        weights = self.instrument.weights
        return {
            "simulator": self.simulator,
            "how": self.instrument.describe(),
            "max_tokens": self.instrument.max_tokens,
            "candidate": self.candidate.as_dict(weights),
            "reference": self.reference.as_dict(weights),
            "reference_shared": self.reference_shared,
            "cached": list(self.cached),
        }


# The code that runs the simulator and reads its counts: kept counts (counts_cache) are
# read back only while it is the same. The perf check's rounds and judgement live in
# perf.py, so a change there counts nothing again.
SIMULATED_COUNT_INPUTS = (
    "eliza/app/checks/simulated.py",
    "eliza/adapters/bench_tools.py",
    "eliza/app/services/counts_cache.py",
    "eliza/core/simulated_cpu.py",
    "eliza/formats/callgrind.py",
)


def simulated_key(
    side: CountedSide,
    settings: BenchSettings,
    *,
    tool_sha256: str,
    library_sha256: str,
    bundle: str,
    prompts_sha256: str,
    identity: str,
    code: str,
) -> str:
    """Everything a side's simulated counts depend on, by content, never by path (the same
    bytes in another checkout are the same run): the bench tool and the library, the
    bundle's files and the prompts, the other bench settings, the environment the side adds,
    the instrument's identity (simulator version, caches, weights) and the code that runs
    and reads the simulator."""
    said = json.dumps(
        {
            "tool": tool_sha256,
            "library": library_sha256,
            "bundle": bundle,
            "prompts": prompts_sha256,
            "settings": _flags_without_paths(settings),
            "env": dict(sorted(side.env.items())),
            "instrument": identity,
            "code": code,
        },
        sort_keys=True,
    )
    return hashlib.sha256(said.encode()).hexdigest()


def _flags_without_paths(settings: BenchSettings) -> list[str]:
    """The bench flags but the bundle's and the prompts' paths, which the key names by content."""
    flags = settings.flags()
    by_path = {"--bundle", "--prompts"}
    return [f for i, f in enumerate(flags) if f not in by_path and (i == 0 or flags[i - 1] not in by_path)]


def _simulate(
    tool_dir: Path,
    side: CountedSide,
    settings: BenchSettings,
    instrument: SimulatedInstrument,
    out: Path,
    name: str,
    library_sha256: str,
    threads: int,
) -> SimulatedRun:
    """One run of the bench tool under callgrind (natively: the plan gives the simulated
    instrument only to cells whose binaries run here) and its counts per phase."""
    profile = out / f"{name}.callgrind.out"
    records = out / f"{name}.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    part = profile.with_name(profile.name + ".part")
    argv = [
        *instrument.tool_argv(str(part)),
        *bench_argv(tool_dir, side.library, settings, f"{name} (simulated CPU)", records),
        "--library-sha256",
        library_sha256,
    ]
    try:
        run = run_tool(argv, records, {"ELIZA_N_THREADS": str(threads), **side.env})
        part.replace(profile)
    finally:
        part.unlink(missing_ok=True)
    counts = load_profile(profile)
    return simulated_run(
        counts.totals,
        {fn: counts.inclusive(fn) for fn in (DECODE_FUNCTION, PREFILL_FUNCTION)},
        prompt_tokens=sum(len(p.prompt_tokens) for p in run.prompts),
        decoded_tokens=sum(len(p.tokens) for p in run.prompts),
        source=str(profile),
    )


def measure_simulated(
    cell: Cell,
    c: CountedComparison,
    instrument: SimulatedInstrument,
    simulator: str,
    threads: int,
    evidence: Run,
) -> Simulated:
    """Candidate and reference under the simulator, one run each with the same bundle,
    prompts, token budget and threads. A side whose counts this run already has (the same
    reference library for every cell of a platform) is not run again, nor one whose counts
    the cache keeps from an earlier run of the same bytes (counts_cache)."""
    settings = replace(c.opts.settings, max_tokens=instrument.max_tokens, repeats=1)
    tool_dir = c.candidate.library.parent
    hashes = evidence.file_hashes
    kept = CountsCache(evidence.project.cache / COUNTS_FOLDER)
    common = {
        "tool_sha256": hashes.sha256(tool_dir / "e2e_loop_bench"),
        "bundle": tree_hash(settings.bundle, ["."], file_sha256=hashes.sha256),
        "prompts_sha256": hashes.sha256(settings.prompts),
        "identity": instrument.identity(simulator),
        "code": tree_hash(evidence.project.repo, SIMULATED_COUNT_INPUTS),
    }
    out = c.out / "simulated"
    measured: dict[str, SimulatedRun] = {}
    shared = False
    cached: list[str] = []
    for name, side in (("candidate", c.candidate), ("reference", c.reference)):
        library_sha = hashes.sha256(side.library)
        key = simulated_key(side, settings, library_sha256=library_sha, **common)
        known = evidence.simulated_counts.get(key)
        if known is not None:
            shared = shared or name == "reference"
        else:
            known = kept.load(key, out, name)
            if known is not None:
                cached.append(name)
            else:
                known = _simulate(tool_dir, side, settings, instrument, out, name, library_sha, threads)
                kept.save(key, known, out / f"{name}.callgrind.out", out / f"{name}.jsonl")
            evidence.simulated_counts[key] = known
        measured[name] = known
    said = "the reference's counts measured once for this run's cells" if shared else "both sides run"
    if cached:
        said = f"{' and '.join(cached)} counts read back from the cache (the same bytes counted before)"
    evidence.detail(f"{cell.id}: perf: simulated CPU ({simulator}), {said}")
    return Simulated(
        candidate=measured["candidate"],
        reference=measured["reference"],
        instrument=instrument,
        simulator=simulator,
        reference_shared=shared,
        cached=tuple(cached),
    )
