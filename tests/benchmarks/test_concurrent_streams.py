"""Concurrent streams: aggregate tok/s of 1, 2 and 4 greedy streams on separate contexts,
measured by `e2e_loop_bench --streams` (interleaved rounds, each N once per round in a
rotated order; medians with quartiles and range). Every stream's output must equal its
serial run. The goal is an aggregate with 2 and 4 streams of at least 0.9x one stream's;
the figures go to the benchmark's extra_info (and the saved run), and only a collapse —
streams spinning against each other, as when each took every core — fails the test.
Skipped in the normal suite (`--benchmark-skip`); `nox -s benchmarks` runs it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

PROMPTS = (
    "Once upon a time there was\n"
    "The quick brown fox jumps over the lazy dog and then\n"
    "Hello world, this is\n"
    "In the beginning the universe was\n"
)
STREAMS = (1, 2, 4)
ROUNDS = int(os.environ.get("ELIZA_CONCURRENT_ROUNDS", "7"))
MAX_TOKENS = 128
COLLAPSE_RATIO = 0.25  # far below the 0.9 goal: only a pathology fails


def run_concurrent(build_dir: Path, library: Path, bundle: Path, out: Path) -> dict[int, dict[str, float]]:
    prompts = out.with_suffix(".prompts")
    prompts.write_text(PROMPTS)
    argv = [
        str(build_dir / "e2e_loop_bench"), "--library", str(library.resolve()), "--bundle", str(bundle),
        "--prompts", str(prompts), "--max-tokens", str(MAX_TOKENS), "--repeats", str(ROUNDS),
        "--streams", ",".join(map(str, STREAMS)), "--out", str(out),
    ]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, timeout=1800)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return {r["streams"]: r for r in records if r["type"] == "summary"}


@pytest.mark.benchmark(group="concurrent-streams")
def test_concurrent_streams_aggregate(
    benchmark, library_path: Path, tiny_bundle: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "concurrent.jsonl"
    summary = benchmark.pedantic(
        run_concurrent, args=(library_path.parent, library_path, tiny_bundle, out), rounds=1, iterations=1
    )
    for n in STREAMS:
        s = summary[n]
        benchmark.extra_info[f"streams_{n}"] = {
            k: s[k]
            for k in ("median_tok_s", "q1_tok_s", "q3_tok_s", "min_tok_s", "max_tok_s", "ratio_to_one")
        }
        assert s["identical_to_serial"], f"{n} concurrent streams diverged from their serial runs"
    for n in STREAMS[1:]:
        assert summary[n]["ratio_to_one"] >= COLLAPSE_RATIO, summary
