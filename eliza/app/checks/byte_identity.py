"""The byte-identity checks (reference, gates, baseline, drafter) of a platform's cells, the
seam-overhead ratio measured with interleaved repeats on its no-gate cell, and the
speculative-decoding speedup measured with interleaved rounds on every cell."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from eliza.adapters.bench_tools import BenchSettings, bench_argv, drafter_argv, reference_argv, run_tool
from eliza.app.checks.job import Alone, Job
from eliza.app.services.baseline import BaselineError, resolve_commit
from eliza.app.services.bench_options import BenchOptions
from eliza.app.services.clock import Stopwatch, now
from eliza.app.services.run import RUN_ERRORS, Run
from eliza.core.backend_agreement import AgreementInputError, judge
from eliza.core.bench_diff import (
    IdentityResult,
    RatioReport,
    compare_identity,
    drafter_problems,
    drafter_totals,
    paired_decode_tok_s,
    ratio_report,
    run_decode_tok_s,
    run_first_token_ms,
    token_agreement,
)
from eliza.core.bench_records import BenchRun
from eliza.core.evidence import Status
from eliza.core.logit_error import LogitsFormatError, logit_error
from eliza.core.matrix import (
    Agreement,
    BackendAgreement,
    Cell,
    Check,
    CheckKind,
    Direction,
    Matrix,
    MetricRule,
)
from eliza.core.outcome import CheckOutcome, Span, outcome, skipped
from eliza.core.perf_stats import Verdict
from eliza.core.perf_stats import compare as perf_compare
from eliza.core.perf_stats import judge as perf_judge
from eliza.core.verify_plan import IDENTITY_KINDS
from eliza.formats.bench_jsonl import load_run
from eliza.formats.files import atomic_write_text, sha256_file
from eliza.formats.logits import parse_logits, step_errors

Log = Callable[[str], None]


def settings_key(settings: BenchSettings, *binaries: Path) -> str:
    """Cache key of a bench run's inputs: settings, the bytes of prompts and bundle model,
    and of the binaries involved."""
    digest = hashlib.sha256(json.dumps(asdict(settings), default=str, sort_keys=True).encode())
    for path in (settings.prompts, *binaries, *sorted((settings.bundle / "text").glob("*.gguf"))):
        digest.update(bytes.fromhex(sha256_file(path)))
    return digest.hexdigest()[:16]


def identity_outcome(
    cell: str,
    check: str,
    result: IdentityResult,
    span: Span,
    runs: Sequence[BenchRun],
    artifacts: tuple[Path, ...],
) -> CheckOutcome:
    first = result.divergences[0] if result.divergences else None
    identical_prompts = result.prompts_compared - len(result.divergences)
    metrics: dict[str, float | int | str] = {"tokens_compared": result.tokens_compared}
    left = runs[0]
    if left.prompts:
        metrics["tok_s"] = round(run_decode_tok_s(left), 1)
        metrics["first_token_ms"] = round(run_first_token_ms(left), 3)
        metrics["peak_rss_kb"] = max(p.peak_rss_kb for p in left.prompts)
        drafted = sum(d for p in left.prompts for d, _ in p.drafter)
        if drafted:
            metrics["drafter_acceptance"] = sum(a for p in left.prompts for _, a in p.drafter) / drafted
    return outcome(
        cell,
        check,
        ran=result.prompts_compared,
        passed=identical_prompts if not result.problems else 0,
        span=span,
        reason="" if result.identical else result.summary(),
        metrics=metrics,
        artifacts=artifacts,
        log_tail=result.report()[-4000:],
        details={
            "summary": result.summary(),
            "left": result.left,
            "right": result.right,
            "problems": list(result.problems),
            "first_divergence": None
            if first is None
            else {
                "prompt_index": first.prompt_index,
                "prompt": first.prompt,
                "step": first.step,
                "left_token": first.left_token,
                "right_token": first.right_token,
                "byte_offset": first.byte_offset,
                "left_text": first.left_window,
                "right_text": first.right_window,
            },
        },
    )


@dataclass(frozen=True, kw_only=True)
class CellRuns:
    cell: Cell
    library: Path
    ffi: BenchRun
    ffi_path: Path
    reference: BenchRun
    reference_path: Path
    # every step's logits of the reference run, where the platform's agreement judges them
    reference_logits: Path | None = None


# The reference runs of one bench call, by the reference runner's bytes: every cell of a
# platform builds the same plain-llama.h binary, and with the same settings, bundle, prompts
# and target its output is the same, so it runs once per call.
ReferenceRuns = dict[str, tuple[BenchRun, Path, Path | None]]

# A reference platform's run for cross-arch-agreement: its FFI run, or (where logits are
# judged) its reference runner's run, with the path of each and of its logits.
AgreementRun = tuple[BenchRun, Path, Path | None]


def run_cell(cell: Cell, library: Path, opts: BenchOptions, log: Log, references: ReferenceRuns) -> CellRuns:
    out = opts.out_dir / cell.platform.id / cell.gate_key
    build_dir = library.parent
    ffi_path, ref_path = out / "ffi.jsonl", out / "reference.jsonl"
    agreement = cell.platform.agreement
    logits = out / "reference.logits" if agreement is not None and agreement.judges_logits_anywhere else None
    ffi = run_tool(
        bench_argv(build_dir, library, opts.settings, cell.id, ffi_path), ffi_path, runner=opts.runner
    )
    runner_sha = sha256_file(build_dir / "reference_runner")
    if runner_sha in references:
        reference, ref_path, logits = references[runner_sha]
        log(f"{cell.id}: the reference runner is the same binary as before: its run {ref_path} stands")
    else:
        reference = run_tool(
            reference_argv(build_dir, opts.settings, cell.id, ref_path, logits), ref_path, runner=opts.runner
        )
        references[runner_sha] = (reference, ref_path, logits)
    log(f"{cell.id}: {len(ffi.prompts)} prompts, {ffi.generated_tokens} tokens -> {ffi_path}")
    return CellRuns(
        cell=cell,
        library=library,
        ffi=ffi,
        ffi_path=ffi_path,
        reference=reference,
        reference_path=ref_path,
        reference_logits=logits,
    )


def _ffi_versus(
    runs: CellRuns, check_id: str, right: BenchRun, right_label: str, right_path: Path, watch: Stopwatch
) -> CheckOutcome:
    """A cell's FFI run compared with another run of the same prompts."""
    cell = runs.cell.id
    result = compare_identity(runs.ffi, right, left_label=f"{cell} FFI", right_label=right_label)
    artifacts = (runs.ffi_path, right_path, runs.library)
    return identity_outcome(cell, check_id, result, watch.span(), [runs.ffi], artifacts)


