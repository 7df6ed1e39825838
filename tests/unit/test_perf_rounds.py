"""The perf runner's rounds: declared rounds that cannot decide are followed by as many
again, once, and the verdict is that of all of them; `--rounds N` runs exactly N. The bench
tool is replaced by samples derived here (the runner's own arithmetic is what is tested)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from eliza.adapters.bench_tools import BenchSettings
from eliza.adapters.own_runners import MIN_REPEATS
from eliza.app.checks import perf
from eliza.app.checks.job import Job
from eliza.app.services.bench_options import BenchOptions
from eliza.core.cell_id import CellId
from eliza.core.evidence import Status
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import CheckKind
from eliza.core.outcome import CheckOutcome
from eliza.core.verify_plan import Run
from eliza.formats.matrix_yaml import load_matrix

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
# The lowest decode ratio against llama.cpp MLX's waiver on the tiny bundle accepts.
MLX_ACCEPTS = 1 - next(
    w.bound
    for w in MATRIX.perf_waivers
    if (w.check, w.backend, w.metric, w.cells)
    == ("backend-perf", "mlx-coreml", "decode_tok_s", "linux-*.*mlx")
)


def a_run(prompt_tokens: tuple[int, ...], **metrics: float) -> Any:
    """What a faked run_tool returns: a bench run's peak RSS source, prompts and metrics
    (run_metrics is faked to read them)."""
    return SimpleNamespace(
        peak_rss_source="proc-status-vmhwm",
        prompts=(SimpleNamespace(prompt_tokens=prompt_tokens),),
        metrics={"first_token_ms": 30.0, "peak_rss_kb": 1000.0, **metrics},
    )


def own_runner_series(tmp_path: Path, prompts: str, name: str) -> perf.Comparison:
    """A backend's series on a bundle with a .litertlm and its record, the own runner on
    the first prompt."""
    (tmp_path / "prompts.txt").write_text(prompts)
    bundle = tmp_path / "bundle"
    (bundle / "text").mkdir(parents=True, exist_ok=True)
    (bundle / "text" / "m.litertlm").write_bytes(b"")
    (bundle / "text" / "m.litertlm.json").write_text('{"context": 4096}')
    settings = BenchSettings(bundle=bundle, prompts=tmp_path / "prompts.txt")
    opts = BenchOptions(settings=settings, out_dir=tmp_path / "bench")
    library = tmp_path / "lib.so"
    reference = perf.Side(library, {"ELIZA_LLM_BACKEND": "llama.cpp"})
    candidate = perf.Side(library, {"ELIZA_LLM_BACKEND": name})
    return perf.Comparison(name, candidate, reference, opts, tmp_path / name, perf.own_runner(name), 1)


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


def backend_job(
    tmp_path: Path,
    cell: CellId,
    check: str,
    options: BenchOptions,
    alone: Any = None,
    apart: Any = None,
) -> Job:
    """A linux-cpu cell's backend perf check as the executor hands it to the perf runner."""
    step = Run(cell=cell, check=check, kind=CheckKind.PERF, reason="test")
    return Job(
        matrix=MATRIX,
        platform=MATRIX.platform("linux-cpu"),
        steps=(step,),
        libraries={cell: tmp_path / "lib.so"},
        bench=options,
        **({"alone": alone} if alone is not None else {}),
        **({"apart": apart} if apart is not None else {}),
    )


def backend_series(tmp_path: Path, names: tuple[str, ...], options: BenchOptions) -> list[perf.Comparison]:
    """One series per runtime of a cell (hard-selected through ELIZA_LLM_BACKEND) against
    the llama.cpp path of the same library, each with its own runner."""
    library = tmp_path / "lib.so"
    reference = perf.Side(library, {"ELIZA_LLM_BACKEND": "llama.cpp"})
    return [
        perf.Comparison(
            name,
            perf.Side(library, {"ELIZA_LLM_BACKEND": name}),
            reference,
            options,
            tmp_path / "bench" / name,
            perf.own_runner(name),
        )
        for name in names
    ]


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
    look = perf.FIRST_LOOK_ROUNDS
    done, calls = run_perf(tmp_path, monkeypatch, rounds=None, noisy_first=True)
    # a noisy first look does not settle: the declared rest, then as many again
    assert calls == [look, declared - look, declared]
    assert done.details["perf"]["rounds_run"] == 2 * declared
    # the first rounds alone were inconclusive; all of them together decide
    assert done.status is not Status.INCONCLUSIVE


def test_settled_rounds_and_explicit_rounds_run_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Steady rounds whose every interval lies inside its bound after the first look stop
    there; `--rounds N` runs exactly N."""
    done, calls = run_perf(tmp_path, monkeypatch, rounds=None, noisy_first=False)
    look = perf.FIRST_LOOK_ROUNDS
    assert look < MATRIX.check("perf").rounds
    assert calls == [look] and done.status is Status.PASSED
    assert done.details["perf"]["rounds_run"] == look
    assert done.details["perf"]["settled_after"] == {"candidate": look}
    done, calls = run_perf(tmp_path, monkeypatch, rounds=5, noisy_first=True)
    assert calls == [5] and done.status is Status.INCONCLUSIVE
    assert done.details["perf"]["rounds_run"] == 5


def mlx_and_litert(tmp_path: Path) -> list[perf.Comparison]:
    """linux-cpu.litert+mlx's two backends, each against the llama.cpp path of one library."""
    library = tmp_path / "lib.so"
    opts = BenchOptions(settings=BenchSettings(bundle=tmp_path / "bundle"), out_dir=tmp_path / "bench")
    reference = perf.Side(library, {"ELIZA_LLM_BACKEND": "llama.cpp"})
    return [
        perf.Comparison(
            name, perf.Side(library, {"ELIZA_LLM_BACKEND": name}), reference, opts, tmp_path / name
        )
        for name in ("mlx-coreml", "litert-lm")
    ]


