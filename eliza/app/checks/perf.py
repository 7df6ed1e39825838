"""The perf check: two instruments comparing a cell's library with a reference library (the
declared baseline's build, or --perf-reference REF|DIR) through the cell's own
e2e_loop_bench, with the same bundle, prompts and decode threads:

- the simulated CPU (where the check declares it and valgrind runs the cell's binaries
  natively): one run per side under callgrind, its counts per decoded and per prompt token
  (eliza.app.checks.simulated), judged on the exact ratio;
- wall time: interleaved rounds, each metric judged by its matrix rule with statistics
  (eliza.core.perf_stats).

Then the matrix's waivers, and which instrument decided (eliza.core.perf_waivers)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from eliza.adapters.bench_tools import BenchSettings, BenchToolError, bench_argv, run_tool
from eliza.adapters.own_runners import OwnRunner, OwnRunnerError, own_runner, runtime_repeats
from eliza.adapters.own_runners.common import read_prompts
from eliza.app.checks.job import Job
from eliza.app.checks.runtimes import backends_of
from eliza.app.checks.simulated import Simulated, measure_simulated
from eliza.app.services.bench_options import BenchOptions
from eliza.app.services.bundle import ensure_runtime_bundle, weight_cache_state
from eliza.app.services.clock import Stopwatch, now
from eliza.app.services.run import Run
from eliza.core.bench_records import BenchRun
from eliza.core.evidence import Status
from eliza.core.matrix import Cell, Check, Direction, MetricRule
from eliza.core.outcome import CheckOutcome, outcome
from eliza.core.perf_stats import Judgement, Verdict, compare, compare_paired, exact, judge
from eliza.core.perf_waivers import PerfPolicy, judge_with_waivers, settled
from eliza.core.verify_plan import BACKEND_PERF_REFERENCE, perf_identity, simulated_identity
from eliza.core.verify_plan import Run as PlanRun
from eliza.formats.files import atomic_write_text, sha256_file

Log = Callable[[str], None]


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def run_metrics(run: BenchRun) -> dict[str, float]:
    """What one bench run contributes to each metric: one sample per round and side. Per
    prompt the best of its repeats (the fastest decode, the shortest prefill and first
    token: other processes of a busy machine only ever slow a repeat down), then the median
    over prompts; the steady decode rate (decode_step_tok_s: one token over the median
    step after the first, from the best repeat); the bench process's own peak RSS (its
    high-water mark, never the parent's: see docs/perf.md)."""
    decode = [max(p.decode_tok_s) for p in run.prompts if len(p.tokens) > 1 and p.decode_tok_s]
    prefill = [
        len(p.prompt_tokens) / (min(p.prefill_ms) / 1000.0)
        for p in run.prompts
        if p.prefill_ms and min(p.prefill_ms) > 0
    ]
    first = [min(p.first_token_ms) for p in run.prompts if p.first_token_ms]
    steady = [
        1000.0 / min(p.decode_step_ms) for p in run.prompts if p.decode_step_ms and min(p.decode_step_ms) > 0
    ]
    return {
        "decode_tok_s": _median(decode),
        "decode_step_tok_s": _median(steady),
        "prefill_tok_s": _median(prefill),
        "first_token_ms": _median(first),
        "peak_rss_kb": float(max((p.peak_rss_kb for p in run.prompts), default=0)),
    }


def perf_settings(opts: BenchOptions) -> BenchSettings:
    return replace(opts.settings, max_tokens=opts.perf_max_tokens, repeats=opts.perf_repeats)


@dataclass
class Samples:
    """Rounds' samples of each side, per metric, and where the tools read peak RSS."""

    candidate: dict[str, list[float]] = field(default_factory=dict)
    reference: dict[str, list[float]] = field(default_factory=dict)
    peak_rss_sources: set[str] = field(default_factory=set)
    # the candidate runtime's weight cache as each of its runs started ("cold", "warm"), in
    # order; empty when the runtime keeps none
    weight_cache: list[str] = field(default_factory=list)
    against: str = ""  # what the reference side was, in words, where it is not the series' own
    # the candidate's latest run: its prompt ids can feed an own runner's first round
    last_candidate: BenchRun | None = field(default=None, compare=False)
    sides: str = ""  # how an own runner's rounds ran the two sides ("in turn", "side by side", ...)

    def extend(self, more: Samples) -> None:
        for mine, theirs in ((self.candidate, more.candidate), (self.reference, more.reference)):
            for name, values in theirs.items():
                mine.setdefault(name, []).extend(values)
        self.peak_rss_sources |= more.peak_rss_sources
        self.weight_cache += more.weight_cache
        self.last_candidate = more.last_candidate or self.last_candidate


@dataclass(frozen=True)
class Side:
    """One side of a round: a library, and what the bench tool's environment adds (the
    backend a stream is hard-selected to)."""

    library: Path
    env: Mapping[str, str] = field(default_factory=dict)
    # the state of the side's runtime weight cache, read before each of its runs
    weight_cache: Callable[[], str | None] | None = field(default=None, compare=False)


