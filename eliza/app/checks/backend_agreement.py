"""The backend-agreement check: each gate of the cell whose runtime exists on its platform,
hard-selected through ELIZA_LLM_BACKEND, against the llama.cpp path of the same library and
bundle, greedy, on the bundle's prompts (eliza.core.backend_agreement judges).

The cell's own tools, where the platform's binaries run (here, under its emulator or on
its lab device): the reference runner once (plain llama.h, which records llama.cpp's
top-two logit gap at every position; byte-identity-reference proves it generates exactly
what the llama.cpp path of the same library does), then e2e_loop_bench with each gate's
factory hard-selected. A hard selection either serves every stream with that backend or fails the
open, so a backend run that completes was served by it throughout: llama.cpp can never
answer in its place, and the record says which backend served and its runtime.

A bundle whose bench names `long_prompts` gets a second case on them, prompts longer than
its model's sliding window (Gemma 3: 512 rows; ring caches in the .litertlm), judged by the
same tolerance; both cases must pass. Its runs also give each side's prefill and decode speed
at that length (llama.cpp: the reference runner on plain llama.h), recorded as information,
not judged: backend-perf judges speed."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

from eliza.adapters.bench_tools import BenchSettings, BenchToolError, bench_argv, reference_argv, run_tool
from eliza.app.checks.job import Job
from eliza.app.checks.perf import run_metrics
from eliza.app.checks.runtimes import backends_of
from eliza.app.services.bench_options import bundle_long_prompts
from eliza.app.services.bundle import ensure_runtime_bundle, weight_cache_state
from eliza.app.services.clock import Stopwatch
from eliza.app.services.run import Run
from eliza.core.backend_agreement import AgreementInputError, AgreementVerdict, judge, past_the_window
from eliza.core.bench_records import BenchRun
from eliza.core.matrix import BackendAgreement, Cell, Gate
from eliza.core.outcome import CheckOutcome, outcome
from eliza.formats.files import sha256_file

MAX_TOKENS = 64  # per prompt: the default prompts then hold a few hundred positions
# Per prompt past the window (bench.long_prompts): enough greedy tokens to judge where the
# local layers' windows no longer reach the prompt's start.
LONG_MAX_TOKENS = 16
# Under an emulator a runtime's decode is slow (LiteRT-LM's XNNPACK under qemu: 111 s for the
# default prompts at 64 tokens, 32 s at 16): the same prompts, 16 tokens each.
EMULATED_MAX_TOKENS = 16


def runtime_identity(library: Path, gate: Gate) -> dict[str, str]:
    """What served: the runtime's package and the sha256 of what the gate loads from beside
    the library: its module (MLX: libelizainference-mlx.so), or the runtime itself in its
    wheel's folder (LiteRT-LM: litert_lm/liblitert-lm.so)."""
    module = library.parent / f"libelizainference-{gate.id}.so"
    if not module.is_file():
        folder = library.parent / gate.runtime_package.partition("/")[0].replace("-", "_")
        module = next(iter(sorted(folder.glob("*.so"))), module)
    return {
        "factory": gate.factory,
        "runtime_package": gate.runtime_package,
        "module": module.relative_to(library.parent).as_posix() if module.is_file() else "",
        "module_sha256": sha256_file(module) if module.is_file() else "",
    }


def _served_by(run: BenchRun) -> str:
    build = run.header.get("build") or {}
    return str(build.get("llm_backend") or "")


@dataclass(frozen=True)
class Case:
    """One prompt file the runtimes are judged on: "" the bundle's prompts, "long" those past
    its model's window."""

    name: str
    settings: BenchSettings
    out: Path

    def key(self, backend: str) -> str:
        return f"{backend}_{self.name}" if self.name else backend


@dataclass
class CaseResults:
    verdicts: list[tuple[Case, AgreementVerdict]]
    problems: list[str]
    served: dict[str, object]
    long: dict[str, object]  # each gate's verdict on the long prompts
    speed: dict[str, dict[str, float]]


def _rule(gate: Gate, bundle: str, case: Case) -> BackendAgreement:
    """The gate's tolerance on the bundle; on the long prompts without its floor."""
    rule = gate.agreement_on(bundle)
    return past_the_window(rule) if case.name else rule


def _speed(run: BenchRun) -> dict[str, float]:
    """A run's prefill and decode tok/s, as the perf checks read them (run_metrics: each
    prompt's best, the median over prompts), with its median prompt length."""
    metrics = run_metrics(run)
    return {
        "prompt_tokens": float(median(len(p.prompt_tokens) for p in run.prompts)) if run.prompts else 0.0,
        "prefill_tok_s": round(metrics["prefill_tok_s"], 2),
        "decode_tok_s": round(metrics["decode_tok_s"], 2),
    }