def measure_overhead(none: CellRuns, opts: BenchOptions, log: Log) -> dict[str, object]:
    """Interleaved FFI/reference runs on the no-gate cell; one ratio per pair. The order
    inside a pair alternates (AB, BA, ...) so warm-up and drift favour neither side; where
    the host has a core for each side's threads (BenchOptions.side_by_side_cores), a pair's
    two runs go at once instead, one process per core: both decode the same model with the
    same llama.cpp, so each slows the other alike."""
    settings = replace(opts.settings, repeats=opts.overhead_repeats, max_tokens=opts.overhead_max_tokens)
    env = {"ELIZA_N_THREADS": str(opts.overhead_threads)}
    out = opts.out_dir / none.cell.platform.id / "overhead"
    decode: list[tuple[float, float]] = []
    first: list[tuple[float, float]] = []
    build_dir = none.library.parent
    at_once = opts.runner is None and 2 * opts.overhead_threads <= opts.side_by_side_cores
    for i in range(opts.overhead_pairs):
        ffi_out, ref_out = out / f"ffi-{i}.jsonl", out / f"ref-{i}.jsonl"
        commands = {
            "ffi": (bench_argv(build_dir, none.library, settings, none.cell.id, ffi_out), ffi_out),
            "ref": (reference_argv(build_dir, settings, none.cell.id, ref_out), ref_out),
        }
        order = ("ffi", "ref") if i % 2 == 0 else ("ref", "ffi")
        if at_once:
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="overhead-pair") as pool:
                pending = {name: pool.submit(run_tool, *commands[name], env) for name in order}
                done = {name: future.result() for name, future in pending.items()}
        else:
            done = {name: run_tool(*commands[name], env, runner=opts.runner) for name in order}
        ffi, ref = done["ffi"], done["ref"]
        decode.append((run_decode_tok_s(ffi), run_decode_tok_s(ref)))
        first.append((run_first_token_ms(ffi), run_first_token_ms(ref)))
    tok: RatioReport = ratio_report("decode tok/s", "FFI", "reference", decode)
    ftl: RatioReport = ratio_report("first-token ms", "FFI", "reference", first)
    log(f"seam overhead: {tok.describe()}")
    log(f"first token:   {ftl.describe()}")
    result: dict[str, object] = {
        "cell": none.cell.id,
        "pairs": opts.overhead_pairs,
        "max_tokens": settings.max_tokens,
        "repeats": settings.repeats,
        "threads": opts.overhead_threads,
        "sides": "side by side" if at_once else "in turn",
        "decode_tok_s": {
            "ffi": [a for a, _ in decode],
            "reference": [b for _, b in decode],
            "ratio": asdict(tok.ratios),
        },
        "first_token_ms": {
            "ffi": [a for a, _ in first],
            "reference": [b for _, b in first],
            "ratio": asdict(ftl.ratios),
        },
    }
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "overhead.json", json.dumps(result, indent=2) + "\n")
    return result