def test_a_decisive_regression_never_settles_and_fails_on_the_declared_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 2 ms sleep per token where a token takes 0.5 ms: decode at a fifth of the
    reference's in every round. The first look cannot fail it (three a side without ties
    cannot reach p < 0.05) and must not settle it (its interval lies beyond the bound): the
    declared rest runs and the rule fails it."""
    calls: list[int] = []
    slowed = 0.5 / (0.5 + 2.0)

    def measure(*args: object, first: int = 0, out: object = None) -> perf.Samples:
        rounds = int(args[4])  # type: ignore[call-overload]
        calls.append(rounds)
        wobble = [1 + 0.003 * ((first + i) % 3) for i in range(rounds)]
        ref = {name: [value * w for w in wobble] for name, value in STEADY.items()}
        cand = {name: list(values) for name, values in ref.items()}
        cand["decode_tok_s"] = [v * slowed for v in ref["decode_tok_s"]]
        return perf.Samples(cand, ref, {"proc-status-vmhwm"})

    monkeypatch.setattr(perf, "measure", measure)
    (done,) = perf.run(job(tmp_path, None), SimpleNamespace(log=lambda line: None, detail=lambda line: None))  # type: ignore[arg-type]
    declared = MATRIX.check("perf").rounds
    assert calls == [perf.FIRST_LOOK_ROUNDS, declared - perf.FIRST_LOOK_ROUNDS]
    assert done.status is Status.FAILED and "decode_tok_s" in done.reason
    assert done.details["perf"]["rounds_run"] == declared and "settled_after" not in done.details["perf"]


def steady_series_but_mlx(
    calls: list[tuple[list[str], int, int]],
    mlx: Callable[[dict[str, list[float]], dict[str, list[float]], int], None],
) -> Callable[..., list[perf.Samples]]:
    """A measure_series whose rounds are steady, the candidate's as the reference's, except
    what `mlx(candidate, reference, first)` does to MLX's; each call is recorded."""

    def measure_series(
        cell: object, measured: list[perf.Comparison], rounds: int, log: object, *, first: int = 0
    ) -> list[perf.Samples]:
        calls.append(([c.label for c in measured], first, rounds))
        out = []
        for c in measured:
            ref = {
                name: [value * (1 + 0.002 * (first + i)) for i in range(rounds)]
                for name, value in STEADY.items()
            }
            cand = {name: list(values) for name, values in ref.items()}
            if c.label == "mlx-coreml":
                mlx(cand, ref, first)
            out.append(perf.Samples(cand, ref, {"proc-status-vmhwm"}))
        return out

    return measure_series