def _run_case(
    job: Job, cell: Cell, check_bundle: str, case: Case, evidence: Run, results: CaseResults
) -> bool:
    """The reference runner, then each gate's runtime, on one case's prompts; False when the
    reference itself could not run (its error is the first problem)."""
    library = job.library(cell)
    tools = library.parent
    env_of = {"ELIZA_N_THREADS": "1"}
    label = f" ({case.name})" if case.name else ""
    try:
        margins = run_tool(
            reference_argv(tools, case.settings, f"{cell.id} reference{label}", case.out / "reference.jsonl"),
            case.out / "reference.jsonl",
            env_of,
            runner=job.target,
        )
    except BenchToolError as exc:
        results.problems.append(f"reference{label}: {exc}")
        return False
    if case.name:
        results.speed["llama.cpp"] = _speed(margins)
    for gate in backends_of(cell):
        path = case.out / f"{gate.factory}.jsonl"
        weight_cache = weight_cache_state(gate.id, case.settings.bundle)
        try:
            got = run_tool(
                bench_argv(tools, library, case.settings, f"{cell.id} {gate.factory}{label}", path),
                path,
                {**env_of, "ELIZA_LLM_BACKEND": gate.factory},
                runner=job.target,
            )
        except BenchToolError as exc:  # the backend could not serve: never llama.cpp instead
            results.problems.append(f"{gate.factory}{label}: {exc}")
            continue
        if _served_by(got) != gate.factory:
            results.problems.append(
                f"{gate.factory}{label}: the run names {_served_by(got)!r} as its backend"
            )
            continue
        try:
            verdict = judge(gate.factory, margins, margins, got, _rule(gate, check_bundle, case))
        except AgreementInputError as exc:
            results.problems.append(f"{gate.factory}{label}: {exc}")
            continue
        results.verdicts.append((case, verdict))
        if case.name:
            results.speed[gate.factory] = _speed(got)
        entry = {
            "summary": verdict.summary(),
            "prompts": [
                {
                    "index": p.index,
                    "positions": p.positions,
                    "agreed": p.agreed,
                    "divergence": p.divergence,
                    "margin": p.margin,
                    "allowed": p.allowed,
                }
                for p in verdict.prompts
            ],
        }
        if case.name:
            results.long[gate.id] = {**entry, "prompt_tokens": [len(p.prompt_tokens) for p in got.prompts]}
        else:
            results.served[gate.id] = {
                **runtime_identity(library, gate),
                **({"weight_cache": weight_cache} if weight_cache is not None else {}),
                **entry,
            }
        evidence.detail(f"{cell.id}: backend-agreement{label}: {verdict.summary()}")
    return True


def run(job: Job, evidence: Run) -> list[CheckOutcome]:
    outcomes: list[CheckOutcome] = []
    bundle = ensure_runtime_bundle(evidence.bundle, job.matrix.gates)
    emulated = job.target is not None and job.target.emulated
    for cell, check in job.pairs():
        # A real model declares its own prompts and tokens (matrix.yaml bundles: bench).
        declared = job.matrix.bundle(check.bundle)
        sizing = declared.bench
        max_tokens = EMULATED_MAX_TOKENS if emulated else (sizing.max_tokens or MAX_TOKENS)
        settings = BenchSettings(bundle=bundle, max_tokens=max_tokens, repeats=1)
        if evidence.prompts is not None:
            settings = replace(settings, prompts=evidence.prompts)
        watch = Stopwatch()
        library = job.library(cell)
        # a bundle's own folder beside the fixture's (the layout of the bench options' out_dir):
        # the runs of two bundles may go side by side and each record names its own files
        bench = evidence.project.build_root / "bench"
        if check.bundle != job.matrix.default_bundle.id:
            bench = bench / check.bundle
        out = bench / cell.platform.id / cell.key / "backends"
        cases = [Case("", settings, out)]
        long_prompts = bundle_long_prompts(evidence.project.repo, declared)
        if long_prompts is not None and not emulated:
            long_settings = replace(
                settings, prompts=long_prompts, max_tokens=sizing.long_max_tokens or LONG_MAX_TOKENS
            )
            cases.append(Case("long", long_settings, out / "long"))
        results = CaseResults(verdicts=[], problems=[], served={}, long={}, speed={})
        if not _run_case(job, cell, check.bundle, cases[0], evidence, results):
            outcomes.append(
                outcome(
                    cell.id,
                    check.id,
                    ran=0,
                    passed=0,
                    span=watch.span(),
                    reason=results.problems[0],
                    error=True,
                )
            )
            continue
        for case in cases[1:]:
            _run_case(job, cell, check.bundle, case, evidence, results)
        verdicts, problems = results.verdicts, results.problems
        ran = len(verdicts) + len(problems)
        passed = sum(1 for _, v in verdicts if v.passed)
        reasons = problems + [
            f"{c.name} prompts: {v.reason()}" if c.name else v.reason() for c, v in verdicts if not v.passed
        ]
        metrics: dict[str, float | int | str] = {}
        for case, v in verdicts:
            metrics[f"agreement_{case.key(v.backend)}"] = round(v.agreement, 6)
            metrics[f"positions_{case.key(v.backend)}"] = v.positions
        for side, figures in results.speed.items():
            metrics[f"long_prefill_tok_s_{side}"] = figures["prefill_tok_s"]
            metrics[f"long_decode_tok_s_{side}"] = figures["decode_tok_s"]
        summary = "; ".join(
            f"{v.summary()} ({c.name} prompts)" if c.name else v.summary() for c, v in verdicts
        )
        details: dict[str, object] = {
            "summary": summary or "no backend ran",
            "backends": results.served,
            "tolerance": {g.factory: vars(g.agreement_on(check.bundle)) for g in backends_of(cell)},
            **(
                {
                    "long_tolerance": {
                        g.factory: vars(_rule(g, check.bundle, cases[1])) for g in backends_of(cell)
                    }
                }
                if len(cases) > 1
                else {}
            ),
            "ran_on": job.target.words if job.target is not None else "native",
        }
        if len(cases) > 1:
            details["long_context"] = {
                "prompts": cases[1].settings.prompts.as_posix(),
                "backends": results.long,
                "max_tokens": cases[1].settings.max_tokens,
                "threads": 1,
                # information, not judged: plain llama.h for llama.cpp, the library for a runtime
                "speed": results.speed,
            }
        outcomes.append(
            outcome(
                cell.id,
                check.id,
                ran=ran,
                passed=passed,
                span=watch.span(),
                reason="; ".join(reasons)[:2000],
                metrics=metrics,
                details=details,
                artifacts=(library, out / "reference.jsonl"),
            )
        )
    return outcomes