def bench_platform(
    matrix: Matrix,
    platform_id: str,
    libraries: dict[str, Path],
    opts: BenchOptions,
    log: Log,
    baseline_library: Callable[[str, Cell], tuple[Path, bool]] | None = None,
    reference_run: Callable[[str, bool], AgreementRun] | None = None,
    only: frozenset[str] | None = None,
    alone: Alone = nullcontext,
) -> tuple[list[CheckOutcome], dict[str, object] | None]:
    """reference_run(platform id, with logits): the no-gate run of another platform with
    the same settings, for cross-arch-agreement (its FFI run, or its reference runner's with
    every step's logits). `only`: the check ids to judge (a verify's steps:
    one bundle's checks); None: every byte-identity check of the cells. `alone`: where the
    runs are timed (the seam overhead, the drafter speedup), nothing else may run."""
    # Cells without a byte-identity check (a sanitizer variant's) are not benched here.
    cells = tuple(
        c
        for c in matrix.cells_of(platform_id)
        if c.id in libraries and any(k.kind in IDENTITY_KINDS for k in c.checks)
    )
    runs: dict[str, CellRuns] = {}
    outcomes: list[CheckOutcome] = []
    references: ReferenceRuns = {}
    for cell in cells:
        watch = Stopwatch()
        runs[cell.id] = run_cell(cell, libraries[cell.id], opts, log, references)
        r = runs[cell.id]
        for check in cell.checks:
            if only is not None and check.id not in only:
                continue
            if check.kind is CheckKind.BYTE_IDENTITY_REFERENCE:
                outcomes.append(
                    _ffi_versus(r, check.id, r.reference, f"{cell.id} reference", r.reference_path, watch)
                )
    none = next((r for r in runs.values() if not r.cell.gates), None)
    for cell in cells:
        r = runs[cell.id]
        for check in cell.checks:
            if only is not None and check.id not in only:
                continue
            watch = Stopwatch()
            if check.kind is CheckKind.BYTE_IDENTITY_GATES:
                if none is None:
                    outcomes.append(
                        skipped(
                            cell.id, check.id, f"{platform_id} has no no-gate cell to compare with", now()
                        )
                    )
                    continue
                outcomes.append(
                    _ffi_versus(r, check.id, none.ffi, f"{none.cell.id} FFI", none.ffi_path, watch)
                )
            elif check.kind is CheckKind.BYTE_IDENTITY_BASELINE:
                outcomes.append(baseline_outcome(cell, check.id, r, opts, log, baseline_library))
            elif check.kind is CheckKind.BYTE_IDENTITY_DRAFTER:
                # The speedup's rounds on the no-gate cell; in verify one round (identity and
                # stats) on gated cells, whose llama.cpp path is the same code
                # (byte-identity-gates); a bench session measures every cell.
                rounds = opts.drafter_pairs if not cell.gates or opts.speedup_on_every_cell else 1
                outcomes.append(drafter_outcome(r, check.id, opts, log, rounds, alone))
            elif check.kind is CheckKind.CROSS_ARCH_AGREEMENT:
                outcomes.append(agreement_outcome(r, check, reference_run, log))
    emulated = opts.runner is not None and opts.runner.emulated
    if emulated:
        log(f"{platform_id}: seam overhead not measured: timings under an emulator say nothing of the target")
    overhead = None
    if none is not None and not emulated:
        with alone():
            overhead = measure_overhead(none, opts, log)
    if overhead is not None and none is not None:
        outcomes = [
            _with_overhead(o, overhead) if _is_reference_check(o, none.cell, matrix) else o for o in outcomes
        ]
    return outcomes, overhead


