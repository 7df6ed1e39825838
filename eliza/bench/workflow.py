"""`nox -s bench-<platform>`: byte-identity comparisons declared in matrix.yaml, per cell,
and the seam-overhead ratio measured with interleaved repeats."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from eliza.bench.diff import (
    IdentityResult,
    RatioReport,
    compare_identity,
    ratio_report,
    run_decode_tok_s,
    run_first_token_ms,
)
from eliza.bench.records import BenchRun
from eliza.bench.tools import DEFAULT_PROMPTS, BenchSettings, bench_argv, reference_argv, run_tool
from eliza.evidence import Status
from eliza.matrix.model import Cell, CheckKind, Matrix
from eliza.outcome import CheckOutcome, Stopwatch, outcome, skipped
from eliza.paths import build_root

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    settings: BenchSettings
    baseline: str | None = None
    overhead_pairs: int = 9
    overhead_max_tokens: int = 256
    overhead_repeats: int = 3
    overhead_threads: int = 1
    out_dir: Path = build_root() / "bench"


def parse_bench_args(argv: Sequence[str], default_bundle: Path) -> BenchOptions:
    parser = argparse.ArgumentParser(prog="nox -s bench-<platform> --", description="bench options")
    parser.add_argument("--baseline", metavar="REF", help="also diff against a build of this git ref")
    parser.add_argument(
        "--bundle", type=Path, default=default_bundle, help="bundle dir (default: the tiny bundle)"
    )
    parser.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS, help="prompt file")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="repeats per prompt in the identity runs")
    parser.add_argument(
        "--overhead-pairs", type=int, default=9, help="interleaved FFI/reference pairs (>= 5)"
    )
    parser.add_argument(
        "--overhead-threads",
        type=int,
        default=1,
        help="decode threads for the overhead runs (default 1: the seam's cost is per call, and one "
        "thread keeps threadpool scheduling noise of small machines out of the ratio)",
    )
    parser.add_argument("--out", type=Path, default=build_root() / "bench")
    args = parser.parse_args(list(argv))
    if args.overhead_pairs < 5:
        parser.error("--overhead-pairs must be at least 5")
    settings = BenchSettings(
        bundle=args.bundle, prompts=args.prompts, max_tokens=args.max_tokens, repeats=args.repeats
    )
    return BenchOptions(
        settings=settings,
        baseline=args.baseline,
        overhead_pairs=args.overhead_pairs,
        out_dir=args.out,
        overhead_threads=args.overhead_threads,
    )


def settings_description(settings: BenchSettings) -> str:
    """What of the settings decides the output: everything but the bundle and prompt paths
    (their contents are fingerprinted on their own), plus the context-size override."""
    chosen = {k: v for k, v in asdict(settings).items() if k not in ("bundle", "prompts")}
    chosen["ELIZA_N_CTX"] = os.environ.get("ELIZA_N_CTX", "")
    return json.dumps(chosen, sort_keys=True)


DEFAULT_SETTINGS = settings_description(BenchSettings(bundle=Path(".")))


def settings_key(settings: BenchSettings, *binaries: Path) -> str:
    """Cache key of a bench run's inputs: settings, the bytes of prompts and bundle model,
    and of the binaries involved."""
    digest = hashlib.sha256(json.dumps(asdict(settings), default=str, sort_keys=True).encode())
    digest.update(settings.prompts.read_bytes())
    for binary in binaries:
        digest.update(hashlib.sha256(binary.read_bytes()).digest())
    for model in sorted((settings.bundle / "text").glob("*.gguf")):
        digest.update(hashlib.sha256(model.read_bytes()).digest())
    return digest.hexdigest()[:16]


def identity_outcome(
    cell: str,
    check: str,
    result: IdentityResult,
    watch: Stopwatch,
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
        watch=watch,
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


def run_cell(cell: Cell, library: Path, opts: BenchOptions, log: Log) -> CellRuns:
    out = opts.out_dir / cell.platform.id / cell.gate_key
    build_dir = library.parent
    ffi_path, ref_path = out / "ffi.jsonl", out / "reference.jsonl"
    ffi = run_tool(bench_argv(build_dir, library, opts.settings, cell.id, ffi_path), ffi_path)
    reference = run_tool(reference_argv(build_dir, opts.settings, cell.id, ref_path), ref_path)
    log(f"{cell.id}: {len(ffi.prompts)} prompts, {ffi.generated_tokens} tokens -> {ffi_path}")
    return CellRuns(
        cell=cell, library=library, ffi=ffi, ffi_path=ffi_path, reference=reference, reference_path=ref_path
    )


def measure_overhead(none: CellRuns, opts: BenchOptions, log: Log) -> dict[str, object]:
    """Interleaved FFI/reference runs on the no-gate cell; one ratio per pair. The order
    inside a pair alternates (AB, BA, ...) so warm-up and drift favour neither side."""
    settings = replace(opts.settings, repeats=opts.overhead_repeats, max_tokens=opts.overhead_max_tokens)
    env = {"ELIZA_N_THREADS": str(opts.overhead_threads)}
    out = opts.out_dir / none.cell.platform.id / "overhead"
    decode: list[tuple[float, float]] = []
    first: list[tuple[float, float]] = []
    build_dir = none.library.parent
    for i in range(opts.overhead_pairs):
        ffi_out, ref_out = out / f"ffi-{i}.jsonl", out / f"ref-{i}.jsonl"
        commands = {
            "ffi": (bench_argv(build_dir, none.library, settings, none.cell.id, ffi_out), ffi_out),
            "ref": (reference_argv(build_dir, settings, none.cell.id, ref_out), ref_out),
        }
        order = ("ffi", "ref") if i % 2 == 0 else ("ref", "ffi")
        done = {name: run_tool(*commands[name], env) for name in order}
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
    (out / "overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def bench_platform(
    matrix: Matrix,
    platform_id: str,
    libraries: dict[str, Path],
    opts: BenchOptions,
    log: Log,
    baseline_library: Callable[[str, Cell], tuple[Path, bool]] | None = None,
) -> tuple[list[CheckOutcome], dict[str, object] | None]:
    cells = tuple(c for c in matrix.cells_of(platform_id) if c.id in libraries)
    runs: dict[str, CellRuns] = {}
    outcomes: list[CheckOutcome] = []
    for cell in cells:
        watch = Stopwatch()
        runs[cell.id] = run_cell(cell, libraries[cell.id], opts, log)
        r = runs[cell.id]
        for check in cell.checks:
            if check.kind is CheckKind.BYTE_IDENTITY_REFERENCE:
                result = compare_identity(
                    r.ffi, r.reference, left_label=f"{cell.id} FFI", right_label=f"{cell.id} reference"
                )
                outcomes.append(
                    identity_outcome(
                        cell.id, check.id, result, watch, [r.ffi], (r.ffi_path, r.reference_path, r.library)
                    )
                )
    none = next((r for r in runs.values() if not r.cell.gates), None)
    for cell in cells:
        r = runs[cell.id]
        for check in cell.checks:
            watch = Stopwatch()
            if check.kind is CheckKind.BYTE_IDENTITY_GATES:
                if none is None:
                    outcomes.append(
                        skipped(cell.id, check.id, f"{platform_id} has no no-gate cell to compare with")
                    )
                    continue
                result = compare_identity(
                    r.ffi, none.ffi, left_label=f"{cell.id} FFI", right_label=f"{none.cell.id} FFI"
                )
                outcomes.append(
                    identity_outcome(
                        cell.id, check.id, result, watch, [r.ffi], (r.ffi_path, none.ffi_path, r.library)
                    )
                )
            elif check.kind is CheckKind.BYTE_IDENTITY_BASELINE:
                outcomes.append(baseline_outcome(cell, check.id, r, opts, log, baseline_library))
    overhead = measure_overhead(none, opts, log) if none is not None else None
    if overhead is not None and none is not None:
        outcomes = [
            _with_overhead(o, overhead) if _is_reference_check(o, none.cell, matrix) else o for o in outcomes
        ]
    return outcomes, overhead


def _is_reference_check(o: CheckOutcome, cell: Cell, matrix: Matrix) -> bool:
    return o.cell == cell.id and matrix.check(o.check).kind is CheckKind.BYTE_IDENTITY_REFERENCE


def _with_overhead(o: CheckOutcome, overhead: dict[str, object]) -> CheckOutcome:
    """The seam-overhead ratio belongs to the no-gate cell's FFI-vs-reference evidence."""
    ratio = overhead["decode_tok_s"]["ratio"]  # type: ignore[index]
    metrics = dict(o.metrics) | {
        "seam_overhead_ratio": round(float(ratio["median"]), 4),
        "seam_overhead_ratio_q1": round(float(ratio["q1"]), 4),
        "seam_overhead_ratio_q3": round(float(ratio["q3"]), 4),
    }
    return replace(o, metrics=metrics, details=dict(o.details) | {"overhead": overhead})