def measure(
    cell: Cell,
    candidate: Side,
    reference: Side,
    opts: BenchOptions,
    rounds: int,
    log: Log,
    *,
    first: int = 0,
    out: Path | None = None,
) -> Samples:
    """Rounds of candidate and reference, AB then BA alternately, so warm-up and drift
    favour neither; the cell's bench tool drives both sides, where the platform's binaries
    run (here, or on its lab device: a device's timings are its own). Never both at once:
    the prefill and the first token are over within tens of milliseconds of a process's
    start, and two sides that start together reach them at different moments of each
    other's work (Gemma's prefill read 0.95 in every round of a run at once, 1.00 in turn)."""
    out = out or opts.out_dir / cell.platform.id / cell.key / "perf"
    (samples,) = _rounds(cell, [(candidate, out)], reference, out, opts, rounds, first)
    log(f"{cell.id}: perf: {rounds} rounds of candidate and reference")
    return samples


def measure_shared(
    cell: Cell,
    candidates: Sequence[tuple[Side, Path]],
    reference: Side,
    opts: BenchOptions,
    rounds: int,
    log: Log,
    *,
    first: int = 0,
    reference_out: Path,
) -> list[Samples]:
    """Rounds of several candidates against one reference (the backends of one cell, each
    against the same llama.cpp path): each round runs every candidate once and the
    reference once, the order rotating from round to round so warm-up and drift favour no
    side; every candidate's series shares the reference's samples."""
    taken = _rounds(cell, candidates, reference, reference_out, opts, rounds, first)
    log(f"{cell.id}: perf: {rounds} rounds of {len(candidates)} candidates and their shared reference")
    return taken


def _rounds(
    cell: Cell,
    candidates: Sequence[tuple[Side, Path]],
    reference: Side,
    reference_out: Path,
    opts: BenchOptions,
    rounds: int,
    first: int,
) -> list[Samples]:
    """The rounds of `measure` and `measure_shared`: the sides in turn, candidates first,
    the order rotated by one each round (with one candidate: AB, then BA). The cell's own
    bench tool (the first candidate's folder) drives every side."""
    settings = perf_settings(opts)
    tool_dir = candidates[0][0].library.parent
    sides = [*((k, side, out) for k, (side, out) in enumerate(candidates)), (-1, reference, reference_out)]
    taken: dict[int, dict[str, list[float]]] = {k: {} for k, _, _ in sides}
    sources: dict[int, set[str]] = {k: set() for k, _, _ in sides}
    caches: dict[int, list[str]] = {k: [] for k, _, _ in sides}
    latest: dict[int, BenchRun] = {}
    for i in range(first, first + rounds):
        turn = i % len(sides)
        for k, side, out in sides[turn:] + sides[:turn]:
            name = "reference" if k < 0 else "candidate"
            path = out / f"{name}-{i}.jsonl"
            argv = bench_argv(tool_dir, side.library, settings, f"{cell.id} {name}", path)
            env = {"ELIZA_N_THREADS": str(opts.overhead_threads), **side.env}
            state = side.weight_cache() if side.weight_cache is not None else None
            if state is not None:
                caches[k].append(state)
            done = latest[k] = run_tool(argv, path, env, runner=opts.runner)
            sources[k].add(done.peak_rss_source)
            for metric, value in run_metrics(done).items():
                taken[k].setdefault(metric, []).append(value)
    return [
        Samples(
            candidate=taken[k],
            reference={metric: list(values) for metric, values in taken[-1].items()},
            peak_rss_sources=sources[k] | sources[-1],
            weight_cache=caches[k],
            last_candidate=latest.get(k),
        )
        for k in range(len(candidates))
    ]


def measure_series(
    cell: Cell, series: Sequence[Comparison], rounds: int, log: Log, *, first: int = 0
) -> list[Samples]:
    """Each series' rounds; series that compare with the same reference, with the same
    settings, share its rounds (measure_shared) instead of each running it again."""
    if len(series) > 1 and all(
        c.reference == series[0].reference and c.opts == series[0].opts for c in series
    ):
        return measure_shared(
            cell,
            [(c.candidate, c.out) for c in series],
            series[0].reference,
            series[0].opts,
            rounds,
            log,
            first=first,
            reference_out=series[0].out.parent / "reference",
        )
    return [
        measure(cell, c.candidate, c.reference, c.opts, rounds, log, first=first, out=c.out) for c in series
    ]


# The first look: three rounds a side, the fewest the perf rule decides on (MetricRule's
# min_samples), after which a series whose every metric already lies wholly inside its
# bound (or an accepting waiver's) stops (eliza.core.perf_waivers.settled says how rarely
# that stops a build at its bound); the rest run the declared rounds. Measured on a fresh clone's warm
# verify (2026-12-07, AMD EPYC 2-core): every tiny-bundle series of the four linux-cpu cells
# lay wholly inside its bounds after three of its five rounds.
FIRST_LOOK_ROUNDS = 3


def _rounds_in(samples: Samples) -> int:
    """The rounds a series' samples hold (one sample per round and metric)."""
    return max((len(values) for values in samples.candidate.values()), default=0)


def series_judgements(check: Check, samples: Samples) -> list[Judgement]:
    """A series' samples against the reference's, each metric judged by the check's rule."""
    return [
        judge(compare(rule.metric, samples.candidate[rule.metric], samples.reference[rule.metric]), rule)
        for rule in check.metrics
    ]


def wall_rows(check: Check, label: str, samples: Samples) -> list[dict[str, object]]:
    """A series' metrics judged by the check's rules, as the record writes them, but with
    the interval unrounded (a bound is not met by rounding to it)."""
    return [
        {
            **j.as_dict(),
            "ci_low": j.comparison.low,
            "ci_high": j.comparison.high,
            **({"backend": label} if label else {}),
        }
        for j in series_judgements(check, samples)
    ]