def agreement_outcome(
    runs: CellRuns, check: Check, reference_run: Callable[[str, bool], AgreementRun] | None, log: Log
) -> CheckOutcome:
    """The cell's greedy output against its platform's agreement reference (matrix.yaml), on
    the check's bundle; with the reference's logits where the tolerance judges them."""
    cell = runs.cell
    watch = Stopwatch()
    if cell.platform.agreement is None or reference_run is None:
        reason = f"{cell.platform.id} declares no agreement reference (agreement: in matrix.yaml)"
        return outcome(cell.id, check.id, ran=0, passed=0, span=watch.span(), reason=reason, error=True)
    agreement = cell.platform.agreement.on(check.bundle)
    try:
        reference, reference_path, reference_logits = reference_run(
            agreement.reference, agreement.judges_logits
        )
    except RUN_ERRORS as exc:
        reason = f"no {agreement.reference} run to compare with: {str(exc)[-1500:]}"
        return outcome(cell.id, check.id, ran=0, passed=0, span=watch.span(), reason=reason, error=True)
    if agreement.judges_logits:
        return _logit_agreement(
            runs, check.id, agreement, (reference, reference_path, reference_logits), log, watch
        )
    result = token_agreement(
        runs.ffi, reference, left_label=f"{cell.id} FFI", right_label=f"{agreement.reference}.none FFI"
    )
    log(f"{cell.id}: {result.summary()}")
    ok = result.meets(agreement.min_token_agreement)
    first = result.divergences[0] if result.divergences else None
    return outcome(
        cell.id,
        check.id,
        ran=1,
        passed=1 if ok else 0,
        span=watch.span(),
        reason="" if ok else f"{result.summary()} (tolerance {agreement.min_token_agreement})",
        artifacts=(runs.ffi_path, reference_path, runs.library),
        metrics={
            "token_agreement": round(result.rate, 4),
            "tokens_compared": result.positions,
            "min_token_agreement": agreement.min_token_agreement,
        },
        log_tail="\n".join(
            [result.summary()] + [d.describe(result.left, result.right) for d in result.divergences]
        )[-4000:],
        details={
            "summary": result.summary(),
            "reference_platform": agreement.reference,
            "first_divergence": first.describe(result.left, result.right) if first else "",
            "problems": list(result.problems),
        },
    )


