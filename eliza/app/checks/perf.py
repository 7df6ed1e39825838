"""The perf check: interleaved rounds of a cell's library and a reference library (the
declared baseline's build, or --perf-reference REF|DIR) through the cell's own
e2e_loop_bench, with the same bundle, prompts and decode threads; each metric judged by
its matrix rule (eliza.core.perf_stats) and the matrix's waivers (eliza.core.perf_waivers)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from eliza.adapters.bench_tools import BenchSettings, bench_argv, run_tool
from eliza.app.checks.job import Job
from eliza.app.services.bench_options import BenchOptions
from eliza.app.services.clock import Stopwatch, now
from eliza.app.services.run import Run
from eliza.core.bench_records import BenchRun
from eliza.core.evidence import Status
from eliza.core.matrix import Cell, Check
from eliza.core.outcome import CheckOutcome, outcome
from eliza.core.perf_stats import Judgement, Verdict, compare, judge
from eliza.core.perf_waivers import PerfPolicy, judge_with_waivers
from eliza.core.verify_plan import perf_identity
from eliza.formats.files import atomic_write_text, sha256_file

Log = Callable[[str], None]


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def run_metrics(run: BenchRun) -> dict[str, float]:
    """What one bench run contributes to each metric: one sample per round and side. Per
    prompt the best of its repeats (the fastest decode, the shortest prefill and first
    token: other processes of a busy machine only ever slow a repeat down), then the median
    over prompts; the bench process's own peak RSS (its high-water mark, never the
    parent's: see docs/perf.md)."""
    decode = [max(p.decode_tok_s) for p in run.prompts if len(p.tokens) > 1 and p.decode_tok_s]
    prefill = [
        len(p.prompt_tokens) / (min(p.prefill_ms) / 1000.0)
        for p in run.prompts
        if p.prefill_ms and min(p.prefill_ms) > 0
    ]
    first = [min(p.first_token_ms) for p in run.prompts if p.first_token_ms]
    return {
        "decode_tok_s": _median(decode),
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

    def extend(self, more: Samples) -> None:
        for mine, theirs in ((self.candidate, more.candidate), (self.reference, more.reference)):
            for name, values in theirs.items():
                mine.setdefault(name, []).extend(values)
        self.peak_rss_sources |= more.peak_rss_sources


def measure(
    cell: Cell, library: Path, reference: Path, opts: BenchOptions, rounds: int, log: Log, *, first: int = 0
) -> Samples:
    """Rounds of candidate and reference, AB then BA alternately, so warm-up and drift
    favour neither; the cell's bench tool drives both libraries, where the platform's
    binaries run (here, or on its lab device: a device's timings are its own)."""
    settings = perf_settings(opts)
    env = {"ELIZA_N_THREADS": str(opts.overhead_threads)}
    out = opts.out_dir / cell.platform.id / cell.key / "perf"
    tool_dir = library.parent
    samples = Samples()
    for i in range(first, first + rounds):
        order = ("candidate", "reference") if i % 2 == 0 else ("reference", "candidate")
        for side in order:
            path = out / f"{side}-{i}.jsonl"
            lib = library if side == "candidate" else reference
            argv = bench_argv(tool_dir, lib, settings, f"{cell.id} {side}", path)
            done = run_tool(argv, path, env, runner=opts.runner)
            samples.peak_rss_sources.add(done.peak_rss_source)
            into = samples.candidate if side == "candidate" else samples.reference
            for name, value in run_metrics(done).items():
                into.setdefault(name, []).append(value)
    log(f"{cell.id}: perf: {rounds} rounds of candidate and reference")
    return samples


def perf_outcome(
    cell: Cell,
    check: Check,
    candidate: dict[str, list[float]],
    reference: dict[str, list[float]],
    policy: PerfPolicy,
    *,
    watch: Stopwatch,
    about: dict[str, object],
    artifacts: tuple[Path, ...] = (),
) -> CheckOutcome:
    """Each metric of the check's rules judged; the record's status: failed when any
    (unwaived) metric regressed, inconclusive when any could not decide, else passed."""
    judgements: list[Judgement] = []
    for rule in check.metrics:
        comparison = compare(rule.metric, candidate[rule.metric], reference[rule.metric])
        judgements.append(judge(comparison, rule))
    rows = [j.as_dict() for j in judgements]
    state = judge_with_waivers(cell.id, rows, policy)
    metrics: dict[str, float | int | str] = {}
    for j in judgements:
        c = j.comparison
        metrics[j.comparison.metric] = round(statistics.median(c.candidate), 3)
        metrics[f"{c.metric}_ratio"] = round(c.ratio, 4)
        metrics[f"{c.metric}_ci_low"] = round(c.low, 4)
        metrics[f"{c.metric}_ci_high"] = round(c.high, 4)
        metrics[f"{c.metric}_p"] = round(c.p_value, 6)
    verified = sum(1 for j in judgements if j.verdict is Verdict.VERIFIED)
    details = {
        "summary": state.words,
        "perf": {**about, "metrics": rows, "waived": list(state.waived), "warnings": list(state.warnings)},
    }
    log_tail = "\n".join(j.words for j in judgements)[-4000:]
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
            reference, identity, words = _reference(job, step.baseline_commit, opts)
        except ValueError as exc:
            outcomes.append(
                outcome(cell.id, check.id, ran=0, passed=0, span=watch.span(), reason=str(exc), error=True)
            )
            continue
        library = job.library(cell)
        samples = measure(cell, library, reference, opts, rounds, evidence.log)
        settings = perf_settings(opts)
        about: dict[str, object] = {
            "reference": words,
            "reference_identity": perf_identity(identity, rounds),
            "rounds": rounds,
            "rounds_run": rounds,
            "threads": opts.overhead_threads,
            "max_tokens": settings.max_tokens,
            "repeats": settings.repeats,
            "ran_on": step.how,
            "peak_rss_source": ",".join(sorted(samples.peak_rss_sources)),
        }
        milestone = job.matrix.exit_checklist.milestone if job.matrix.exit_checklist else ""
        policy = PerfPolicy(waivers=job.matrix.perf_waivers, today=now().date(), milestone=milestone)
        done = perf_outcome(
            cell,
            check,
            samples.candidate,
            samples.reference,
            policy,
            watch=watch,
            about=about,
            artifacts=(library, reference),
        )
        if done.status is Status.INCONCLUSIVE and opts.perf_rounds is None:
            # The declared rounds could not decide (a noisy host): as many again, once, still
            # interleaved, then the verdict of all of them. --rounds N runs exactly N.
            samples.extend(measure(cell, library, reference, opts, rounds, evidence.log, first=rounds))
            about["rounds_run"] = 2 * rounds
            about["peak_rss_source"] = ",".join(sorted(samples.peak_rss_sources))
            done = perf_outcome(
                cell,
                check,
                samples.candidate,
                samples.reference,
                policy,
                watch=watch,
                about=about,
                artifacts=(library, reference),
            )
        out = opts.out_dir / cell.platform.id / cell.key / "perf" / "perf.json"
        atomic_write_text(
            out,
            json.dumps(
                {**about, "samples": {"candidate": samples.candidate, "reference": samples.reference}},
                indent=2,
            )
            + "\n",
        )
        evidence.log(f"{cell.id}: perf {done.status.value}: {done.reason or done.details['summary']}")
        outcomes.append(done)
    return outcomes