def test_a_series_that_settles_stops_while_the_other_runs_the_declared_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two backends of one cell: LiteRT-LM inside its bounds after the first look stops
    there; MLX, whose first token straddles its waiver's bound, runs the declared rest
    (against a reference of its own now: the shared one's samples stay in both series)."""
    cell = MATRIX.cell(CellId.parse("linux-cpu.litert+mlx"))
    check = MATRIX.check("backend-perf")
    series = mlx_and_litert(tmp_path)
    waiver = next(
        w for w in MATRIX.perf_waivers
        if (w.check, w.backend, w.metric) == ("backend-perf", "mlx-coreml", "first_token_ms")
    )  # fmt: skip
    calls: list[tuple[list[str], int, int]] = []

    def straddling(candidate: dict[str, list[float]], reference: dict[str, list[float]], first: int) -> None:
        """One round's first token beyond the waiver's bound, the others inside it."""
        candidate["first_token_ms"] = [
            v * (1 + waiver.bound) * (1.2 if (first + i) == 1 else 0.9)
            for i, v in enumerate(reference["first_token_ms"])
        ]

    measure_series = steady_series_but_mlx(calls, straddling)
    policy = perf.PerfPolicy(waivers=MATRIX.perf_waivers, today=date(2026, 12, 7))
    monkeypatch.setattr(perf, "measure_series", measure_series)
    (mlx, litert), settled = perf.measure_until_settled(cell, check, series, check.rounds, policy, print)
    look = perf.FIRST_LOOK_ROUNDS
    assert calls == [(["mlx-coreml", "litert-lm"], 0, look), (["mlx-coreml"], look, check.rounds - look)]
    assert settled == {"litert-lm"}
    assert (
        len(litert.candidate["decode_tok_s"]) == look and len(mlx.candidate["decode_tok_s"]) == check.rounds
    )
    assert len(mlx.reference["decode_tok_s"]) == check.rounds


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
    series = mlx_and_litert(tmp_path)
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


def test_a_series_that_continues_alone_keeps_its_first_looks_shared_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two backends sharing the llama.cpp rounds of their first look; LiteRT-LM settles and
    MLX runs the rest against a reference of its own: every run writes a file of its own,
    the settled series keeps the first look's three reference samples and MLX has five."""
    paths: list[Path] = []

    def run_tool(argv: list[str], out: Path, env: dict[str, str], runner: object = None) -> Any:
        paths.append(out)
        return SimpleNamespace(peak_rss_source="proc-status-vmhwm", n=len(paths))

    monkeypatch.setattr(perf, "run_tool", run_tool)
    monkeypatch.setattr(perf, "run_metrics", lambda done: {name: float(done.n) for name in STEADY})
    monkeypatch.setattr(
        perf, "settled", lambda cell, rows, policy, check, fewest: rows[0].get("backend") == "litert-lm"
    )
    series = mlx_and_litert(tmp_path)
    cell = MATRIX.cell(CellId.parse("linux-cpu.litert+mlx"))
    check = MATRIX.check("backend-perf")
    policy = perf.PerfPolicy(waivers=(), today=date(2026, 12, 7))
    (mlx, litert), settled = perf.measure_until_settled(cell, check, series, 5, policy, lambda line: None)
    assert settled == {"litert-lm"}
    assert len(paths) == len(set(paths)) == 3 * 3 + 2 * 2  # three sides for three rounds, then two
    assert len(litert.candidate["decode_tok_s"]) == len(litert.reference["decode_tok_s"]) == 3
    assert len(mlx.candidate["decode_tok_s"]) == len(mlx.reference["decode_tok_s"]) == 5
    assert mlx.reference["decode_tok_s"][:3] == litert.reference["decode_tok_s"]  # the shared look


def test_perf_rounds_take_turns_even_with_a_core_for_each_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library against the reference library on a host with a core per side: still AB
    then BA (a prefill tens of milliseconds after each process's start would meet the other
    side's work at a different moment of it)."""
    ran: list[str] = []

    def run_tool(argv: list[str], out: Path, env: dict[str, str], runner: object = None) -> Any:
        ran.append(out.stem)
        return SimpleNamespace(peak_rss_source="proc-status-vmhwm")

    monkeypatch.setattr(perf, "run_tool", run_tool)
    monkeypatch.setattr(perf, "run_metrics", lambda done: {"decode_tok_s": 1.0})
    opts = BenchOptions(
        settings=BenchSettings(bundle=tmp_path / "bundle"), out_dir=tmp_path / "bench", side_by_side_cores=2
    )
    cell = MATRIX.cell(CellId.parse("linux-cpu.none"))
    perf.measure(cell, perf.Side(tmp_path / "lib.so"), perf.Side(tmp_path / "ref.so"), opts, 2, print)
    assert ran == ["candidate-0", "reference-0", "reference-1", "candidate-1"]


def test_a_body_is_held_to_its_own_runner_and_no_waiver_covers_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The own-runner rounds alternate body and own runner (the MLX runner fed the body's
    prompt ids), on the first prompt at OWN_RUNNER_MAX_TOKENS; a body 10 % slower than its runtime's own
    runner fails own_runner_decode though the backend's decode against llama.cpp is waived,
    and only that backend's rows fail."""
    ran: list[tuple[str, list[str]]] = []
    body_speed = {"mlx-coreml": 1.0, "litert-lm": 0.9}  # litert's body pays a tenth per token

    def run_tool(argv: list[str], out: Path, env: dict[str, str], runner: object = None) -> Any:
        own = argv[1] == "-m"  # python -m eliza.adapters.own_runners.<runtime>
        backend = env.get("ELIZA_LLM_BACKEND", "llama.cpp")
        if own:
            backend = "mlx-coreml" if argv[2].endswith(".mlx_lm") else "litert-lm"
        ran.append((("own " if own else "body ") + backend, argv))
        wobble = 1 + 0.002 * len(ran) % 3
        speed = 1.0 if own or backend == "llama.cpp" else body_speed[backend]
        return a_run(
            (2, 7, 9),
            decode_tok_s=50.0 * speed * wobble,
            decode_step_tok_s=52.0 * speed * wobble,
            prefill_tok_s=400.0 * wobble,
        )

    monkeypatch.setattr(perf, "run_tool", run_tool)
    monkeypatch.setattr(perf, "run_metrics", lambda done: done.metrics)
    prompts = "# a comment\nfirst prompt\nsecond prompt\n"
    series = [own_runner_series(tmp_path, prompts, name) for name in ("mlx-coreml", "litert-lm")]
    cell = MATRIX.cell(CellId.parse("linux-cpu.litert+mlx"))
    mlx_own = perf.own_runner_rounds(cell, series[0], 4, lambda line: None)
    assert [name for name, _ in ran] == [
        "body mlx-coreml", "own mlx-coreml", "own mlx-coreml", "body mlx-coreml",
        "body mlx-coreml", "own mlx-coreml", "own mlx-coreml", "body mlx-coreml",
    ]  # fmt: skip
    body_argv = ran[0][1]
    assert body_argv[body_argv.index("--max-tokens") + 1] == str(perf.OWN_RUNNER_MAX_TOKENS)
    first = Path(body_argv[body_argv.index("--prompts") + 1])
    assert first.read_text() == "first prompt\n"
    own_argv = ran[1][1]
    ids = Path(own_argv[own_argv.index("--prompt-ids") + 1])
    assert json.loads(ids.read_text()) == [[2, 7, 9]]
    ran.clear()
    litert_own = perf.own_runner_rounds(cell, series[1], 4, lambda line: None)
    litert_argv = ran[1][1]
    assert litert_argv[litert_argv.index("--context") + 1] == "4096"
    # judged: llama.cpp comparisons all equal but the slower litert body, which a waiver accepts
    steady = perf.Samples(
        candidate={k: [v] * 4 for k, v in {"decode_tok_s": 50.0, "prefill_tok_s": 400.0,
                                           "first_token_ms": 30.0, "peak_rss_kb": 1000.0}.items()},
        reference={k: [v] * 4 for k, v in {"decode_tok_s": 50.0, "prefill_tok_s": 400.0,
                                           "first_token_ms": 30.0, "peak_rss_kb": 1000.0}.items()},
    )  # fmt: skip
    check = MATRIX.check("backend-perf")
    policy = perf.PerfPolicy(waivers=MATRIX.perf_waivers, today=date(2026, 12, 6))
    done = perf.perf_outcome(
        cell,
        check,
        [("mlx-coreml", steady), ("litert-lm", steady)],
        policy,
        watch=perf.Stopwatch(),
        about={},
        own=[("mlx-coreml", mlx_own), ("litert-lm", litert_own)],
    )
    assert done.status is Status.FAILED
    assert "own_runner_decode" in done.reason and "REGRESSION" in done.reason
    failed = [m for m in done.details["perf"]["metrics"] if m["verdict"] == "failed"]
    assert [(m["backend"], m["metric"]) for m in failed] == [("litert-lm", "own_runner_decode")]
    own_rows = [m for m in done.details["perf"]["metrics"] if m["metric"].startswith("own_runner_")]
    assert len(own_rows) == 4 and all("own runner: " in m["against"] for m in own_rows)
    assert done.metrics["litert-lm.own_runner_decode_ratio"] == pytest.approx(0.9, abs=0.01)
    assert done.metrics["mlx-coreml.own_runner_decode_ratio"] == pytest.approx(1.0, abs=0.01)


def test_the_steady_decode_rate_is_the_best_repeats_median_step_of_each_prompt() -> None:
    """decode_step_tok_s: per prompt one token over the shortest of its repeats' median
    steps, then the median over prompts; a run without steps recorded gives 0."""
    from eliza.core.bench_records import parse_run

    header = {"type": "header", "format": "eliza-bench/1", "tool": "t", "cell": "c"}

    def prompt(index: int, steps: list[float]) -> dict[str, Any]:
        return {"type": "prompt", "index": index, "prompt": "p", "prompt_tokens": [1], "tokens": [5, 6],
                "text_hex": "", "final_status": 1, "repeats_identical": True, "drafter": [],
                "prefill_ms": [1.0], "first_token_ms": [2.0], "decode_tok_s": [10.0],
                "decode_step_ms": steps, "peak_rss_kb": 1}  # fmt: skip

    lines = [header, prompt(0, [20.0, 12.5]), prompt(1, [10.0, 40.0]), prompt(2, [25.0])]
    run = parse_run("\n".join(json.dumps(line) for line in lines), "run.jsonl")
    assert perf.run_metrics(run)["decode_step_tok_s"] == pytest.approx(
        80.0
    )  # 1000/12.5 median of 100, 80, 40
    bare = parse_run(
        "\n".join(json.dumps(line) for line in [header, {**prompt(0, []), "decode_step_ms": []}]), "r"
    )
    assert perf.run_metrics(bare)["decode_step_tok_s"] == 0.0


def test_an_own_runners_clock_gives_each_later_token_its_share_of_a_step() -> None:
    from eliza.adapters.own_runners.common import Timing

    t = Timing()
    clock = iter([1.0, 1.010, 1.040, 1.050])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("eliza.adapters.own_runners.common.time.perf_counter", lambda: next(clock))
        t.token(1)  # the first token
        t.token(2)  # 10 ms
        t.token(4)  # two tokens in 30 ms: 15 ms each
        t.token(4)  # no new token: nothing recorded
    assert t.steps == pytest.approx([0.010, 0.015, 0.015])
    assert t.step_ms() == pytest.approx(15.0)
    assert t.t_end == pytest.approx(1.040)


def test_an_at_once_runtime_runs_both_sides_of_a_round_together_after_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLX on a host with a core per side: the first round in turn (the runner needs the
    body's prompt ids), the later ones side by side (a barrier that only two calls in flight
    at once can pass); LiteRT-LM, or one core, stays in turn."""
    import threading

    together = threading.Barrier(2, timeout=10)
    calls: list[tuple[str, int]] = []

    def run_tool(argv: list[str], out: Path, env: dict[str, str], runner: object = None) -> Any:
        side = "own" if argv[1] == "-m" else "body"
        round_ = int(out.stem.split("-")[1])
        calls.append((side, round_))
        if round_ > 0 and at_once:
            together.wait()  # raises BrokenBarrierError when the other side does not come
        return a_run((2, 7), decode_tok_s=5.0, decode_step_tok_s=5.2, prefill_tok_s=40.0)

    monkeypatch.setattr(perf, "run_tool", run_tool)
    monkeypatch.setattr(perf, "run_metrics", lambda done: done.metrics)

    def series(name: str) -> perf.Comparison:
        return own_runner_series(tmp_path, "first prompt\n", name)

    cell = MATRIX.cell(CellId.parse("linux-cpu.litert+mlx"))
    at_once = True
    samples = perf.own_runner_rounds(cell, series("mlx-coreml"), 3, lambda line: None, threads=1, cores=2)
    assert calls[:2] == [("body", 0), ("own", 0)]
    assert sorted(calls[2:]) == [("body", 1), ("body", 2), ("own", 1), ("own", 2)]
    assert (
        samples.candidate["decode_step_tok_s"] == [5.2] * 3 and len(samples.reference["prefill_tok_s"]) == 3
    )
    at_once = False
    for name, cores in (("litert-lm", 2), ("mlx-coreml", 1)):
        calls.clear()
        perf.own_runner_rounds(cell, series(name), 3, lambda line: None, threads=1, cores=cores)
        assert calls == [("body", 0), ("own", 0), ("own", 1), ("body", 1), ("body", 2), ("own", 2)]


def test_a_body_run_of_the_same_prompts_lets_the_first_round_run_at_once_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rounds against llama.cpp leave a run of the body whose first prompts are the own
    runner's: fed its prompt ids, the MLX runner runs every round side by side, at the
    bundle's own_runner_max_tokens; a run of other prompts gives nothing and the first round
    takes turns. The prompt file's escapes are read as the bench tools read them."""
    import dataclasses
    import threading

    from eliza.core.bench_records import parse_run

    together = threading.Barrier(2, timeout=10)
    calls: list[tuple[str, int]] = []
    fed: list[object] = []

    def run_tool(argv: list[str], out: Path, env: dict[str, str], runner: object = None) -> Any:
        side = "own" if argv[1] == "-m" else "body"
        if side == "own":
            fed.append(json.loads(Path(argv[argv.index("--prompt-ids") + 1]).read_text()))
        calls.append((side, int(out.stem.split("-")[1])))
        assert argv[argv.index("--max-tokens") + 1] == "16"
        if at_once_from_the_start:
            together.wait()  # raises BrokenBarrierError when the other side does not come
        return a_run((2, 7), decode_tok_s=5.0, decode_step_tok_s=5.2, prefill_tok_s=40.0)

    monkeypatch.setattr(perf, "run_tool", run_tool)
    monkeypatch.setattr(perf, "run_metrics", lambda done: done.metrics)

    def earlier(*texts: str) -> Any:
        header = {"type": "header", "format": "eliza-bench/1", "tool": "t", "cell": "c"}
        lines = [header] + [
            {"type": "prompt", "index": i, "prompt": text, "prompt_tokens": [40 + i, 41], "tokens": [5, 6],
             "text_hex": "", "final_status": 1, "repeats_identical": True, "drafter": [],
             "prefill_ms": [1.0], "first_token_ms": [2.0], "decode_tok_s": [10.0], "peak_rss_kb": 1}
            for i, text in enumerate(texts)
        ]  # fmt: skip
        return parse_run("\n".join(json.dumps(line) for line in lines), "candidate-3.jsonl")

    mlx = dataclasses.replace(
        own_runner_series(tmp_path, "first\\tprompt\\nof two lines\nsecond prompt\n", "mlx-coreml"),
        own_max_tokens=16,
    )
    cell = MATRIX.cell(CellId.parse("linux-cpu.mlx"))
    at_once_from_the_start = True
    samples = perf.own_runner_rounds(
        cell,
        mlx,
        3,
        lambda line: None,
        threads=1,
        cores=2,
        ids_from=earlier("first\tprompt\nof two lines", "x"),
    )
    assert sorted(calls) == [("body", 0), ("body", 1), ("body", 2), ("own", 0), ("own", 1), ("own", 2)]
    assert fed[0] == [[40, 41]]  # the earlier run's first prompt: the runner's only one
    assert samples.sides == "side by side" and samples.last_candidate is not None
    at_once_from_the_start = False
    calls.clear()
    other = perf.own_runner_rounds(
        cell, mlx, 1, lambda line: None, threads=1, cores=2, ids_from=earlier("another prompt")
    )
    assert calls == [("body", 0), ("own", 0)] and other.sides == "side by side after the first"


def test_only_a_failure_against_the_own_runner_is_run_again() -> None:
    """A failed verdict whose every unwaived failure is a body against its own runner gets
    its own-runner rounds again; one that failed against llama.cpp gets a second window of
    the rounds against llama.cpp instead. A waived row is no failure (a runtime cell's raw
    rows fail against llama.cpp wherever the runtime is slower, and its waivers accept it)."""
    mlx = MATRIX.cell(CellId.parse("linux-cpu.mlx"))
    check = MATRIX.check("backend-perf")
    policy = perf.PerfPolicy(waivers=MATRIX.perf_waivers, today=date(2026, 12, 6))

    def verdict(decode: float, body: float) -> Any:
        """MLX's decode at `decode` x llama.cpp's, its body at `body` x its own runner's."""
        steady = {
            "decode_tok_s": 1000.0,
            "prefill_tok_s": 400.0,
            "first_token_ms": 30.0,
            "peak_rss_kb": 1000.0,
        }
        wobble = (1.0, 1.01, 0.99, 1.005)
        candidate = {
            k: [v * w * (decode if k == "decode_tok_s" else 1.0) for w in wobble] for k, v in steady.items()
        }
        reference = {k: [v * w for w in wobble] for k, v in steady.items()}
        own = perf.Samples(
            candidate={"decode_step_tok_s": [50.0 * body * w for w in wobble], "prefill_tok_s": [400.0] * 4},
            reference={"decode_step_tok_s": [50.0 * w for w in wobble], "prefill_tok_s": [400.0] * 4},
        )
        return perf.perf_outcome(
            mlx,
            check,
            [("mlx-coreml", perf.Samples(candidate, reference))],
            policy,
            watch=perf.Stopwatch(),
            about={},
            own=[("mlx-coreml", own)],
        )

    waived_decode = MLX_ACCEPTS * 1.3  # within what MLX's waiver accepts of llama.cpp's
    within = verdict(waived_decode, 1.0)
    assert within.status is Status.PASSED
    assert any(
        m["metric"] == "decode_tok_s" and m["verdict"] == "failed" for m in within.details["perf"]["metrics"]
    )
    assert not perf.fails_only_against_own_runner(within) and not perf.fails_against_the_reference(within)
    body_only = verdict(waived_decode, 0.8)
    assert body_only.details["perf"]["failed"] == ["mlx-coreml.own_runner_decode"]
    assert perf.fails_only_against_own_runner(body_only) and not perf.fails_against_the_reference(body_only)
    both = verdict(MLX_ACCEPTS / 2, 0.8)
    assert both.details["perf"]["failed"] == ["mlx-coreml.decode_tok_s", "mlx-coreml.own_runner_decode"]
    assert not perf.fails_only_against_own_runner(both) and perf.fails_against_the_reference(both)
    assert perf.fails_against_the_reference(verdict(MLX_ACCEPTS / 2, 1.0))


@pytest.mark.parametrize(
    "second_window", ["steady", "slow again", "not with --rounds N", "gemma: slow again"]
)
def test_a_runtime_failing_against_llama_cpp_is_judged_by_a_second_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, second_window: str
) -> None:
    """MLX at a tenth of llama.cpp's decode in every round of one window (its waiver accepts
    0.17): the rounds against llama.cpp run again, alone, CONFIRM_APART_S after the first
    (the call's place given to the others meanwhile), and that window's verdict is the check's; the first
    window's samples stay in the record. A runtime slow in both fails."""
    mlx = CellId.parse("linux-cpu.mlx")
    gemma = second_window.startswith("gemma")  # three rounds: a first look that cannot fail
    check_id = "backend-perf.gemma3-270m" if gemma else "backend-perf"
    explicit = 5 if second_window == "not with --rounds N" else None
    options = BenchOptions(
        settings=BenchSettings(bundle=tmp_path / "bundle"), out_dir=tmp_path / "bench", perf_rounds=explicit
    )
    windows: list[str] = []

    class Alone:
        def __enter__(self) -> None:
            windows.append("alone")

        def __exit__(self, *exc: object) -> None:
            return None

    @contextmanager
    def waits_apart(gap: float) -> Iterator[None]:
        windows.append(f"{gap:g} s apart")
        yield

    apart = f"{perf.CONFIRM_APART_S:g} s apart"
    job_of_mlx = backend_job(tmp_path, mlx, check_id, options, alone=Alone, apart=waits_apart)
    library = tmp_path / "lib.so"
    series = [
        perf.Comparison(
            "mlx-coreml",
            perf.Side(library, {"ELIZA_LLM_BACKEND": "mlx-coreml"}),
            perf.Side(library, {"ELIZA_LLM_BACKEND": "llama.cpp"}),
            options,
            tmp_path / "bench" / "mlx-coreml",
        )
    ]
    monkeypatch.setattr(
        perf, "comparisons", lambda *args: (series, perf.BACKEND_PERF_REFERENCE, "llama.cpp", (library,))
    )
    monkeypatch.setattr(perf, "ensure_runtime_bundle", lambda bundle, gates: bundle)
    calls: list[tuple[int, int]] = []
    declared = MATRIX.check(check_id).rounds

    def measure_series(cell: object, measured: object, rounds: int, log: object, *, first: int = 0) -> Any:
        calls.append((first, rounds))
        slow = first < declared or second_window.endswith("slow again")  # the first window's
        decode = MLX_ACCEPTS / 2 if slow else MLX_ACCEPTS * 1.3  # of llama.cpp's
        decode = 0.01 if gemma else decode  # Gemma's MLX waiver accepts a lower ratio
        steady = {
            "decode_tok_s": 1000.0,
            "prefill_tok_s": 400.0,
            "first_token_ms": 30.0,
            "peak_rss_kb": 1000.0,
        }
        wobble = [1 + 0.002 * i for i in range(rounds)]
        candidate = {
            k: [v * w * (decode if k == "decode_tok_s" else 1.0) for w in wobble] for k, v in steady.items()
        }
        return [perf.Samples(candidate, {k: [v * w for w in wobble] for k, v in steady.items()})]

    monkeypatch.setattr(perf, "measure_series", measure_series)
    lines: list[str] = []
    (done,) = perf.run(job_of_mlx, SimpleNamespace(log=lines.append, detail=lines.append, bundle=None))  # type: ignore[arg-type]
    rounds = declared
    if explicit:  # --rounds N runs exactly N
        assert calls == [(0, 5)] and windows == ["alone"] and done.status is Status.FAILED
        assert "first_window" not in done.details["perf"]
        return
    if gemma:  # undecided after three: as many again, then a second window of all six
        assert rounds == 3 and calls == [(0, 3), (3, 3), (6, 6)]
        assert windows == ["alone", "alone", apart, "alone"]
        assert done.status is Status.FAILED and done.details["perf"]["rounds_run"] == 12
        assert (
            len(done.details["perf"]["first_window"]["samples"]["mlx-coreml"]["candidate"]["decode_tok_s"])
            == 6
        )
        return
    # a first look that cannot settle a runtime beyond its waiver, the declared rest in the
    # same window, then a second window as long as the first
    look = perf.FIRST_LOOK_ROUNDS
    assert calls == [(0, look), (look, rounds - look), (rounds, rounds)] and windows == [
        "alone",
        apart,
        "alone",
    ]
    about = done.details["perf"]
    assert about["rounds_run"] == 2 * rounds
    first = about["first_window"]
    assert "decode_tok_s ratio" in first["failed"] and "REGRESSION" in first["failed"]
    assert first["samples"]["mlx-coreml"]["candidate"]["decode_tok_s"][0] == pytest.approx(
        1000 * MLX_ACCEPTS / 2
    )
    if second_window == "steady":
        assert done.status is Status.PASSED
        assert done.metrics["mlx-coreml.decode_tok_s_ratio"] == pytest.approx(MLX_ACCEPTS * 1.3, rel=0.02)
    else:
        assert done.status is Status.FAILED and "decode_tok_s ratio" in done.reason
    assert any("a first window failed against llama.cpp" in line for line in lines)


def test_a_second_window_keeps_the_first_looks_settled_series_in_the_first_windows_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """linux-cpu.litert+mlx on the fixture: LiteRT-LM settles at the first look, MLX fails
    against llama.cpp beyond its waiver and runs the rest, then a second window runs both;
    the record says LiteRT-LM settled in the first window, not in the verdict's."""
    options = BenchOptions(settings=BenchSettings(bundle=tmp_path / "bundle"), out_dir=tmp_path / "bench")
    job_of_both = backend_job(tmp_path, CellId.parse("linux-cpu.litert+mlx"), "backend-perf", options)
    series = mlx_and_litert(tmp_path)
    monkeypatch.setattr(
        perf, "comparisons", lambda *args: (series, perf.BACKEND_PERF_REFERENCE, "llama.cpp", (tmp_path,))
    )
    monkeypatch.setattr(perf, "ensure_runtime_bundle", lambda bundle, gates: bundle)
    calls: list[tuple[list[str], int, int]] = []
    declared = MATRIX.check("backend-perf").rounds

    def beyond_the_waiver(
        candidate: dict[str, list[float]], reference: dict[str, list[float]], first: int
    ) -> None:
        if first < declared:  # the first window
            candidate["decode_tok_s"] = [v * MLX_ACCEPTS / 2 for v in reference["decode_tok_s"]]

    measure_series = steady_series_but_mlx(calls, beyond_the_waiver)
    monkeypatch.setattr(perf, "measure_series", measure_series)
    (done,) = perf.run(job_of_both, SimpleNamespace(log=print, detail=print, bundle=None))  # type: ignore[arg-type]
    look = perf.FIRST_LOOK_ROUNDS
    assert calls == [
        (["mlx-coreml", "litert-lm"], 0, look),
        (["mlx-coreml"], look, declared - look),
        (["mlx-coreml", "litert-lm"], declared, declared),
    ]
    about = done.details["perf"]
    assert done.status is Status.PASSED, done.reason
    assert "settled_after" not in about
    assert about["first_window"]["settled_after"] == {"litert-lm": look}


@pytest.mark.parametrize("undecided", ["litert-lm first token", "mlx-coreml body"])
def test_only_what_is_undecided_runs_as_many_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, undecided: str
) -> None:
    """linux-cpu.litert+mlx on Gemma, three rounds (a first look): when one series' metric is
    undecided, that series runs as many again against the reference and nothing else does
    (MLX's 7-second runs and both own runners stay at three); when only a body against its
    own runner is undecided, only that body's own-runner rounds run again."""
    cell = CellId.parse("linux-cpu.litert+mlx")
    check_id = "backend-perf.gemma3-270m"
    rounds = MATRIX.check(check_id).rounds
    options = BenchOptions(settings=BenchSettings(bundle=tmp_path / "bundle"), out_dir=tmp_path / "bench")
    library = tmp_path / "lib.so"
    series = backend_series(tmp_path, ("mlx-coreml", "litert-lm"), options)
    monkeypatch.setattr(
        perf, "comparisons", lambda *args: (series, perf.BACKEND_PERF_REFERENCE, "llama.cpp", (library,))
    )
    monkeypatch.setattr(perf, "own_runner_settings", lambda c: BenchSettings(bundle=tmp_path, max_tokens=16))
    monkeypatch.setattr(perf, "own_runner_prompts", lambda c: tmp_path / "prompts.txt")
    llama = {"decode_tok_s": 85.0, "prefill_tok_s": 200.0, "first_token_ms": 45.0, "peak_rss_kb": 428000.0}
    # each runtime at about what it measured against llama.cpp on Gemma (2026-12-07), within
    # its waivers: MLX decode 0.065x, prefill 0.052x, first token 17.9x, peak RSS 0.84x
    of_llama = {
        "mlx-coreml": {
            "decode_tok_s": 0.065,
            "prefill_tok_s": 0.052,
            "first_token_ms": 17.9,
            "peak_rss_kb": 0.84,
        },
        "litert-lm": {
            "decode_tok_s": 1.17,
            "prefill_tok_s": 1.95,
            "first_token_ms": 0.98,
            "peak_rss_kb": 1.31,
        },
    }
    against: list[tuple[tuple[str, ...], int]] = []
    own_rounds: list[tuple[str, int]] = []

    def measure_series(cell: object, measured: Any, n: int, log: object, *, first: int = 0) -> Any:
        against.append((tuple(c.label for c in measured), first))
        wobble = [1 + 0.002 * ((first + i) % 3) for i in range(n)]
        taken = []
        for c in measured:
            candidate = {k: [v * of_llama[c.label][k] * w for w in wobble] for k, v in llama.items()}
            if c.label == "litert-lm" and undecided.startswith("litert") and first == 0:
                # a first token that jumps round to round: no interval narrow enough to decide
                candidate["first_token_ms"] = [llama["first_token_ms"] * r for r in (0.9, 1.6, 1.0)]
            taken.append(perf.Samples(candidate, {k: [v * w for w in wobble] for k, v in llama.items()}))
        return taken

    def own_runner_rounds(cell: object, c: perf.Comparison, n: int, log: object, **kw: Any) -> perf.Samples:
        first = kw.get("first", 0)
        own_rounds.append((c.label, first))
        body = [1.0, 1.0, 1.0]
        if c.label == "mlx-coreml" and undecided.endswith("body") and first == 0:
            body = [0.93, 0.90, 1.02]  # beyond the 5 % bound, its interval reaching back
        return perf.Samples(
            candidate={"decode_step_tok_s": [6.0 * b for b in body], "prefill_tok_s": [12.0] * n},
            reference={"decode_step_tok_s": [6.0] * n, "prefill_tok_s": [12.0] * n},
        )

    monkeypatch.setattr(perf, "measure_series", measure_series)
    monkeypatch.setattr(perf, "own_runner_rounds", own_runner_rounds)
    (done,) = perf.run(
        backend_job(tmp_path, cell, check_id, options), SimpleNamespace(log=print, detail=print, bundle=None)
    )  # type: ignore[arg-type]
    about = done.details["perf"]
    if undecided.startswith("litert"):
        assert against == [(("mlx-coreml", "litert-lm"), 0), (("litert-lm",), rounds)]
        assert own_rounds == [("mlx-coreml", 0), ("litert-lm", 0)]
        assert about["ran_again"] == {"against the reference": ["litert-lm"], "own runner": []}
        assert about["rounds_run"] == 2 * rounds
    else:
        assert against == [(("mlx-coreml", "litert-lm"), 0)]
        assert own_rounds == [("mlx-coreml", 0), ("litert-lm", 0), ("mlx-coreml", rounds)]
        assert about["ran_again"] == {"against the reference": [], "own runner": ["mlx-coreml"]}
        assert about["rounds_run"] == rounds
        assert about["own_runner"]["mlx-coreml"]["rounds"] == 2 * rounds
        assert about["own_runner"]["litert-lm"]["rounds"] == rounds
    # all of them decide: the samples the second look added are steady
    assert done.status is Status.PASSED, done.reason


