"""The consumer check: the Node (koffi) and JVM (JNI) consumers of the released C ABI drive
the cell's library through the whole lifecycle (docs/consumers.md), and their greedy
tokens must equal the reference runner's (plain llama.h, same build, same prompts). On a
cell with a gate whose runtime its platform has, they also drive it through that runtime
(ELIZA_LLM_BACKEND hard-selected, the bundle with its artifact): cancel from a thread,
resets, slots and errors through the real backend, tokens equal to the cell's own bench
served by it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from eliza.adapters.bench_tools import BenchSettings, bench_argv, reference_argv, run_tool
from eliza.adapters.consumers import CONSUMERS, build_jni, run_consumer
from eliza.app.checks.job import Job
from eliza.app.checks.runtimes import backends_of
from eliza.app.services.bundle import ensure_runtime_bundle
from eliza.app.services.clock import Stopwatch
from eliza.app.services.run import Run
from eliza.core.consumers import EXIT_ABI_MISMATCH, EXIT_RUNTIME_MISSING, judge
from eliza.core.layout import default_prompts
from eliza.core.matrix import Cell, Gate
from eliza.core.outcome import CheckOutcome, SubCheck, from_subchecks

MAX_TOKENS = 16


def _programs(repo: Path, work: Path) -> dict[str, list[str]]:
    """How each consumer is started: node on its script; the JNI launcher, built first."""
    return {
        "node": ["node", str(repo / "native" / "consumers" / "node" / "consumer.js")],
        "jni": [str(build_jni(repo, work / "jni"))],
    }


@dataclass(frozen=True)
class Pass:
    """One pass of the consumers over a cell's library: through the llama.cpp path (label
    "") against the reference runner, or through a gate's runtime, hard-selected (label: its
    factory), against the cell's own e2e_loop_bench served by that runtime."""

    label: str
    bundle: Path
    env: dict[str, str] = field(default_factory=dict)


def passes(cell: Cell, evidence: Run, gates: tuple[Gate, ...]) -> list[Pass]:
    found = [Pass("", evidence.bundle)]
    backends = backends_of(cell)
    if backends:
        bundle = ensure_runtime_bundle(evidence.bundle, gates)
        found += [Pass(g.factory, bundle, {"ELIZA_LLM_BACKEND": g.factory}) for g in backends]
    return found


def run(job: Job, evidence: Run) -> list[CheckOutcome]:
    repo = evidence.project.repo
    work = evidence.project.build_root / "consumers"
    programs = _programs(repo, work)
    prompts = evidence.prompts or default_prompts(repo)  # the bundle's prompts
    outcomes = []
    for cell, check in job.pairs():
        watch = Stopwatch()
        library = job.library(cell)
        subs: list[SubCheck] = []
        details: dict[str, object] = {}
        metrics: dict[str, float | int | str] = {}
        artifacts: list[Path] = [library]
        logs: list[str] = []
        for one in passes(cell, evidence, job.matrix.gates):
            on_bundle = "" if check.bundle == job.matrix.default_bundle.id else check.bundle
            out = work / cell.platform.id / cell.key / on_bundle / (one.label or "llama.cpp")
            settings = BenchSettings(bundle=one.bundle, prompts=prompts, max_tokens=MAX_TOKENS, repeats=1)
            reference_path = out / "reference.jsonl"
            argv = (
                bench_argv(library.parent, library, settings, f"{cell.id} {one.label}", reference_path)
                if one.label
                else reference_argv(library.parent, settings, cell.id, reference_path)
            )
            reference = run_tool(argv, reference_path, one.env or None)
            artifacts.append(reference_path)
            prefix = f"{one.label}: " if one.label else ""
            for name in CONSUMERS:
                result_path = out / f"{name}.json"
                done = run_consumer(
                    name,
                    programs[name],
                    library,
                    one.bundle,
                    prompts,
                    MAX_TOKENS,
                    result_path,
                    one.env or None,
                )
                logs.append(done.log)
                if done.exit_status == EXIT_RUNTIME_MISSING or done.result is None:
                    why = (
                        "its runtime is missing" if done.exit_status == EXIT_RUNTIME_MISSING else "no result"
                    )
                    said = done.log.strip().splitlines()[-1:] or [""]
                    subs.append(
                        SubCheck(
                            name=f"{prefix}{name}: ran",
                            ok=False,
                            detail=f"exit {done.exit_status}, {why}: {said[0][:300]}",
                        )
                    )
                    continue
                if done.exit_status == EXIT_ABI_MISMATCH:
                    abi = done.result.get("abi", {})
                    subs.append(
                        SubCheck(
                            name=f"{prefix}{name}: accepts the library's ABI version",
                            ok=False,
                            detail=f"refused: library ABI {abi.get('library')}, "
                            f"consumer ABI {abi.get('expected')}",
                        )
                    )
                    continue
                verdict = judge(name, done.result, reference)
                subs += [replace(sub, name=prefix + sub.name) for sub in verdict.subchecks]
                artifacts.append(result_path)
                key = f"{one.label}.{name}" if one.label else name
                metrics[f"{key}_steps_passed"] = verdict.steps_passed
                metrics[f"{key}_steps"] = verdict.steps
                details[f"{name} via {one.label}" if one.label else name] = {
                    "runtime": done.result.get("runtime", ""),
                    "exit_status": done.exit_status,
                    "cancel": done.result.get("cancel", {}),
                    "errors": done.result.get("errors", []),
                }
        outcomes.append(
            from_subchecks(
                cell.id,
                check.id,
                subs,
                watch.span(),
                artifacts=tuple(artifacts),
                details={
                    **details,
                    "consumers": list(CONSUMERS),
                    "backends": [g.factory for g in backends_of(cell)],
                    "log": "\n".join(logs)[-4000:],
                },
                metrics=metrics,
            )
        )
    return outcomes