def measure_until_settled(
    cell: Cell,
    check: Check,
    series: Sequence[Comparison],
    rounds: int,
    policy: PerfPolicy,
    log: Log,
) -> tuple[list[Samples], set[str]]:
    """(each series' samples, the labels of those that settled at the first look): the
    first FIRST_LOOK_ROUNDS rounds of every series, then the declared rest of those that
    did not settle (eliza.core.perf_waivers.settled)."""
    look = min(rounds, max([FIRST_LOOK_ROUNDS, *(rule.min_samples for rule in check.metrics)]))
    taken = measure_series(cell, series, look, log)
    if look >= rounds:
        return taken, set()
    done = {
        c.label
        for c, samples in zip(series, taken, strict=True)
        if settled(cell.id, wall_rows(check, c.label, samples), policy, check.id, fewest=look)
    }
    rest = [(k, c) for k, c in enumerate(series) if c.label not in done]
    if rest:
        more = measure_series(cell, [c for _, c in rest], rounds - look, log, first=look)
        for (k, _), extra in zip(rest, more, strict=True):
            taken[k].extend(extra)
    if done:
        named = ", ".join(sorted(label or "candidate" for label in done))
        log(f"{cell.id}: perf: settled after {look} of {rounds} rounds: {named}")
    return taken, done


# Body / own runner: a backend's body in the library against its runtime driven by its own
# API, on the same artifact, threads, prompt and greedy tokens (eliza.adapters.own_runners).
# A body slower than its own runtime beyond 5 % is the body's cost and fails the check on any
# host, whatever a waiver accepts of the runtime against llama.cpp (no waiver names these).
# Decode tokens per own-runner run where the bundle declares none. 16 were tried on the
# tiny bundle (2026-12-07): an MLX round at once took half its 2.7 s, but in one of three
# fresh clones LiteRT-LM's own_runner_prefill was undecided after six paired rounds on both
# LiteRT-LM cells (1.15, 95% CI 0.85..1.29), so the tiny bundle keeps 64.
OWN_RUNNER_MAX_TOKENS = 64
# Paired rounds (compare_paired) of a body and its own runner: each round's ratio moved by
# about 1-2 % here (LiteRT-LM and MLX on Gemma and the tiny bundle, 2026-12-07), so three
# rounds decide a body within a few percent of its runtime or a tenth of a step beyond it
# (planted: p = 0.003-0.004 after four), and one nearer the 5 % bound runs as many again.
# Three is also the fewest the rule accepts. An MLX round on Gemma takes about 33 s.
OWN_RUNNER_ROUNDS = 3
# A body still undecided against its own runner after as many again runs on to
# OWN_RUNNER_MOST_ROUNDS where that many could decide it (each undecided metric's
# rounds_needed, the interval narrowing with the square root of the rounds, at most
# OWN_RUNNER_SUGGESTED_AT_MOST: six rounds' interval is itself rough) and the rounds left
# would take under OWN_RUNNER_RUN_ON_S alone (at the seconds its rounds so far took).
# LiteRT-LM's prefill on the tiny bundle (about 0.3 ms a prompt) reads 0.85 to 1.54 from
# round to round on an Intel Xeon 2-core, with the best of 3, 6 or 10 repeats alike (each
# process has a speed of its own, 2026-12-07), and six rounds left it undecided in 1 of 2
# verifies there and 2 of 8 on an AMD EPYC 2-core: of 200 draws of 12 of 24 such rounds,
# 186 decided, where draws of 6 decided 114, yet after six rounds two verifies there
# suggested 14 and 17 (2026-12-08). Its rounds take about 2.5 s there, LiteRT-LM's
# on Gemma 4-5.3 s and MLX's on Gemma about 7 s: six more of any fit a minute. A body
# centred on its bound with rounds 20 % apart would need about 50 and stops at six,
# INCONCLUSIVE with the rounds that would decide.
OWN_RUNNER_MOST_ROUNDS = 12
OWN_RUNNER_SUGGESTED_AT_MOST = 2 * OWN_RUNNER_MOST_ROUNDS
OWN_RUNNER_RUN_ON_S = 60.0
# A failure's second window (against llama.cpp, or a body against its own runner) comes
# this long after the first, the other checks taking the call's place meanwhile: the host's
# spells last a minute or more. On an Intel Xeon 2-core (2026-12-08, an empty-cache verify),
# LiteRT-LM's Gemma body on linux-cpu.litert+mlx read 0.84 to 0.92 of its own runner's
# prefill in three rounds and in the three run right after them (FAILED, p = 0.0007); the
# same check run again two minutes later read 0.97 to 1.16 (VERIFIED).
CONFIRM_APART_S = 120.0
OWN_RUNNER_RULES = (
    (MetricRule(metric="own_runner_decode", direction=Direction.HIGHER, bound=0.05), "decode_step_tok_s"),
    (MetricRule(metric="own_runner_prefill", direction=Direction.HIGHER, bound=0.05), "prefill_tok_s"),
)


def _unwaived_failures(done: CheckOutcome) -> list[str]:
    """The metrics a failed verdict failed on that no waiver accepted ("<backend>.<metric>")."""
    if done.status is not Status.FAILED:
        return []
    return [str(m) for m in (done.details.get("perf") or {}).get("failed") or []]


def _against_own_runner(name: str) -> bool:
    return name.rpartition(".")[2].startswith("own_runner_")


def _backend_of(name: str) -> str:
    """The backend a metric's name names ("<backend>.<metric>"; "" for the library check's)."""
    return name.rpartition(".")[0]