def baseline_outcome(
    cell: Cell,
    check_id: str,
    runs: CellRuns,
    opts: BenchOptions,
    log: Log,
    baseline_library: Callable[[str, Cell], tuple[Path, bool]] | None,
) -> CheckOutcome:
    if opts.baseline is None or baseline_library is None:
        return skipped(cell.id, check_id, "no baseline given: run the bench with --baseline REF")
    from eliza.baseline import BaselineError, resolve_commit

    watch = Stopwatch()
    try:
        sha = resolve_commit(opts.baseline)
        library, built_now = baseline_library(sha, cell)
    except BaselineError as exc:
        return outcome(cell.id, check_id, ran=0, passed=0, watch=watch, reason=str(exc), error=True)
    # Cached per baseline library and bench binary too: a rebuilt baseline or bench tool re-runs.
    key = settings_key(opts.settings, library, runs.library.parent / "e2e_loop_bench")
    out = library.parent.parent / f"bench-{key}.jsonl"
    if out.is_file():
        from eliza.bench.records import load_run

        base = load_run(out)
        log(f"baseline {sha[:12]}: reusing {out}")
    else:
        base = run_tool(
            bench_argv(runs.library.parent, library, opts.settings, f"baseline-{sha[:12]}", out), out
        )
        log(f"baseline {sha[:12]}: {'built and ' if built_now else ''}benched -> {out}")
    result = compare_identity(runs.ffi, base, left_label=f"{cell.id} FFI", right_label=f"baseline {sha[:12]}")
    done = identity_outcome(cell.id, check_id, result, watch, [runs.ffi], (runs.ffi_path, out, runs.library))
    return replace(done, details=dict(done.details) | {"baseline_ref": opts.baseline, "baseline_commit": sha})


def failed_outcomes(outcomes: Sequence[CheckOutcome]) -> list[CheckOutcome]:
    return [o for o in outcomes if o.status in (Status.FAILED, Status.ERROR)]