def _logit_agreement(
    runs: CellRuns, check_id: str, agreement: Agreement, reference: AgreementRun, log: Log, watch: Stopwatch
) -> CheckOutcome:
    """Tokens tie-aware (the reference's top-two gap at a first divergence), and the logits'
    NMSE at every step both builds reached from the same prefix (eliza.core.logit_error)."""
    cell = runs.cell
    ref_run, ref_path, ref_logits = reference
    label = f"{agreement.reference}.none"
    rule = BackendAgreement(
        compare="tokens", min_token_agreement=agreement.min_token_agreement, tie_margin=agreement.tie_margin
    )
    try:
        if ref_logits is None or runs.reference_logits is None:
            raise LogitsFormatError("a reference runner wrote no logits")
        if [p.tokens for p in runs.reference.prompts] != [p.tokens for p in runs.ffi.prompts]:
            raise LogitsFormatError(
                f"{cell.id}: the reference runner's tokens differ from the FFI's; byte-identity-reference "
                "is the check that judges that"
            )
        verdict = judge(cell.id, ref_run, ref_run, runs.ffi, rule, against=label)
        shared = {
            p.index: (p.divergence + 1 if p.divergence is not None else p.positions + 1)
            for p in verdict.prompts
        }
        mine = parse_logits(runs.reference_logits.read_bytes(), str(runs.reference_logits))
        theirs = parse_logits(ref_logits.read_bytes(), str(ref_logits))
        # a prompt stopped by its end-of-generation token has one step more than tokens
        shared = {p: min(n, mine.steps(p), theirs.steps(p)) for p, n in shared.items()}
        error = logit_error(step_errors(mine, theirs, shared))
    except (AgreementInputError, LogitsFormatError, OSError) as exc:
        reason = f"cannot compare with {label}: {exc}"
        return outcome(cell.id, check_id, ran=0, passed=0, span=watch.span(), reason=reason, error=True)
    logit_files = (runs.reference_logits, ref_logits)  # every step's logits, both sides
    bound = agreement.max_logit_nmse
    logits_ok = bound is None or error.pooled <= bound
    summary = f"{verdict.summary()}; {error.words()}" + (f" (bound {bound:g})" if bound is not None else "")
    log(f"{cell.id}: {summary}")
    problems = [] if verdict.passed else [verdict.reason()]
    if not logits_ok:
        problems.append(f"{error.words()} exceeds the bound {bound:g}")
    return outcome(
        cell.id,
        check_id,
        ran=2,
        passed=int(verdict.passed) + int(logits_ok),
        span=watch.span(),
        reason="; ".join(problems),
        artifacts=(runs.ffi_path, runs.reference_path, ref_path, *logit_files, runs.library),
        metrics={
            "token_agreement": round(verdict.agreement, 4),
            "tokens_compared": verdict.positions,
            "min_token_agreement": agreement.min_token_agreement,
            "tie_margin": agreement.tie_margin,
            "logit_nmse": float(f"{error.pooled:.4g}"),
            "logit_nmse_worst_step": float(f"{error.worst:.4g}"),
            "logit_nmse_median_step": float(f"{error.median:.4g}"),
            "logit_steps_compared": error.steps,
            **({"max_logit_nmse": bound} if bound is not None else {}),
        },
        log_tail="\n".join([summary] + [p.words() for p in verdict.prompts])[-4000:],
        details={
            "summary": summary,
            "reference_platform": agreement.reference,
            "first_divergence": next((p.words() for p in verdict.prompts if p.divergence is not None), ""),
            "worst_logit_step": {"prompt": error.worst_at[0], "step": error.worst_at[1]},
            "problems": problems,
        },
    )


def _is_reference_check(o: CheckOutcome, cell: Cell, matrix: Matrix) -> bool:
    return o.cell == cell.id and matrix.check(o.check).kind is CheckKind.BYTE_IDENTITY_REFERENCE


# The seam's overhead, FFI ÷ plain llama.h decode tok/s on the same build, is judged with the
# perf check's rule for decode: a regression is an interval wholly below 1 - 0.05, p < 0.05.
# On a software GPU (lavapipe) both sides run the same shaders: the ratio still says what
# the seam costs, though neither speed says anything of a GPU's.
SEAM_OVERHEAD_RULE = MetricRule(metric="seam_overhead", direction=Direction.HIGHER, bound=0.05)