def undecided_parts(done: CheckOutcome) -> tuple[set[str], set[str]]:
    """(series, bodies) an undecided verdict needs more rounds of: the labels of the series
    with a metric against the reference left undecided ("" for the library check's one
    series), and of the backends whose body against its own runner was. A decided metric
    needs no more rounds, so neither does a series or a body all of whose metrics decided."""
    names = [str(m) for m in (done.details.get("perf") or {}).get("undecided") or []]
    series = {_backend_of(m) for m in names if not _against_own_runner(m)}
    bodies = {_backend_of(m) for m in names if _against_own_runner(m)}
    return series, bodies


def rounds_to_decide(done: CheckOutcome, body: str) -> int:
    """The most rounds any of a body's undecided metrics against its own runner would
    likely need to decide (each row's rounds_suggested; 0 where none is undecided)."""
    rows = (done.details.get("perf") or {}).get("metrics") or []
    return max(
        (
            int(row.get("rounds_suggested") or 0)
            for row in rows
            if row.get("backend") == body
            and _against_own_runner(str(row.get("metric")))
            and row.get("verdict") == Verdict.INCONCLUSIVE.value
        ),
        default=0,
    )


def fails_only_against_own_runner(done: CheckOutcome) -> bool:
    """Whether a backend-perf verdict failed, and only on a body against its own runner."""
    failed = _unwaived_failures(done)
    return bool(failed) and all(_against_own_runner(m) for m in failed)


def fails_against_the_reference(done: CheckOutcome) -> bool:
    """Whether a backend-perf verdict failed on a runtime against the llama.cpp path (a
    metric beyond its bound that no waiver accepts), not only on a body against its own
    runner."""
    return any(not _against_own_runner(m) for m in _unwaived_failures(done))


def own_rounds_again(
    cell: Cell,
    owned: Sequence[Comparison],
    own: Sequence[tuple[str, Samples]],
    rounds: int,
    log: Log,
    *,
    threads: int,
    cores: int,
    bodies: set[str],
    first: int | None = None,
) -> dict[str, float]:
    """`rounds` more own-runner rounds (numbered from `first`, by default `rounds`: as many
    again as the first) for the backends named in `bodies`, added to each one's samples;
    the seconds a round of each took."""
    took: dict[str, float] = {}
    for c, (_, samples) in zip(owned, own, strict=True):
        if c.label not in bodies:
            continue
        watch = Stopwatch()
        more = own_runner_rounds(
            cell,
            c,
            rounds,
            log,
            first=rounds if first is None else first,
            threads=threads,
            cores=cores,
            ids_from=samples.last_candidate,
        )
        took[c.label] = watch.seconds() / max(1, rounds)
        samples.extend(more)
    return took


def first_prompts(prompts: Path, n: int, chosen: Path) -> Path:
    """The first `n` prompts of a prompt file (all of them when 0), written to `chosen`."""
    lines = [
        line
        for line in prompts.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    chosen.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(chosen, "\n".join(lines[: n or len(lines)]) + "\n")
    return chosen


def own_runner_prompts(c: Comparison) -> Path:
    """Where a series' own-runner rounds find their prompts (written by own_runner_settings)."""
    return c.out / "own-runner" / "prompts.txt"


def own_runner_settings(c: Comparison) -> BenchSettings:
    """The settings of a series' own-runner rounds: its bench settings (its repeats, at
    least the runner's own fewest, each prompt's best taken on both sides) at the bundle's
    own_runner_max_tokens or OWN_RUNNER_MAX_TOKENS, on the first prompts of its prompt file
    (all, or the bundle's own_runner_prompts), written to own_runner_prompts(c)."""
    settings = perf_settings(c.opts)
    chosen = first_prompts(settings.prompts, c.own_prompts, own_runner_prompts(c))
    repeats = c.own.repeats(settings.repeats) if c.own is not None else settings.repeats
    max_tokens = c.own_max_tokens or OWN_RUNNER_MAX_TOKENS
    return replace(settings, prompts=chosen, max_tokens=max_tokens, repeats=repeats)


def same_prompts(run: BenchRun | None, prompts: Path) -> BenchRun | None:
    """`run` cut to the prompts of a prompt file whose lines are its first prompts, in order
    (an own runner fed their ids needs no run of its own first); None when they are not."""
    if run is None:
        return None
    texts = read_prompts(prompts)
    head = run.prompts[: len(texts)]
    if len(head) != len(texts) or any(p.prompt != text for p, text in zip(head, texts, strict=True)):
        return None
    return replace(run, prompts=head)


def own_runner_rounds(
    cell: Cell,
    c: Comparison,
    rounds: int,
    log: Log,
    *,
    first: int = 0,
    threads: int = 1,
    cores: int = 1,
    ids_from: BenchRun | None = None,
) -> Samples:
    """Rounds of the body (candidate) and its runtime's own runner (reference), body first in
    even rounds, the own runner first in odd ones, or both at once where the runner says so
    (OwnRunner.at_once: from the first round when `ids_from`, an earlier run of the body on
    these prompts, gives the MLX runner its prompt ids; else after a first round in turn).
    A metric's sample of a run is its median over the prompts."""
    if c.own is None:
        raise ValueError(f"{c.label}: no own runner")
    own = c.own
    settings = own_runner_settings(c)
    out = c.out / "own-runner"
    tool_dir = c.candidate.library.parent
    body_env = {"ELIZA_N_THREADS": str(threads), **c.candidate.env}
    taken: dict[str, dict[str, list[float]]] = {"body": {}, "own": {}}
    sources: set[str] = set()
    body: BenchRun | None = same_prompts(ids_from, settings.prompts)
    at_once = own.at_once(threads, cores)
    how = ("side by side" if body is not None else "side by side after the first") if at_once else "in turn"

    def run_body(i: int) -> BenchRun:
        path = out / f"body-{i}.jsonl"
        argv = bench_argv(tool_dir, c.candidate.library, settings, f"{cell.id} {c.label} body", path)
        return run_tool(argv, path, body_env, runner=c.opts.runner)

    def run_own(i: int, ids_from: BenchRun) -> BenchRun:
        path = out / f"own-{i}.jsonl"
        try:
            argv = own.argv(
                settings.bundle,
                settings.prompts,
                settings.max_tokens,
                threads,
                settings.repeats,
                path,
                ids_from,
            )
        except OwnRunnerError as exc:
            raise BenchToolError(str(exc)) from exc
        return run_tool(argv, path, {"ELIZA_N_THREADS": str(threads)})

    for i in range(first, first + rounds):
        if at_once and body is not None:
            # the MLX runner is fed the prompt ids of the body's latest run
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="own-runner") as pool:
                done_body = pool.submit(run_body, i)
                done_own = pool.submit(run_own, i, body)
                ran = {"body": done_body.result(), "own": done_own.result()}
        else:
            ran = {}
            for side in ["body", "own"] if i % 2 == 0 or body is None else ["own", "body"]:
                if side == "body":
                    ran["body"] = run_body(i)
                else:
                    ran["own"] = run_own(i, body or ran["body"])
        body = ran["body"]
        for side, done in ran.items():
            sources.add(done.peak_rss_source)
            for metric, value in run_metrics(done).items():
                taken[side].setdefault(metric, []).append(value)
    log(f"{cell.id}: perf: {rounds} rounds of {c.label}'s body and its own runner ({how})")
    return Samples(
        candidate=taken["body"],
        reference=taken["own"],
        peak_rss_sources=sources,
        against=f"the runtime's own runner: {c.own.words}",
        last_candidate=body,
        sides=how,
    )