def test_a_runtime_sized_to_the_first_prompts_has_a_reference_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gemma's backend-perf on linux-cpu.litert+mlx: MLX's rounds take the bundle's first
    prompt (bench.backend_perf_prompts), llama.cpp's rounds against it the same one, and
    LiteRT-LM's all of them against a llama.cpp of its own."""
    cell_id = CellId.parse("linux-cpu.litert+mlx")
    check = MATRIX.check("backend-perf.gemma3-270m")
    sizing = MATRIX.bundle(check.bundle).bench
    mlx_prompts = sizing.backend_perf_prompts_of("mlx-coreml")
    assert mlx_prompts and not sizing.backend_perf_prompts_of("litert-lm")
    prompts = tmp_path / "prompts.txt"
    texts = ["The capital of France is", "naïve café — 東京 and", "Emoji are 🙂 and 🚀 and"]
    prompts.write_text("# the bundle's prompts\n" + "\n".join(texts) + "\n", encoding="utf-8")
    options = BenchOptions(
        settings=BenchSettings(bundle=tmp_path / "bundle", prompts=prompts), out_dir=tmp_path
    )
    monkeypatch.setattr(perf, "ensure_runtime_bundle", lambda bundle, gates: bundle)
    library = tmp_path / "lib.so"
    stepless = Job(
        matrix=MATRIX,
        platform=MATRIX.platform("linux-cpu"),
        steps=(),
        libraries={cell_id: library},
        bench=options,
    )
    evidence = SimpleNamespace(bundle=tmp_path / "bundle")
    series, *_ = perf.comparisons(stepless, MATRIX.cell(cell_id), check, "", options, evidence)  # type: ignore[arg-type]
    ran: list[tuple[str, int]] = []

    def run_tool(argv: list[str], out: Path, env: dict[str, str], runner: object = None) -> Any:
        chosen = Path(argv[argv.index("--prompts") + 1])
        ran.append((env["ELIZA_LLM_BACKEND"], len(perf.read_prompts(chosen))))
        return SimpleNamespace(peak_rss_source="proc-status-vmhwm", n=len(ran))

    monkeypatch.setattr(perf, "run_tool", run_tool)
    monkeypatch.setattr(perf, "run_metrics", lambda done: {"decode_tok_s": float(done.n)})
    by_label = {c.label: c for c in series}
    assert sorted(by_label) == ["litert-lm", "mlx-coreml"]
    assert perf.read_prompts(by_label["mlx-coreml"].opts.settings.prompts) == texts[:mlx_prompts]
    assert by_label["litert-lm"].opts.settings.prompts == prompts
    # each runtime's prompts as often as its fewest repeats, on both sides of its rounds
    base = min(perf.BACKEND_REPEATS, options.perf_repeats)
    for label, c in by_label.items():
        assert perf.perf_settings(c.opts).repeats == max(base, MIN_REPEATS.get(label, 1))
    assert perf.perf_settings(by_label["litert-lm"].opts).repeats >= 3 > base
    measured = perf.measure_series(MATRIX.cell(cell_id), series, 2, lambda line: None)
    taken = {c.label: samples for c, samples in zip(series, measured, strict=True)}
    # each series its own AB, BA rounds (no shared reference): two runs of a side per series
    assert sorted(ran) == sorted(
        [("mlx-coreml", mlx_prompts)] * 2 + [("llama.cpp", mlx_prompts)] * 2
        + [("litert-lm", 3)] * 2 + [("llama.cpp", 3)] * 2
    )  # fmt: skip
    assert taken["mlx-coreml"].reference["decode_tok_s"] != taken["litert-lm"].reference["decode_tok_s"]