def _with_overhead(o: CheckOutcome, overhead: dict[str, object]) -> CheckOutcome:
    """The seam-overhead ratio belongs to the no-gate cell's FFI-vs-reference evidence, and
    a decisive regression of it fails that evidence."""
    decode = overhead["decode_tok_s"]
    ratio = decode["ratio"]  # type: ignore[index]
    # The perf check's statistics (eliza.core.perf_stats) over the same samples: the
    # median ratio's bootstrap 95 % interval and the Mann-Whitney U p of FFI vs reference.
    stats = perf_compare("seam_overhead", decode["ffi"], decode["reference"])  # type: ignore[index]
    metrics = dict(o.metrics) | {
        "seam_overhead_ratio": round(float(ratio["median"]), 4),
        "seam_overhead_ratio_q1": round(float(ratio["q1"]), 4),
        "seam_overhead_ratio_q3": round(float(ratio["q3"]), 4),
        "seam_overhead_ci_low": round(stats.low, 4),
        "seam_overhead_ci_high": round(stats.high, 4),
        "seam_overhead_p": round(stats.p_value, 6),
    }
    verdict = perf_judge(stats, SEAM_OVERHEAD_RULE)
    details = dict(o.details) | {"overhead": overhead, "seam_overhead": verdict.words}
    if verdict.verdict is not Verdict.FAILED:
        return replace(o, metrics=metrics, details=details)
    reason = "; ".join(r for r in (o.reason, f"the seam costs decode speed: {verdict.words}") if r)
    return replace(
        o,
        status=Status.FAILED,
        passed=min(o.passed, o.ran - 1),
        reason=reason,
        metrics=metrics,
        details=details,
    )


def baseline_outcome(
    cell: Cell,
    check_id: str,
    runs: CellRuns,
    opts: BenchOptions,
    log: Log,
    baseline_library: Callable[[str, Cell], tuple[Path, bool]] | None,
) -> CheckOutcome:
    if opts.baseline is None or baseline_library is None:
        return skipped(cell.id, check_id, opts.no_baseline_reason, now())
    watch = Stopwatch()
    try:
        sha = resolve_commit(opts.baseline)
        library, built_now = baseline_library(sha, cell)
    except BaselineError as exc:
        return outcome(cell.id, check_id, ran=0, passed=0, span=watch.span(), reason=str(exc), error=True)
    # Cached per baseline library and bench binary too: a rebuilt baseline or bench tool re-runs.
    key = settings_key(opts.settings, library, runs.library.parent / "e2e_loop_bench")
    out = library.parent.parent / f"bench-{key}.jsonl"
    if out.is_file():
        base = load_run(out)
        log(f"baseline {sha[:12]}: reusing {out}")
    else:
        base = run_tool(
            bench_argv(runs.library.parent, library, opts.settings, f"baseline-{sha[:12]}", out),
            out,
            runner=opts.runner,
        )
        log(f"baseline {sha[:12]}: {'built and ' if built_now else ''}benched -> {out}")
    result = compare_identity(runs.ffi, base, left_label=f"{cell.id} FFI", right_label=f"baseline {sha[:12]}")
    done = identity_outcome(
        cell.id, check_id, result, watch.span(), [runs.ffi], (runs.ffi_path, out, runs.library)
    )
    return replace(done, details=dict(done.details) | {"baseline_ref": opts.baseline, "baseline_commit": sha})


def drafters_of(bundle: Path) -> list[tuple[str, Path]]:
    """The drafters a bundle is checked with: its draft model (when its manifest names one)
    and its text model drafting for itself (acceptance must then be 1)."""
    from eliza.formats.tiny_gguf import draft_model  # gguf and numpy: only where a bundle is read

    found: list[tuple[str, Path]] = []
    draft = draft_model(bundle)
    if draft is not None:
        found.append(("draft", draft))
    texts = sorted((bundle / "text").glob("*.gguf"))
    if texts:
        found.append(("self", texts[0]))
    return found