# A backend's rounds are shorter than the library check's: a runtime several times slower
# than llama.cpp (MLX on Linux's reference BLAS) decides its ratios in fewer tokens, and the
# rounds stay within a fresh verify's budget.
BACKEND_MAX_TOKENS = 48
BACKEND_REPEATS = 2


@dataclass(frozen=True)
class Comparison:
    """What one perf series compares: a label ("" for the library check, the factory for a
    backend), the two sides, the bench settings and where its files go."""

    label: str
    candidate: Side
    reference: Side
    opts: BenchOptions
    out: Path
    own: OwnRunner | None = None  # a backend's runtime driven by its own API (own_runner_rounds)
    own_prompts: int = 0  # the own-runner rounds' prompts: the first N (0: all)
    own_max_tokens: int = 0  # the own-runner rounds' decode tokens (0: OWN_RUNNER_MAX_TOKENS)


def comparisons(
    job: Job, cell: Cell, check: Check, step_commit: str, opts: BenchOptions, evidence: Run
) -> tuple[list[Comparison], str, str, tuple[Path, ...]]:
    """(series, reference identity, reference in words, artifacts) of a cell's perf check.
    Raises ValueError when its reference library did not build."""
    library = job.library(cell)
    out = opts.out_dir / cell.platform.id / cell.key / "perf"
    if check.subject != "backend":
        reference, identity, words = _reference(job, step_commit, opts)
        return (
            [Comparison("", Side(library), Side(reference), opts, out)],
            identity,
            words,
            (library, reference),
        )
    bundle = ensure_runtime_bundle(evidence.bundle, job.matrix.gates)
    sizing = job.matrix.bundle(check.bundle).bench
    backend_opts = replace(
        opts,
        settings=replace(opts.settings, bundle=bundle),
        # a real model's own sizing where it declares a smaller one (matrix.yaml bundles: bench)
        perf_max_tokens=sizing.backend_perf_max_tokens or min(BACKEND_MAX_TOKENS, opts.perf_max_tokens),
        perf_repeats=min(BACKEND_REPEATS, opts.perf_repeats),
    )

    def opts_of(factory: str) -> BenchOptions:
        """A runtime's rounds: on the first prompts where the bundle sizes them so (a long run
        whose speed does not depend on the prompt: MLX's CPU build on Gemma), else all; each
        prompt as often as the runtime's fewest repeats, on both sides (LiteRT-LM's runs are
        cheap and jittery, and the best repeat counts: eliza.adapters.own_runners)."""
        opts = replace(backend_opts, perf_repeats=runtime_repeats(factory, backend_opts.perf_repeats))
        n = sizing.backend_perf_prompts_of(factory)
        if not n:
            return opts
        chosen = first_prompts(opts.settings.prompts, n, out / factory / "prompts.txt")
        return replace(opts, settings=replace(opts.settings, prompts=chosen))

    series = [
        Comparison(
            gate.factory,
            Side(library, {"ELIZA_LLM_BACKEND": gate.factory}, partial(weight_cache_state, gate.id, bundle)),
            Side(library, {"ELIZA_LLM_BACKEND": "llama.cpp"}),
            opts_of(gate.factory),
            out / gate.factory,
            own_runner(gate.factory),
            sizing.own_runner_prompts,
            sizing.own_runner_max_tokens,
        )
        for gate in backends_of(cell)
    ]
    words = "the llama.cpp path of the same library and bundle (ELIZA_LLM_BACKEND=llama.cpp)"
    return series, BACKEND_PERF_REFERENCE, words, (library,)