# LiteRT-LM's prefill against its own runner on the tiny bundle, round by round, as measured
# on an Intel Xeon 2-core (2026-12-07): the six rounds of linux-cpu.litert+mlx's verify, then
# six rounds of the same body and runner run by hand.
NOISY_PREFILL = [0.93, 1.08, 1.19, 1.21, 1.22, 0.92, 1.137, 0.972, 1.293, 1.107, 1.235, 1.132]
# LiteRT-LM's prefill against its own runner on Gemma, the six rounds of linux-cpu.litert's
# verify on the same machine (2b45df1): centred on the 0.95 bound, 0.81 to 1.04.
CENTRED_PREFILL = [0.899, 0.915, 0.809, 0.97, 1.039, 0.984]


def litert_prefill_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ratios: list[float], **job: Any
) -> tuple[CheckOutcome, list[tuple[int, int]]]:
    """linux-cpu.litert's backend-perf run with its rounds against llama.cpp steady and its
    body's prefill at `ratios` of its own runner's, round by round: the outcome and the
    own-runner rounds asked for (first, how many)."""
    cell = CellId.parse("linux-cpu.litert")
    options = BenchOptions(settings=BenchSettings(bundle=tmp_path / "bundle"), out_dir=tmp_path / "bench")
    library = tmp_path / "lib.so"
    name = "litert-lm"
    series = backend_series(tmp_path, (name,), options)
    monkeypatch.setattr(
        perf, "comparisons", lambda *args: (series, perf.BACKEND_PERF_REFERENCE, "llama.cpp", (library,))
    )
    monkeypatch.setattr(perf, "own_runner_settings", lambda c: BenchSettings(bundle=tmp_path, max_tokens=64))
    monkeypatch.setattr(perf, "own_runner_prompts", lambda c: tmp_path / "prompts.txt")
    llama = {"decode_tok_s": 2000.0, "prefill_tok_s": 20000.0, "first_token_ms": 0.7, "peak_rss_kb": 72000.0}

    def measure_series(cell: object, measured: Any, n: int, log: object, *, first: int = 0) -> Any:
        wobble = [1 + 0.002 * ((first + i) % 3) for i in range(n)]
        steady = {k: [v * w for w in wobble] for k, v in llama.items()}
        return [perf.Samples(dict(steady), dict(steady)) for _ in measured]

    own_rounds: list[tuple[int, int]] = []

    def own_runner_rounds(cell: object, c: perf.Comparison, n: int, log: object, **kw: Any) -> perf.Samples:
        first = kw.get("first", 0)
        own_rounds.append((first, n))
        taken = ratios[first : first + n]
        return perf.Samples(
            candidate={"decode_step_tok_s": [2000.0] * n, "prefill_tok_s": [4000.0 * r for r in taken]},
            reference={"decode_step_tok_s": [2000.0] * n, "prefill_tok_s": [4000.0] * n},
        )

    monkeypatch.setattr(perf, "measure_series", measure_series)
    monkeypatch.setattr(perf, "own_runner_rounds", own_runner_rounds)
    (done,) = perf.run(
        backend_job(tmp_path, cell, "backend-perf", options, **job),
        SimpleNamespace(log=lambda line: None, detail=lambda line: None, bundle=None),
    )  # type: ignore[arg-type]
    return done, own_rounds


