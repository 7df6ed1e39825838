"""The second runtimes through the real C ABI: the linux-cpu.mlx cell's library with its MLX
module beside it, the linux-cpu.litert cell's with the LiteRT-LM engine beside it, and the
tiny bundle with each runtime's artifact converted from its GGUF. Streams are hard-selected
with ELIZA_LLM_BACKEND (read by the selector at every open)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from eliza.adapters.ffi import Context, Library
from tests.silence import pytest_runtest_makereport  # noqa: F401  (the silence check, for every test here)

CELL = "linux-cpu.mlx"
MLX = "mlx-coreml"  # the gate's factory name (matrix.yaml)
LITERT_CELL = "linux-cpu.litert"
LITERT = "litert-lm"


@pytest.fixture(scope="session")
def mlx_library() -> Path:
    from eliza.app.project import capability, load_project_matrix
    from eliza.app.services.build import ensure_cell_built

    matrix = load_project_matrix()
    can = capability(matrix.cell(CELL).platform)
    if not (can.can_build and can.loads_in_process):
        pytest.skip(f"{CELL} cannot be built and loaded here: {can.build_reason or can.in_process_reason()}")
    library = ensure_cell_built(CELL).library
    assert (library.parent / "libelizainference-mlx.so").is_file(), (
        "the mlx cell was built without its module"
    )
    return library


@pytest.fixture(scope="session")
def runtime_bundle() -> Path:
    from eliza.app.project import load_project_matrix
    from eliza.app.services.bundle import ensure_runtime_bundle, ensure_tiny_bundle

    return ensure_runtime_bundle(ensure_tiny_bundle(), load_project_matrix().gates)


@pytest.fixture(scope="session", autouse=True)
def one_decode_thread() -> Iterator[None]:
    saved = os.environ.get("ELIZA_N_THREADS")
    os.environ["ELIZA_N_THREADS"] = saved or "1"
    yield
    if saved is None:
        os.environ.pop("ELIZA_N_THREADS", None)


@pytest.fixture()
def mlx_ctx(mlx_library: Path, runtime_bundle: Path) -> Iterator[Context]:
    with Library(mlx_library).open_context(runtime_bundle) as context:
        yield context


@pytest.fixture()
def use_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ELIZA_LLM_BACKEND", MLX)
    yield


@pytest.fixture(scope="session")
def litert_library() -> Path:
    from eliza.app.project import capability, load_project_matrix
    from eliza.app.services.build import ensure_cell_built

    matrix = load_project_matrix()
    can = capability(matrix.cell(LITERT_CELL).platform)
    if not (can.can_build and can.loads_in_process):
        why = can.build_reason or can.in_process_reason()
        pytest.skip(f"{LITERT_CELL} cannot be built and loaded here: {why}")
    library = ensure_cell_built(LITERT_CELL).library
    assert (library.parent / "litert_lm" / "liblitert-lm.so").is_file(), (
        "the litert cell was built without its engine"
    )
    return library


@pytest.fixture()
def litert_ctx(litert_library: Path, runtime_bundle: Path) -> Iterator[Context]:
    with Library(litert_library).open_context(runtime_bundle) as context:
        yield context


@pytest.fixture()
def use_litert(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ELIZA_LLM_BACKEND", LITERT)
    yield


def bench(
    library: Path, bundle: Path, prompts: Path, out: Path, *, max_tokens: int, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """e2e_loop_bench of the library's build, in a process of its own (each selects its
    backend once), with `env` as its whole environment."""
    argv = [str(library.parent / "e2e_loop_bench"), "--library", str(library), "--bundle", str(bundle),
            "--prompts", str(prompts), "--max-tokens", str(max_tokens), "--out", str(out)]  # fmt: skip
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False)


def runs_without_the_runtime(
    library: Path, bundle: Path, backend: str, tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The same gate-ON build as on a host without the gate's runtime (ELIZA_BACKEND_MODULE_DIR,
    an empty folder): one run hard-selecting the backend, one leaving the choice to the
    selector."""
    empty = tmp_path / "no-modules"
    empty.mkdir()
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Once upon a time\n")
    hidden = {k: v for k, v in os.environ.items() if k != "ELIZA_LLM_BACKEND"}
    hidden["ELIZA_BACKEND_MODULE_DIR"] = str(empty)
    out = tmp_path / "out.jsonl"
    forced = bench(library, bundle, prompts, out, max_tokens=8, env={**hidden, "ELIZA_LLM_BACKEND": backend})
    return forced, bench(library, bundle, prompts, out, max_tokens=8, env=hidden)


@pytest.fixture(scope="session")
def gemma3_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runtime bundle of the tiny Gemma 3 model (random weights, sliding window 6, every
    third layer global): text/<name>.gguf and text/mlx, staged as bundle making stages them."""
    from eliza.app.services.bundle import ensure_mlx_weights, tiny_vocab
    from eliza.formats.tiny_gguf import TinyGemma3Spec, write_tiny_gemma3_gguf

    bundle = tmp_path_factory.mktemp("gemma3-bundle")
    (bundle / "text").mkdir()
    write_tiny_gemma3_gguf(bundle / "text" / "eliza-tiny-gemma3.gguf", tiny_vocab(), TinyGemma3Spec())
    ensure_mlx_weights(bundle)
    return bundle


@pytest.fixture()
def gemma3_ctx(mlx_library: Path, gemma3_bundle: Path) -> Iterator[Context]:
    with Library(mlx_library).open_context(gemma3_bundle) as context:
        yield context