def drafter_rounds(
    runs: CellRuns, drafters: Sequence[tuple[str, Path]], opts: BenchOptions, rounds: int
) -> dict[str, list[tuple[BenchRun, Path]]]:
    """Rounds of the plain FFI bench and the bench with each drafter, on the overhead
    runs' decode threads, the order rotating from round to round so warm-up and drift
    favour no side. Each round's runs share everything but the drafter."""
    env = {"ELIZA_N_THREADS": str(opts.overhead_threads)}
    out = opts.out_dir / runs.cell.platform.id / runs.cell.gate_key / "drafter"
    build_dir, lib, cell_id, settings = runs.library.parent, runs.library, runs.cell.id, opts.settings
    models = dict(drafters)
    names = ["plain", *models]
    done: dict[str, list[tuple[BenchRun, Path]]] = {name: [] for name in names}
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            path = out / f"{name}-{i}.jsonl"
            argv = bench_argv(build_dir, lib, settings, cell_id, path)
            if name != "plain":
                argv = drafter_argv(build_dir, lib, settings, cell_id, path, models[name], opts.draft_max)
            done[name].append((run_tool(argv, path, env, runner=opts.runner), path))
    return done


def drafter_outcome(
    runs: CellRuns,
    check_id: str,
    opts: BenchOptions,
    log: Log,
    rounds: int,
    alone: Alone = nullcontext,
) -> CheckOutcome:
    """Greedy with each drafter vs greedy without, byte for byte, in every round; the
    drafter stats checked; acceptance, and with 3 rounds or more the speedup (decode tok/s
    with / without, one ratio per round), as metrics. Where identity breaks, each drafter's
    first divergence is in the details and the reason."""
    watch = Stopwatch()
    cell = runs.cell
    drafters = drafters_of(opts.settings.bundle)
    if not drafters:
        why = f"bundle {opts.settings.bundle} has no text model to draft with"
        return skipped(cell.id, check_id, why, now())
    # With 3 rounds or more the rounds time the speedup: nothing may run beside them.
    with alone() if rounds >= 3 else nullcontext():
        done = drafter_rounds(runs, drafters, opts, rounds)
    ran = passed = tokens = 0
    problems: list[str] = []
    reasons: list[str] = []
    report_lines: list[str] = []
    metrics: dict[str, float | int | str] = {}
    details: dict[str, object] = {}
    said: list[str] = []
    artifacts: list[Path] = [runs.library, *(path for _, path in done["plain"])]
    for label, model in drafters:
        first: IdentityResult | None = None
        for i, ((plain, _), (run, path)) in enumerate(zip(done["plain"], done[label], strict=True)):
            artifacts.append(path)
            result = compare_identity(
                plain, run, left_label=f"{cell.id} FFI round {i}", right_label=f"{label} drafter round {i}"
            )
            ran += result.prompts_compared
            passed += result.prompts_compared - len(result.divergences)
            tokens += result.tokens_compared
            problems += result.problems
            if first is None or (first.identical and not result.identical):
                first = result
        assert first is not None  # rounds >= 1
        run = done[label][0][0]
        stats = drafter_problems(f"{label} drafter", run, must_accept_all=label == "self")
        problems += stats
        reasons += ([] if first.identical else [f"{label} drafter: {first.summary()}"]) + stats
        report_lines.append(first.report())
        drafted, accepted = drafter_totals(run)
        acceptance = accepted / drafted if drafted else 0.0
        metrics[f"acceptance_{label}"] = round(acceptance, 4)
        metrics[f"drafted_{label}"] = drafted
        divergence = first.divergences[0] if first.divergences else None
        details[label] = {
            "model": str(model),
            "draft_max": opts.draft_max,
            "drafted": drafted,
            "accepted": accepted,
            "acceptance": acceptance,
            "identical": first.identical,
            "summary": first.summary(),
            "first_divergence": None if divergence is None else asdict(divergence),
        }
        log(f"{cell.id}: {label} drafter: {first.summary()}; acceptance {acceptance:.3f} of {drafted}")
        said.append(
            f"{label} drafter {'IDENTICAL' if first.identical else 'DIFFERENT'}, acceptance {acceptance:.3f}"
        )
    speedup: dict[str, object] = {}
    if rounds >= 3:
        for label, _ in drafters:
            pairs = [
                paired_decode_tok_s(drafted, plain)
                for (drafted, _), (plain, _) in zip(done[label], done["plain"], strict=True)
            ]
            report = ratio_report("decode tok/s", f"{label} drafter", "no drafter", pairs)
            log(f"{cell.id}: speedup with the {label} drafter: {report.describe()}")
            metrics[f"speedup_{label}"] = round(report.ratios.median, 4)
            metrics[f"speedup_{label}_q1"] = round(report.ratios.q1, 4)
            metrics[f"speedup_{label}_q3"] = round(report.ratios.q3, 4)
            speedup[label] = {"describe": report.describe(), "ratio": asdict(report.ratios), "rounds": rounds}
            r = report.ratios
            said.append(f"{label} speedup {r.median:.3f} (IQR {r.q1:.3f}..{r.q3:.3f})")
    metrics["tokens_compared"] = tokens
    return outcome(
        cell.id,
        check_id,
        ran=ran,
        passed=passed if not problems else 0,
        span=watch.span(),
        reason="; ".join(reasons),
        metrics=metrics,
        artifacts=tuple(artifacts),
        log_tail="\n".join(report_lines)[-4000:],
        details={
            "summary": "; ".join(said) + f" ({rounds} round{'s' if rounds > 1 else ''})",
            "drafters": details,
            "speedup": speedup,
            "rounds": rounds,
            "problems": problems,
        },
    )