@pytest.mark.parametrize(
    ("ratios", "run_on_s", "runs_on"),
    [
        pytest.param(NOISY_PREFILL, perf.OWN_RUNNER_RUN_ON_S, True, id="likely-decided-runs-on"),
        pytest.param(NOISY_PREFILL, 0.0, False, id="rounds-too-slow-stops"),
        pytest.param(CENTRED_PREFILL, perf.OWN_RUNNER_RUN_ON_S, False, id="centred-on-the-bound-stops"),
    ],
)
def test_a_body_still_undecided_after_as_many_again_runs_on_to_twelve_where_they_would_decide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ratios: list[float], run_on_s: float, runs_on: bool
) -> None:
    """Six rounds of LiteRT-LM's measured prefill ratios leave it undecided (95 % CI
    0.925..1.215, 1.10 from a 0.95 bound: twelve could decide): it runs on to
    OWN_RUNNER_MOST_ROUNDS, whose twelve decide it, and the record says so. Where the rounds
    left would take longer than OWN_RUNNER_RUN_ON_S, or where the six rounds sit on the bound
    (Gemma's, 0.943, which would take about 50), it stops at six, INCONCLUSIVE with the
    rounds that would decide."""
    monkeypatch.setattr(perf, "OWN_RUNNER_RUN_ON_S", run_on_s)
    done, own_rounds = litert_prefill_check(tmp_path, monkeypatch, ratios)
    name = "litert-lm"
    own = done.details["perf"]["own_runner"][name]
    rounds = perf.OWN_RUNNER_ROUNDS
    (prefill,) = [row for row in done.details["perf"]["metrics"] if row["metric"] == "own_runner_prefill"]
    if runs_on:
        assert own_rounds == [
            (0, rounds),
            (rounds, rounds),
            (2 * rounds, perf.OWN_RUNNER_MOST_ROUNDS - 2 * rounds),
        ]
        assert own["rounds"] == perf.OWN_RUNNER_MOST_ROUNDS and "12 in all" in own["ran_on"]
        assert prefill["verdict"] == "verified"
        assert done.status is Status.PASSED, done.reason
    else:
        assert own_rounds == [(0, rounds), (rounds, rounds)]
        assert own["rounds"] == 2 * rounds and "ran_on" not in own
        assert prefill["verdict"] == "inconclusive"
        assert done.status is Status.INCONCLUSIVE
        assert (
            "own_runner_prefill" in done.reason
            and f"more rounds: --rounds {prefill['rounds_suggested']}" in done.reason
        )
        # the six measured rounds suggest what the rule decided on: within reach or beyond
        assert (prefill["rounds_suggested"] <= perf.OWN_RUNNER_SUGGESTED_AT_MOST) is (ratios is NOISY_PREFILL)