def _weight_caches(series: Sequence[tuple[str, Samples]]) -> dict[str, object]:
    """{"weight_cache": {backend: the state each of its runs started with}} where a runtime
    keeps a weight cache: a cold first round is the load users see once, the warm ones the
    load of every later start."""
    states = {label or "candidate": samples.weight_cache for label, samples in series if samples.weight_cache}
    return {"weight_cache": states} if states else {}


def perf_outcome(
    cell: Cell,
    check: Check,
    series: Sequence[tuple[str, Samples]],
    policy: PerfPolicy,
    *,
    watch: Stopwatch,
    about: dict[str, object],
    artifacts: tuple[Path, ...] = (),
    simulated: Simulated | None = None,
    own: Sequence[tuple[str, Samples]] = (),
) -> CheckOutcome:
    """Each metric of the check's rules judged, for each series (one per backend of a
    backend check, labelled with its factory; one unlabelled series otherwise), each
    simulated metric on its exact ratio, and each backend's body against its own runner
    (`own`: own_runner_decode and own_runner_prefill, which no waiver covers); the record's
    status: failed when any (unwaived) metric regressed, inconclusive when one that must
    decide could not (a wall-time metric only where the simulated CPU did not run), else
    passed."""
    judgements: list[tuple[str, Judgement]] = []
    if simulated is not None:
        candidate, reference = simulated.figures()
        for rule in simulated.instrument.metrics:
            judgements.append(
                ("", judge(exact(rule.metric, candidate[rule.metric], reference[rule.metric]), rule))
            )
    for label, samples in series:
        judgements += [(label, j) for j in series_judgements(check, samples)]
    for label, samples in own:  # body / own runner: own_runner_decode, own_runner_prefill
        for rule, metric in OWN_RUNNER_RULES:
            comparison = compare_paired(rule.metric, samples.candidate[metric], samples.reference[metric])
            judgements.append((label, judge(comparison, rule)))
    own_words = {label: samples.against for label, samples in own}
    rows = [
        {
            **j.as_dict(),
            "instrument": j.rule.instrument.value,
            **({"backend": label} if label else {}),
            **({"against": own_words[label]} if j.rule.metric.startswith("own_runner_") else {}),
        }
        for label, j in judgements
    ]
    state = judge_with_waivers(cell.id, rows, policy, check.id)
    metrics: dict[str, float | int | str] = {}
    for label, j in judgements:
        c = j.comparison
        name = f"{label}.{c.metric}" if label else c.metric
        metrics[name] = round(statistics.median(c.candidate), 3)
        metrics[f"{name}_ratio"] = round(c.ratio, 4)
        metrics[f"{name}_ci_low"] = round(c.low, 4)
        metrics[f"{name}_ci_high"] = round(c.high, 4)
        metrics[f"{name}_p"] = round(c.p_value, 6)
    verified = sum(1 for _, j in judgements if j.verdict is Verdict.VERIFIED)
    details = {
        "summary": state.words,
        "perf": {
            **about,
            **({"simulated": simulated.as_dict()} if simulated is not None else {}),
            "metrics": rows,
            **_weight_caches(series),
            "waived": list(state.waived),
            "failed": list(state.failing),
            "undecided": list(state.undecided),
            "warnings": list(state.warnings),
            "decided_by": list(state.decided_by),
            "decision": state.decision(),
        },
    }
    log_tail = "\n".join(f"{label}: {j.words}" if label else j.words for label, j in judgements)[-4000:]
    span = watch.span()
    if state.verdict == Verdict.INCONCLUSIVE.value:
        return CheckOutcome(
            cell=cell.id,
            check=check.id,
            status=Status.INCONCLUSIVE,
            ran=len(judgements),
            passed=verified,
            started_at=span.started,
            finished_at=span.finished,
            reason=state.words,
            metrics=metrics,
            details=details,
            artifacts=artifacts,
            log_tail=log_tail,
        )
    failed = state.verdict == Verdict.FAILED.value
    # A waived metric counts as passed: only a failure leaves the unverified ones out.
    return outcome(
        cell.id,
        check.id,
        ran=len(judgements),
        passed=verified if failed else len(judgements),
        span=span,
        reason=state.words if failed else "",
        metrics=metrics,
        details=details,
        artifacts=artifacts,
        log_tail=log_tail,
    )


def _reference(job: Job, step_commit: str, opts: BenchOptions) -> tuple[Path, str, str]:
    """(library, identity, words) of the reference: --perf-reference DIR's library, or the
    commit's build (the declared baseline unless --perf-reference REF)."""
    if opts.perf_reference_dir is not None:
        library = opts.perf_reference_dir
        return library, f"library:{sha256_file(library)}", f"the library in {library.parent}"
    if step_commit not in job.baselines:
        raise ValueError(
            f"reference {step_commit[:12]} of {job.platform.id} did not build (see this run's log)"
        )
    return job.baselines[step_commit], step_commit, f"commit {step_commit[:12]}"


def _sources(measured: Sequence[tuple[str, Samples]]) -> str:
    """Where the tools read peak RSS, over every series."""
    return ",".join(sorted(set().union(*(s.peak_rss_sources for _, s in measured))))


