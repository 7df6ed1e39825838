"""backend-perf holds each runtime's body to its runtime's own runner, whatever a waiver
accepts against llama.cpp: in a copy of the repository (llama.cpp from the caller's Conan
cache; only libelizainference is rebuilt), a sleep of about a tenth of a Gemma decode step
planted per token in one body's next() fails that body's cell (own_runner_decode FAILED on
Gemma's paired rounds) and leaves the other runtime's cell VERIFIED; then the other way round.

Slow tier: two verifies of two runtime cells with both bundles (about ten minutes each)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.ci.helpers import copy_tree, env_for
from tests.integration.test_synthetic_gate import run
from tests.plants import edit
from tests.signing import predicate

LITERT, MLX = "linux-cpu.litert", "linux-cpu.mlx"
# Where each body spends its time per token: its next(), which the stream's caller waits
# for (the LiteRT-LM engine computes a step only when the stream asks for one, so a cost
# there is not hidden behind the engine's next step).
PER_TOKEN = "        if (drafted_out) *drafted_out = 0;  // no drafter on this runtime\n"
# A tenth of a decode step on Gemma 3 270M, one thread: LiteRT-LM about 10-13 ms, MLX about 185 ms.
SLEEPS_US = {"litert": 1200, "mlx": 18000}


@pytest.fixture(scope="module", autouse=True)
def _runtimes_run_here() -> None:
    from eliza.app.project import capability, load_project_matrix

    if not capability(load_project_matrix().platform("linux-cpu")).can_build:
        pytest.skip("linux-cpu cannot be built on this host")


def plant_sleep(repo: Path, gate: str) -> None:
    rel = f"native/src/backends/{gate}.cpp"
    edit(repo, rel, "#include <atomic>\n", "#include <atomic>\n#include <chrono>\n#include <thread>\n")
    sleep = f"        std::this_thread::sleep_for(std::chrono::microseconds({SLEEPS_US[gate]}));\n"
    edit(repo, rel, PER_TOKEN, PER_TOKEN + sleep)


def backend_perf(repo: Path, cell: str) -> list[dict[str, Any]]:
    return [
        predicate(repo / "build" / "evidence" / f"{cell}__backend-perf{suffix}.json")
        for suffix in ("", ".gemma3-270m")
    ]


def failed_rows(record: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (m["backend"], m["metric"]) for m in record["details"]["perf"]["metrics"] if m["verdict"] == "failed"
    ]


@pytest.mark.parametrize("planted, spared", [("litert", "mlx"), ("mlx", "litert")])
def test_a_sleep_planted_in_one_body_fails_its_cell_only(tmp_path: Path, planted: str, spared: str) -> None:
    repo = copy_tree(tmp_path / "repo")
    env = env_for(repo)
    plant_sleep(repo, planted)
    cells = {"litert": LITERT, "mlx": MLX}
    done = run(repo, "-m", "nox", "-s", "verify", "--", "--cell", LITERT, "--cell", MLX, env=env)
    assert done.returncode != 0, done.stdout[-3000:]
    factory = {"litert": "litert-lm", "mlx": "mlx-coreml"}[planted]
    gemma = backend_perf(repo, cells[planted])[1]
    assert gemma["status"] == "failed", gemma["reason"]
    rows = {(m["backend"], m["metric"]): m["verdict"] for m in gemma["details"]["perf"]["metrics"]}
    assert rows[(factory, "own_runner_decode")] == "failed", gemma["reason"]
    for record in backend_perf(repo, cells[spared]):
        assert record["status"] == "passed", record["reason"]
