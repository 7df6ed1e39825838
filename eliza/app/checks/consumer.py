"""The consumer check: the Node (koffi) and JVM (JNI) consumers of the released C ABI drive
the cell's library through the whole lifecycle (docs/consumers.md), and their greedy
tokens must equal the reference runner's (plain llama.h, same build, same prompts)."""

from __future__ import annotations

from pathlib import Path

from eliza.adapters.bench_tools import BenchSettings, reference_argv, run_tool
from eliza.adapters.consumers import CONSUMERS, build_jni, run_consumer
from eliza.app.checks.job import Job
from eliza.app.services.clock import Stopwatch
from eliza.app.services.run import Run
from eliza.core.consumers import EXIT_ABI_MISMATCH, EXIT_RUNTIME_MISSING, judge
from eliza.core.layout import default_prompts
from eliza.core.outcome import CheckOutcome, SubCheck, from_subchecks

MAX_TOKENS = 16


def _programs(repo: Path, work: Path) -> dict[str, list[str]]:
    """How each consumer is started: node on its script; the JNI launcher, built first."""
    return {
        "node": ["node", str(repo / "native" / "consumers" / "node" / "consumer.js")],
        "jni": [str(build_jni(repo, work / "jni"))],
    }


def run(job: Job, evidence: Run) -> list[CheckOutcome]:
    repo = evidence.project.repo
    work = evidence.project.build_root / "consumers"
    programs = _programs(repo, work)
    prompts = default_prompts(repo)
    settings = BenchSettings(bundle=evidence.bundle, prompts=prompts, max_tokens=MAX_TOKENS, repeats=1)
    outcomes = []
    for cell, check in job.pairs():
        watch = Stopwatch()
        library = job.library(cell)
        out = work / cell.platform.id / cell.key
        reference_path = out / "reference.jsonl"
        reference = run_tool(
            reference_argv(library.parent, settings, cell.id, reference_path), reference_path
        )
        subs: list[SubCheck] = []
        details: dict[str, object] = {}
        metrics: dict[str, float | int | str] = {}
        artifacts: list[Path] = [library, reference_path]
        logs: list[str] = []
        for name in CONSUMERS:
            result_path = out / f"{name}.json"
            done = run_consumer(
                name, programs[name], library, evidence.bundle, prompts, MAX_TOKENS, result_path
            )
            logs.append(done.log)
            if done.exit_status == EXIT_RUNTIME_MISSING or done.result is None:
                why = "its runtime is missing" if done.exit_status == EXIT_RUNTIME_MISSING else "no result"
                said = done.log.strip().splitlines()[-1:] or [""]
                subs.append(
                    SubCheck(
                        name=f"{name}: ran",
                        ok=False,
                        detail=f"exit {done.exit_status}, {why}: {said[0][:300]}",
                    )
                )
                continue
            if done.exit_status == EXIT_ABI_MISMATCH:
                abi = done.result.get("abi", {})
                subs.append(
                    SubCheck(
                        name=f"{name}: accepts the library's ABI version",
                        ok=False,
                        detail=f"refused: library ABI {abi.get('library')}, "
                        f"consumer ABI {abi.get('expected')}",
                    )
                )
                continue
            verdict = judge(name, done.result, reference)
            subs += verdict.subchecks
            artifacts.append(result_path)
            metrics[f"{name}_steps_passed"] = verdict.steps_passed
            metrics[f"{name}_steps"] = verdict.steps
            details[name] = {
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
                details={**details, "consumers": list(CONSUMERS), "log": "\n".join(logs)[-4000:]},
                metrics=metrics,
            )
        )
    return outcomes
