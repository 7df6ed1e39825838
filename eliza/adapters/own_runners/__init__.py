"""The second runtimes' own runners: each runtime driven by its own API on the artifact its
body in the library loads, with the same threads, prompts, token budget and greedy sampling,
timed as the bench tools time the body, so backend-perf can hold the body to what its runtime
gives by itself (a body slower than its own runtime is the body's cost, not the runtime's).

- LiteRT-LM (`litert-lm`): the engine's Python session API (`litert_lm`, the pinned
  litert-lm-api wheel, whose liblitert-lm.so the body loads) on the bundle's `.litertlm`.
- MLX (`mlx-coreml`): mlx_lm's model and generate_step on the bundle's converted `text/mlx/`,
  fed the very prompt ids of the body's run.

Each runner is a module run as its own process (`python -m`), writing eliza-bench/1 records."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from eliza.core.bench_records import BenchRun

# The runtime's factory (matrix.yaml gates: factory) -> its runner's module.
MODULES = {
    "litert-lm": "eliza.adapters.own_runners.litert_lm",
    "mlx-coreml": "eliza.adapters.own_runners.mlx_lm",
}
# The fewest repeats of each prompt in a run of a runtime (the best one counts): its body's
# and its own runner's, and both sides of backend-perf's rounds against llama.cpp. A
# LiteRT-LM run is cheap (Gemma's 64 tokens take under a second) and its prefill short (a
# 6-token prompt in about 45 ms, 0.3 ms on the tiny bundle), so one repeat's prefill moved by
# up to a quarter when another process woke; the best of three does not. Its decode on Gemma
# at 8 tokens a prompt, one repeat, read 74-93 tok/s from round to round on a noisy host
# (llama.cpp 75-86): undecided after six rounds (2026-12-07). An MLX run on Gemma takes about 15 s, and
# its body prefills at twice its own runner's speed: no repeat is added there.
MIN_REPEATS = {"litert-lm": 3}
# Runtimes whose body and own runner run a round's two sides at once, one process per core,
# where the host has a core for each side's threads: an MLX run on Gemma takes about 14 s a
# side, and side by side the two slow each other alike (each decoded about 2 % slower), so a
# round's ratio is as steady as when they take turns, or steadier (measured on linux-cpu.mlx,
# Gemma, 1 thread, 3 rounds: at once 1.011, 1.023, 1.021 in 14 s a round; in turn 0.958,
# 1.024, 0.998 in 27 s), and the window keeps both cores busy. A LiteRT-LM run takes about
# a second, and each side runs two threads of its own (the engine's, the stream's): in turn.
AT_ONCE = frozenset({"mlx-coreml"})
WORDS = {
    "litert-lm": "LiteRT-LM's session API (litert_lm) on the same .litertlm",
    "mlx-coreml": "mlx_lm's generate_step on the same text/mlx/ weights",
}


def runtime_repeats(factory: str, bench_repeats: int) -> int:
    """Repeats of each prompt in a run of the runtime: the bench's, at least its fewest."""
    return max(bench_repeats, MIN_REPEATS.get(factory, 1))


class OwnRunnerError(RuntimeError):
    """A runtime's own runner cannot run on this bundle; str() says why and what would fix it."""


@dataclass(frozen=True)
class OwnRunner:
    """One runtime's own runner on one bundle."""

    factory: str

    @property
    def words(self) -> str:
        return WORDS[self.factory]

    def at_once(self, threads: int, cores: int) -> bool:
        """Whether a round runs the body and this runner side by side: a runtime of AT_ONCE,
        on a host with `threads` cores for each side."""
        return self.factory in AT_ONCE and 2 * threads <= cores

    def repeats(self, bench_repeats: int) -> int:
        """Repeats of each prompt in a run of the body and of this runner."""
        return runtime_repeats(self.factory, bench_repeats)

    def argv(
        self,
        bundle: Path,
        prompts: Path,
        max_tokens: int,
        threads: int,
        repeats: int,
        out: Path,
        body: BenchRun,
    ) -> list[str]:
        """The command of one run; `body` is a run of the body on the same prompts (the MLX
        runner is fed its prompt ids)."""
        base = [sys.executable, "-m", MODULES[self.factory], "--max-tokens", str(max_tokens),
                "--threads", str(threads), "--repeats", str(repeats), "--out", str(out),
                "--cell", f"{self.factory} own runner"]  # fmt: skip
        text = bundle / "text"
        if self.factory == "litert-lm":
            model = next(iter(sorted(text.glob("*.litertlm"))), None)
            if model is None:
                raise OwnRunnerError(f"{bundle}: no text/*.litertlm for LiteRT-LM's own runner")
            record = json.loads(model.with_name(model.name + ".json").read_text(encoding="utf-8"))
            return [
                *base,
                "--model",
                str(model),
                "--prompts",
                str(prompts),
                "--context",
                str(record["context"]),
            ]
        ids = out.with_suffix(".ids.json")
        ids.parent.mkdir(parents=True, exist_ok=True)
        ids.write_text(json.dumps([list(p.prompt_tokens) for p in body.prompts]), encoding="utf-8")
        return [*base, "--model", str(text / "mlx"), "--prompt-ids", str(ids)]


def own_runner(factory: str) -> OwnRunner | None:
    """The runtime's own runner, or None for a runtime that has none here."""
    return OwnRunner(factory) if factory in MODULES else None