def failed_outcomes(outcomes: Sequence[CheckOutcome]) -> list[CheckOutcome]:
    return [o for o in outcomes if o.status in (Status.FAILED, Status.ERROR)]


def run(job: Job, evidence: Run) -> list[CheckOutcome]:
    """The platform's bench: every cell of the job with a byte-identity check, and the
    references it compares with (the reference cell, the baseline, the agreement
    platform's reference cell), all built beforehand by the executor."""
    opts = job.bench
    if opts is None:
        raise ValueError("the byte-identity runner was given no bench settings")
    if job.target is not None:
        opts = replace(opts, runner=job.target)
    libraries = {str(c): path for c, path in job.libraries.items() if c.platform == job.platform.id}

    def baseline_library(sha: str, cell: Cell) -> tuple[Path, bool]:
        if sha not in job.baselines:
            raise BaselineError(
                f"baseline {sha[:12]} of {cell.platform.id} did not build (see this run's log)"
            )
        return job.baselines[sha], False

    agreement_runs: dict[tuple[str, bool], AgreementRun] = {}

    def reference_run(platform_id: str, logits: bool) -> AgreementRun:
        """The reference platform's no-gate run, here, with the same settings: its FFI run,
        or with `logits` its reference runner's (plain llama.h, which byte-identity-reference
        holds equal to the FFI's) with every step's logits; once per call, whichever of its
        cells asks first."""
        if (platform_id, logits) not in agreement_runs:
            cell = job.matrix.reference_cell(platform_id)
            if cell is None or cell.ref not in job.libraries:
                raise ValueError(f"{platform_id} has no reference cell library in this run")
            library = job.libraries[cell.ref]
            out = opts.out_dir / platform_id / "none" / "agreement-reference.jsonl"
            if logits:
                out = out.with_name("agreement-reference-logits.jsonl")
                kept = out.with_suffix(".logits")
                argv = reference_argv(library.parent, opts.settings, cell.id, out, kept)
                agreement_runs[(platform_id, logits)] = (run_tool(argv, out), out, kept)
            else:
                argv = bench_argv(library.parent, library, opts.settings, cell.id, out)
                agreement_runs[(platform_id, logits)] = (run_tool(argv, out), out, None)
        return agreement_runs[(platform_id, logits)]

    outcomes, _ = bench_platform(
        job.matrix,
        job.platform.id,
        libraries,
        opts,
        evidence.detail,
        baseline_library,
        reference_run,
        only=frozenset(s.check for s in job.steps),
        alone=job.alone,
    )
    return outcomes
