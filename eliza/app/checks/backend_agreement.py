"""The backend-agreement check: each gate of the cell whose runtime exists on its platform,
hard-selected through ELIZA_LLM_BACKEND, against the llama.cpp path of the same library and
bundle, greedy, on the bundle's prompts (eliza.core.backend_agreement judges).

The cell's own tools, where the platform's binaries run (here, under its emulator or on
its lab device): the reference runner once (plain llama.h, which records llama.cpp's
top-two logit gap at every position; byte-identity-reference proves it generates exactly
what the llama.cpp path of the same library does), then e2e_loop_bench with each gate's
factory hard-selected. A hard selection either serves every stream with that backend or fails the
open, so a backend run that completes was served by it throughout: llama.cpp can never
answer in its place, and the record says which backend served and its runtime."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from eliza.adapters.bench_tools import BenchSettings, BenchToolError, bench_argv, reference_argv, run_tool
from eliza.app.checks.job import Job
from eliza.app.checks.runtimes import backends_of
from eliza.app.services.bundle import ensure_runtime_bundle, weight_cache_state
from eliza.app.services.clock import Stopwatch
from eliza.app.services.run import Run
from eliza.core.backend_agreement import AgreementInputError, AgreementVerdict, judge
from eliza.core.bench_records import BenchRun
from eliza.core.matrix import Gate
from eliza.core.outcome import CheckOutcome, outcome
from eliza.formats.files import sha256_file

MAX_TOKENS = 64  # per prompt: the default prompts then hold a few hundred positions
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


def run(job: Job, evidence: Run) -> list[CheckOutcome]:
    outcomes: list[CheckOutcome] = []
    bundle = ensure_runtime_bundle(evidence.bundle, job.matrix.gates)
    emulated = job.target is not None and job.target.emulated
    for cell, check in job.pairs():
        # A real model declares its own prompts and tokens (matrix.yaml bundles: bench).
        sizing = job.matrix.bundle(check.bundle).bench
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
        tools = library.parent
        env_of = {"ELIZA_N_THREADS": "1"}
        try:
            margins = run_tool(
                reference_argv(tools, settings, f"{cell.id} reference", out / "reference.jsonl"),
                out / "reference.jsonl",
                env_of,
                runner=job.target,
            )
        except BenchToolError as exc:
            outcomes.append(
                outcome(cell.id, check.id, ran=0, passed=0, span=watch.span(), reason=str(exc), error=True)
            )
            continue
        verdicts: list[AgreementVerdict] = []
        problems: list[str] = []
        served: dict[str, object] = {}
        for gate in backends_of(cell):
            path = out / f"{gate.factory}.jsonl"
            weight_cache = weight_cache_state(gate.id, bundle)
            try:
                got = run_tool(
                    bench_argv(tools, library, settings, f"{cell.id} {gate.factory}", path),
                    path,
                    {**env_of, "ELIZA_LLM_BACKEND": gate.factory},
                    runner=job.target,
                )
            except BenchToolError as exc:  # the backend could not serve: never llama.cpp instead
                problems.append(f"{gate.factory}: {exc}")
                continue
            if _served_by(got) != gate.factory:
                problems.append(f"{gate.factory}: the run names {_served_by(got)!r} as its backend")
                continue
            try:
                verdict = judge(gate.factory, margins, margins, got, gate.agreement_on(check.bundle))
            except AgreementInputError as exc:
                problems.append(f"{gate.factory}: {exc}")
                continue
            verdicts.append(verdict)
            served[gate.id] = {
                **runtime_identity(library, gate),
                **({"weight_cache": weight_cache} if weight_cache is not None else {}),
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
            evidence.detail(f"{cell.id}: backend-agreement: {verdict.summary()}")
        ran = len(verdicts) + len(problems)
        passed = sum(1 for v in verdicts if v.passed)
        reasons = problems + [v.reason() for v in verdicts if not v.passed]
        metrics: dict[str, float | int | str] = {}
        for v in verdicts:
            metrics[f"agreement_{v.backend}"] = round(v.agreement, 6)
            metrics[f"positions_{v.backend}"] = v.positions
        outcomes.append(
            outcome(
                cell.id,
                check.id,
                ran=ran,
                passed=passed,
                span=watch.span(),
                reason="; ".join(reasons)[:2000],
                metrics=metrics,
                details={
                    "summary": "; ".join(v.summary() for v in verdicts) or "no backend ran",
                    "backends": served,
                    "tolerance": {g.factory: vars(g.agreement_on(check.bundle)) for g in backends_of(cell)},
                    "ran_on": job.target.words if job.target is not None else "native",
                },
                artifacts=(library, out / "reference.jsonl"),
            )
        )
    return outcomes
