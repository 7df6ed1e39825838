"""pytest-benchmark view of the seam overhead: the same decode-heavy run through the C ABI
(e2e_loop_bench) and through the plain llama.h loop (reference_runner), one group, so
`--benchmark-compare` shows both across saved runs. Skipped in the normal suite
(`--benchmark-skip` in pyproject); `nox -s benchmarks` runs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from eliza.adapters.bench_tools import BenchSettings, bench_argv, reference_argv, run_tool

PROMPTS = "Once upon a time there was\nThe quick brown fox jumps over the lazy dog and then\n"


@pytest.fixture(scope="module")
def settings(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> BenchSettings:
    prompts = tmp_path_factory.mktemp("bench") / "prompts.txt"
    prompts.write_text(PROMPTS)
    return BenchSettings(bundle=tiny_bundle, prompts=prompts, max_tokens=128, repeats=1)


@pytest.mark.benchmark(group="decode-128-tokens")
def test_decode_through_the_c_abi(
    benchmark, library_path: Path, settings: BenchSettings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "ffi.jsonl"
    run = benchmark.pedantic(
        run_tool,
        args=(bench_argv(library_path.parent, library_path, settings, "b", out), out),
        rounds=7,
        warmup_rounds=1,
    )
    assert run.generated_tokens == 2 * settings.max_tokens


@pytest.mark.benchmark(group="decode-128-tokens")
def test_decode_through_plain_llama_h(
    benchmark, library_path: Path, settings: BenchSettings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "ref.jsonl"
    run = benchmark.pedantic(
        run_tool,
        args=(reference_argv(library_path.parent, settings, "b", out), out),
        rounds=7,
        warmup_rounds=1,
    )
    assert run.generated_tokens == 2 * settings.max_tokens
