"""The consumers run against the library of ELIZA_TEST_CELL (default: the first no-gate
cell, linux-cpu.none), built by the session fixtures of tests/conftest.py if missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from eliza.adapters.ffi import Library, greedy_config
from eliza.core.bench_records import BenchRun
from eliza.formats.bench_jsonl import load_run
from tests.consumers.helpers import (
    CONSUMER_ENV,
    CONSUMERS,
    MAX_TOKENS,
    PROMPTS,
    ConsumerRun,
    build_jni,
    node_command,
    run_consumer,
)


@pytest.fixture(scope="session")
def jni_launcher() -> Path:
    return build_jni()


@pytest.fixture(scope="session", params=CONSUMERS)
def consumer_command(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "node":
        return node_command()
    return [str(request.getfixturevalue("jni_launcher"))]


@pytest.fixture(scope="session")
def lifecycle(
    consumer_command: list[str],
    library_path: Path,
    tiny_bundle: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> ConsumerRun:
    """One full run of the consumer on the default prompts, shared by the tests that read it."""
    out = tmp_path_factory.mktemp("consumer") / "result.json"
    return run_consumer(consumer_command, library_path, tiny_bundle, out)


@pytest.fixture(scope="session")
def python_greedy(library_path: Path, tiny_bundle: Path) -> list[tuple[str, list[int], list[int]]]:
    """(prompt, prompt tokens, greedy tokens) of every default prompt through the ctypes binding."""
    from tests.consumers.prompts import read_prompts

    out = []
    with Library(library_path).open_context(tiny_bundle) as ctx:
        for prompt in read_prompts(PROMPTS):
            ids = ctx.tokenize(prompt)
            with ctx.open_stream(greedy_config(MAX_TOKENS)) as stream:
                stream.prefill(ids)
                tokens, _ = stream.generate()
            out.append((prompt, ids, tokens))
    return out


@pytest.fixture(scope="session")
def reference_run(
    library_path: Path, tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory
) -> BenchRun:
    """The same prompts through reference_runner: plain llama.h, no C ABI."""
    import os
    import subprocess

    out = tmp_path_factory.mktemp("reference") / "reference.jsonl"
    done = subprocess.run(
        [str(library_path.parent / "reference_runner"), "--bundle", str(tiny_bundle),
         "--prompts", str(PROMPTS), "--max-tokens", str(MAX_TOKENS), "--repeats", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, **CONSUMER_ENV}, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return load_run(out)