def _instruments(check: Check, step: PlanRun, rounds: int) -> dict[str, str]:
    """What each instrument was here, in words, for the record and the report."""
    said = {"wall time": f"{rounds} interleaved rounds"}
    if check.simulated is not None:
        said["simulated CPU"] = (
            f"{step.simulator}: one run per side, {check.simulated.max_tokens} tokens per prompt"
            if step.simulator
            else f"NOT RUNNABLE HERE: {step.simulator_reason}"
        )
    return said


def run(job: Job, evidence: Run) -> list[CheckOutcome]:
    """One cell's perf check (the plan gives each cell its own step)."""
    opts = job.bench
    if opts is None:
        raise ValueError("the perf runner was given no bench settings")
    if job.target is not None:  # never an emulator: the plan does not time one
        opts = replace(opts, runner=job.target)
    outcomes: list[CheckOutcome] = []
    for step in job.steps:
        watch = Stopwatch()
        cell = job.matrix.cell(step.cell)
        check = job.matrix.check(step.check)
        rounds = opts.perf_rounds or check.rounds
        try:
            series, identity, words, artifacts = comparisons(
                job, cell, check, step.baseline_commit, opts, evidence
            )
        except ValueError as exc:
            outcomes.append(
                outcome(cell.id, check.id, ran=0, passed=0, span=watch.span(), reason=str(exc), error=True)
            )
            continue
        simulated = None
        if check.simulated is not None and step.simulator and series:
            simulated = measure_simulated(
                cell, series[0], check.simulated, step.simulator, opts.overhead_threads, evidence
            )
        owned = [c for c in series if c.own is not None and check.subject == "backend"]
        own_about: dict[str, dict[str, object]] = {}
        threads = opts.overhead_threads
        own_rounds = rounds if opts.perf_rounds is not None else min(rounds, OWN_RUNNER_ROUNDS)
        cores = opts.side_by_side_cores
        milestone = job.matrix.exit_checklist.milestone if job.matrix.exit_checklist else ""
        policy = PerfPolicy(waivers=job.matrix.perf_waivers, today=now().date(), milestone=milestone)
        try:
            with job.alone():  # the wall-time rounds: nothing else runs on the host meanwhile
                if opts.perf_rounds is None:
                    taken, settled_early = measure_until_settled(
                        cell, check, series, rounds, policy, evidence.detail
                    )
                else:  # --rounds N runs exactly N
                    taken, settled_early = measure_series(cell, series, rounds, evidence.detail), set()
                measured = [(c.label, samples) for c, samples in zip(series, taken, strict=True)]
                own = [
                    (
                        c.label,
                        own_runner_rounds(
                            cell,
                            c,
                            own_rounds,
                            evidence.detail,
                            threads=threads,
                            cores=cores,
                            ids_from=dict(measured)[c.label].last_candidate,
                        ),
                    )
                    for c in owned
                ]
        except BenchToolError as exc:
            outcomes.append(
                outcome(cell.id, check.id, ran=0, passed=0, span=watch.span(), reason=str(exc), error=True)
            )
            continue
        settings = perf_settings(series[0].opts if series else opts)
        ran = max((_rounds_in(samples) for _, samples in measured), default=rounds)
        settled_after = {
            label or "candidate": _rounds_in(samples) for label, samples in measured if label in settled_early
        }
        about: dict[str, object] = {
            "reference": words,
            "reference_identity": perf_identity(identity, rounds, simulated_identity(check, step.simulator)),
            "instruments": _instruments(check, step, ran),
            "rounds": rounds,
            "rounds_run": ran,
            # the series that stopped at the first look, and the rounds each ran
            **({"settled_after": settled_after} if settled_after else {}),
            "threads": opts.overhead_threads,
            "max_tokens": settings.max_tokens,
            "repeats": settings.repeats,
            "ran_on": step.how,
            "peak_rss_source": _sources(measured),
        }
        if check.subject == "backend":
            about["backends"] = [c.label for c in series]
            about["bundle"] = str(series[0].opts.settings.bundle) if series else ""
            about["prompts"] = {c.label: c.opts.settings.prompts.as_posix() for c in series}
            own_about = {
                c.label: {
                    "runner": c.own.words,
                    "max_tokens": own_runner_settings(c).max_tokens,
                    "prompts": own_runner_prompts(c).as_posix(),
                    "threads": threads,
                    "rounds": own_rounds,
                    "repeats": c.own.repeats(perf_settings(c.opts).repeats),
                    "judged": "paired rounds: decode on the median step, prefill on the best repeat",
                    "sides": dict(own)[c.label].sides,
                }
                for c in owned
                if c.own is not None
            }
            about["own_runner"] = own_about
        judged = partial(
            perf_outcome,
            cell,
            check,
            measured,
            policy,
            watch=watch,
            about=about,
            artifacts=artifacts,
            simulated=simulated,
            own=own,
        )
        done = judged()
        judged_on = ran  # the rounds of the samples the verdict is judged on
        own_twice: set[str] = set()  # the bodies whose own-runner rounds ran as many again
        # the named bodies' own-runner rounds as many again (within the caller's window)
        own_again = partial(
            own_rounds_again,
            cell,
            owned,
            own,
            rounds=own_rounds,
            log=evidence.detail,
            threads=threads,
            cores=cores,
        )
        if done.status is Status.INCONCLUSIVE and opts.perf_rounds is None:
            # The declared rounds could not decide (a noisy host): as many again, once, still
            # interleaved, of what is undecided (a series, a body against its own runner),
            # then the verdict of all of them. --rounds N runs exactly N.
            undecided, bodies = undecided_parts(done)
            if not undecided and not bodies:  # a verdict that names none: all of it again
                undecided, bodies = {c.label for c in series}, {c.label for c in owned}
            extended = [c for c in series if c.label in undecided]
            own_twice = bodies & {c.label for c in owned}
            with job.alone():
                more = (
                    measure_series(cell, extended, rounds, evidence.detail, first=rounds) if extended else []
                )
                samples_of = dict(measured)
                for c, extra in zip(extended, more, strict=True):
                    samples_of[c.label].extend(extra)
                own_round_s = own_again(bodies=own_twice)
            if extended:
                judged_on = 2 * rounds
                about["rounds_run"] = judged_on
                about["instruments"] = _instruments(check, step, judged_on)
            if len(extended) < len(series) or own_twice != {c.label for c in owned}:
                about["ran_again"] = {
                    "against the reference": [c.label or "candidate" for c in extended],
                    "own runner": sorted(own_twice),
                }
            for label in own_twice:
                own_about[label]["rounds"] = 2 * own_rounds
            about["peak_rss_source"] = _sources(measured)
            done = judged()  # the same samples and `about`, extended in place
            _, still = undecided_parts(done) if done.status is Status.INCONCLUSIVE else (set(), set())
            left = OWN_RUNNER_MOST_ROUNDS - 2 * own_rounds
            suggested = {b: rounds_to_decide(done, b) for b in still & own_twice}
            run_on = {
                b
                for b, n in suggested.items()
                if n <= OWN_RUNNER_SUGGESTED_AT_MOST and own_round_s[b] * left < OWN_RUNNER_RUN_ON_S
            }
            if run_on and left > 0:
                # a body still undecided that twelve rounds could decide, cheaply enough
                with job.alone():
                    own_again(bodies=run_on, rounds=left, first=2 * own_rounds)
                for label in run_on:
                    own_about[label]["rounds"] = OWN_RUNNER_MOST_ROUNDS
                    own_about[label]["ran_on"] = (
                        f"undecided after {2 * own_rounds} rounds of {own_round_s[label]:.1f} s each, "
                        f"{suggested[label]} suggested: {OWN_RUNNER_MOST_ROUNDS} in all"
                    )
                done = judged()
        if opts.perf_rounds is None and check.subject == "backend" and fails_against_the_reference(done):
            # A runtime beyond its bound in every round of one window may be the host's
            # moment, not the runtime's speed: MLX's CPU build, which hands each evaluation
            # to a thread of its own, decoded the tiny bundle at half its speed through
            # spells of seconds to minutes on a 2-core VM, llama.cpp's side unmoved. The
            # rounds against llama.cpp run again in a window of their own and the verdict is
            # that window's: a slower runtime fails both, a short spell only the first, whose
            # samples and verdict stay in the record. (A spell can outlast both: MLX's
            # waivers on the tiny bundle accept its figures.)
            first = {
                label: {"candidate": samples.candidate, "reference": samples.reference}
                for label, samples in measured
            }
            first_words = done.reason
            with job.apart(CONFIRM_APART_S), job.alone():
                again = measure_series(cell, series, judged_on, evidence.detail, first=judged_on)
            measured[:] = [(label, samples) for (label, _), samples in zip(measured, again, strict=True)]
            about["rounds_run"] = 2 * judged_on  # both windows'
            about["instruments"] = _instruments(check, step, judged_on)
            about["peak_rss_source"] = _sources(measured)
            about["first_window"] = {
                "failed": first_words,
                "samples": first,
                "words": "the rounds against llama.cpp failed in one window; a second window decided",
                # the series that stopped at that window's first look ran all of this one
                **({"settled_after": about.pop("settled_after")} if "settled_after" in about else {}),
            }
            done = judged()
            evidence.detail(
                f"{cell.id}: {check.id}: a first window failed against llama.cpp ({first_words[:300]}); "
                f"the second window: {done.status.value}"
            )
        failing_bodies = {_backend_of(m) for m in _unwaived_failures(done)} - own_twice
        if opts.perf_rounds is None and own and failing_bodies and fails_only_against_own_runner(done):
            # A body slower than its own runner in every round of a short series may be the
            # host's moment, not the body's cost (measured once: LiteRT-LM's prefill on Gemma
            # 0.93 over three rounds; a run of the check a minute later, 1.01): its own-runner
            # rounds run as many again, once, CONFIRM_APART_S later (the other checks running
            # meanwhile), and the verdict is that of all of them. A cost the body pays at
            # every token fails them all (the planted sleeps: p = 0.003 after four).
            with job.apart(CONFIRM_APART_S), job.alone():
                own_again(bodies=failing_bodies)
            for label in failing_bodies:
                own_about[label]["rounds"] = 2 * own_rounds
                own_about[label]["confirmed"] = (
                    f"a failure of the first rounds was run again {CONFIRM_APART_S:g} s later, "
                    "the other checks running meanwhile: the verdict is all of them"
                )
            done = judged()
        for c, (_, samples) in zip(series, measured, strict=True):
            atomic_write_text(
                c.out / "perf.json",
                json.dumps(
                    {**about, "samples": {"candidate": samples.candidate, "reference": samples.reference}},
                    indent=2,
                )
                + "\n",
            )
        evidence.detail(
            f"{cell.id}: {check.id} {done.status.value}: {done.reason or done.details['summary']}"
        )
        outcomes.append(done)
    return outcomes