# LiteRT-LM's Gemma prefill against its own runner on linux-cpu.litert+mlx, as measured on an
# Intel Xeon 2-core (2026-12-08, an empty-cache verify): three rounds, then the three run
# right after them; and the cell's check run again two minutes later.
SPELL_PREFILL = [0.835, 0.835, 0.914, 0.856, 0.885, 0.923]
LATER_PREFILL = [1.022, 1.157, 0.972]


@pytest.mark.parametrize("later", ["steady", "slow again"])
def test_a_body_failing_its_own_runner_is_run_again_apart_from_its_first_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, later: str
) -> None:
    """A body beyond its bound in three rounds (the spell's, p < 0.05) runs as many again
    CONFIRM_APART_S after the first (the call's place given to the others meanwhile), and the
    verdict is all six:
    still slow, FAILED; steady by then (the rounds measured two minutes later), not FAILED."""
    windows: list[str] = []

    @contextmanager
    def alone() -> Iterator[None]:
        windows.append("alone")
        yield

    @contextmanager
    def waits_apart(gap: float) -> Iterator[None]:
        windows.append(f"{gap:g} s apart")
        yield

    ratios = SPELL_PREFILL if later == "slow again" else SPELL_PREFILL[:3] + LATER_PREFILL
    done, own_rounds = litert_prefill_check(tmp_path, monkeypatch, ratios, alone=alone, apart=waits_apart)
    rounds = perf.OWN_RUNNER_ROUNDS
    assert own_rounds == [(0, rounds), (rounds, rounds)]
    assert windows == ["alone", f"{perf.CONFIRM_APART_S:g} s apart", "alone"]
    own = done.details["perf"]["own_runner"]["litert-lm"]
    assert own["rounds"] == 2 * rounds and f"{perf.CONFIRM_APART_S:g} s later" in own["confirmed"]
    (prefill,) = [row for row in done.details["perf"]["metrics"] if row["metric"] == "own_runner_prefill"]
    if later == "slow again":
        assert prefill["verdict"] == "failed" and done.status is Status.FAILED
    else:
        assert prefill["verdict"] != "failed" and done.status is not Status.FAILED, done.reason
