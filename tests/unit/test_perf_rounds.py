"""The perf runner's rounds: declared rounds that cannot decide are followed by as many
again, once, and the verdict is that of all of them; `--rounds N` runs exactly N. The bench
tool is replaced by samples derived here (the runner's own arithmetic is what is tested)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from eliza.adapters.bench_tools import BenchSettings
from eliza.app.checks import perf
from eliza.app.checks.job import Job
from eliza.app.services.bench_options import BenchOptions
from eliza.core.cell_id import CellId
from eliza.core.evidence import Status
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import CheckKind
from eliza.core.verify_plan import Run
from eliza.formats.matrix_yaml import load_matrix

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
CELL = CellId.parse("linux-cpu.none")
BASELINE = "808e7c19fbed23fc8ecaef52353f8dc0ab829031"
STEADY = {"decode_tok_s": 3000.0, "prefill_tok_s": 25000.0, "first_token_ms": 0.7, "peak_rss_kb": 72000.0}


def job(tmp_path: Path, rounds: int | None) -> Job:
    step = Run(cell=CELL, check="perf", kind=CheckKind.PERF, reason="test", baseline_commit=BASELINE)
    options = BenchOptions(
        settings=BenchSettings(bundle=tmp_path / "bundle"), out_dir=tmp_path / "bench", perf_rounds=rounds
    )
    return Job(
        matrix=MATRIX,
        platform=MATRIX.platform("linux-cpu"),
        steps=(step,),
        libraries={CELL: tmp_path / "lib.so"},
        baselines={BASELINE: tmp_path / "baseline.so"},
        bench=options,
    )


def fake_measure(calls: list[int], noisy_first: bool) -> Any:
    """Each round's samples: steady, except the first call's when `noisy_first` (every other
    round of the candidate at a third of the rate: no interval narrow enough to decide)."""

    def measure(
        cell: object,
        candidate: object,
        reference: object,
        opts: object,
        rounds: int,
        log: object,
        *,
        first: int = 0,
        out: object = None,
    ) -> perf.Samples:
        calls.append(rounds)
        noisy = noisy_first and len(calls) == 1
        candidate = {
            name: [value * (1 / 3 if noisy and i == 1 else 1.0) * (1 + 0.001 * i) for i in range(rounds)]
            for name, value in STEADY.items()
        }
        reference = {name: [value * (1 + 0.001 * i) for i in range(rounds)] for name, value in STEADY.items()}
        return perf.Samples(candidate, reference, {"proc-status-vmhwm"})

    return measure


def run_perf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, rounds: int | None, noisy_first: bool):  # type: ignore[no-untyped-def]
    calls: list[int] = []
    monkeypatch.setattr(perf, "measure", fake_measure(calls, noisy_first))
    (done,) = perf.run(
        job(tmp_path, rounds), SimpleNamespace(log=lambda line: None, detail=lambda line: None)
    )  # type: ignore[arg-type]
    return done, calls


def test_rounds_that_cannot_decide_are_followed_by_as_many_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    declared = MATRIX.check("perf").rounds
    done, calls = run_perf(tmp_path, monkeypatch, rounds=None, noisy_first=True)
    assert calls == [declared, declared]
    assert done.details["perf"]["rounds_run"] == 2 * declared
    # the first rounds alone were inconclusive; all of them together decide
    assert done.status is not Status.INCONCLUSIVE


def test_decided_rounds_and_explicit_rounds_run_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done, calls = run_perf(tmp_path, monkeypatch, rounds=None, noisy_first=False)
    assert calls == [MATRIX.check("perf").rounds] and done.status is Status.PASSED
    done, calls = run_perf(tmp_path, monkeypatch, rounds=5, noisy_first=True)
    assert calls == [5] and done.status is Status.INCONCLUSIVE
    assert done.details["perf"]["rounds_run"] == 5


def test_backends_of_one_cell_share_the_reference_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two backends against the same llama.cpp path: each round runs the reference once, the
    order rotates, and both series judge against the same reference samples."""
    ran: list[str] = []

    def run_tool(argv: list[str], out: Path, env: dict[str, str], runner: object = None) -> Any:
        ran.append(env["ELIZA_LLM_BACKEND"])
        return SimpleNamespace(
            peak_rss_source="proc-status-vmhwm", backend=env["ELIZA_LLM_BACKEND"], n=len(ran)
        )

    monkeypatch.setattr(perf, "run_tool", run_tool)
    monkeypatch.setattr(perf, "run_metrics", lambda done: {"decode_tok_s": float(done.n)})
    library = tmp_path / "lib.so"
    opts = BenchOptions(settings=BenchSettings(bundle=tmp_path / "bundle"), out_dir=tmp_path / "bench")
    reference = perf.Side(library, {"ELIZA_LLM_BACKEND": "llama.cpp"})
    series = [
        perf.Comparison(
            name, perf.Side(library, {"ELIZA_LLM_BACKEND": name}), reference, opts, tmp_path / name
        )
        for name in ("mlx-coreml", "litert-lm")
    ]
    cell = MATRIX.cell(CellId.parse("linux-cpu.litert+mlx"))
    mlx, litert = perf.measure_series(cell, series, 3, lambda line: None)
    assert ran == [
        "mlx-coreml", "litert-lm", "llama.cpp",
        "litert-lm", "llama.cpp", "mlx-coreml",
        "llama.cpp", "mlx-coreml", "litert-lm",
    ]  # fmt: skip
    reference_samples = [float(i + 1) for i, name in enumerate(ran) if name == "llama.cpp"]
    assert mlx.reference["decode_tok_s"] == litert.reference["decode_tok_s"] == reference_samples
    assert mlx.candidate["decode_tok_s"] == [
        float(i + 1) for i, name in enumerate(ran) if name == "mlx-coreml"
    ]
    # One series, or series with references of their own: each runs its own AB, BA rounds.
    ran.clear()
    perf.measure_series(cell, series[:1], 2, lambda line: None)
    assert ran == ["mlx-coreml", "llama.cpp", "llama.cpp", "mlx-coreml"]
