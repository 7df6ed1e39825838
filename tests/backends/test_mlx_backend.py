"""The MLX backend behind the unchanged C ABI, on the CPU: what it generates agrees with the
llama.cpp path of the same library and bundle, and it keeps the stream contract (cancel from
another thread, reset, reset_keep, slots, UTF-8, errors, threads, concurrent streams), for
the llama architecture (the tiny bundle) and Gemma 3 (a random-weights model whose sliding
window of 6 the longer prompts overrun)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from eliza.adapters.ffi import ERR_CANCELLED, Context, ElizaError, Library, greedy_config
from eliza.formats.tiny_gguf import TinyGemma3Spec
from tests.backends.conftest import MLX, bench, runs_without_the_runtime

ARCHITECTURES = ("llama", "gemma3")

PROMPTS = (
    "Once upon a time",
    "The price",  # the tiny model's planted chain: " price€." then EOS (multi-byte, split over tokens)
    "naïve café — 東京 and",
    "A prompt that is somewhat longer than the others, so that the prefill spans more positions",
)


@pytest.fixture(params=ARCHITECTURES)
def ctx(request: pytest.FixtureRequest) -> Context:
    """A context of the tiny llama bundle, then of the tiny Gemma 3 one."""
    fixture = "mlx_ctx" if request.param == "llama" else "gemma3_ctx"
    context: Context = request.getfixturevalue(fixture)
    return context


def greedy(ctx: Context, prompt: str, max_tokens: int = 48) -> tuple[list[int], bytes]:
    with ctx.open_stream(greedy_config(max_tokens)) as stream:
        stream.prefill(ctx.tokenize(prompt))
        return stream.generate()


def threads() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads: line in /proc/self/status")


def test_greedy_output_equals_the_llama_path(mlx_ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ELIZA_LLM_BACKEND", "llama.cpp")
    reference = [greedy(mlx_ctx, p) for p in PROMPTS]
    monkeypatch.setenv("ELIZA_LLM_BACKEND", MLX)
    served = [greedy(mlx_ctx, p) for p in PROMPTS]
    assert served == reference
    assert served[1][1] == "€.".encode() and len(served[1][0]) < 48  # the chain (multi-byte), then EOS


@pytest.mark.usefixtures("use_backend")
def test_cancel_from_another_thread_ends_the_stream(ctx: Context) -> None:
    with ctx.open_stream(greedy_config(0)) as stream:  # no token budget: only cancel ends it
        stream.prefill(ctx.tokenize(PROMPTS[0]))
        outcome: list[object] = []

        def generate() -> None:
            try:
                while stream.next().status == 0:
                    pass
                outcome.append("final")
            except ElizaError as exc:
                outcome.append(exc.code)

        worker = threading.Thread(target=generate)
        worker.start()
        time.sleep(0.2)
        assert stream.cancel() == 0
        worker.join(timeout=30)
        assert not worker.is_alive() and outcome in (["final"], [ERR_CANCELLED]), outcome
        with pytest.raises(ElizaError) as cancelled:
            stream.next()
        assert cancelled.value.code == ERR_CANCELLED
        # reset makes the stream usable again, from a clean state
        assert stream.reset() == 0
        stream.prefill(ctx.tokenize(PROMPTS[2]))
        assert stream.next().status in (0, 1)


def test_reset_and_reset_keep_continue_exactly_as_the_llama_path(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    head, tail = ctx.tokenize(PROMPTS[3]), ctx.tokenize(" and then", add_special=False)

    def session() -> list[object]:
        """What each call of one stream's lifecycle answers."""
        said: list[object] = []
        with ctx.open_stream(greedy_config(16)) as fresh:
            fresh.prefill(head + tail)
            said.append(fresh.generate())
        with ctx.open_stream(greedy_config(16)) as stream:
            stream.prefill(head)
            stream.generate()
            said.append(stream.reset_keep(len(head)))  # the exact prefix is kept
            stream.prefill(tail)
            said.append(stream.generate())  # continues as a fresh prefill of head + tail
            said.append(stream.reset_keep(10**6))  # more than it holds: all it holds
            said.append(stream.reset_keep(0))  # nothing to keep: the full reset
            said.append(stream.reset())
            stream.prefill(head + tail)
            said.append(stream.generate())
        return said

    monkeypatch.setenv("ELIZA_LLM_BACKEND", "llama.cpp")
    llama = session()
    monkeypatch.setenv("ELIZA_LLM_BACKEND", MLX)
    served = session()
    assert served == llama
    assert served[1] == len(head) and served[2] == served[0] == served[6] and served[4] == 0


@pytest.mark.usefixtures("use_backend")
def test_a_slot_restores_the_stream_where_it_was(ctx: Context, tmp_path: Path) -> None:
    slot = tmp_path / "slot.bin"
    with ctx.open_stream(greedy_config(24)) as stream:
        stream.prefill(ctx.tokenize(PROMPTS[0]))
        for _ in range(5):
            stream.next()
        stream.save_slot(slot)
        rest = stream.generate()
    with ctx.open_stream(greedy_config(24)) as other:
        other.restore_slot(slot)
        assert other.generate() == rest
        corrupt = tmp_path / "corrupt.bin"
        data = bytearray(slot.read_bytes())
        data[20] ^= 0xFF
        corrupt.write_bytes(bytes(data))
        with pytest.raises(ElizaError, match="corrupt"):
            other.restore_slot(corrupt)


def test_streams_of_one_context_concurrently_give_their_single_stream_tokens(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ELIZA_LLM_BACKEND", MLX)
    alone = [greedy(ctx, p, 32) for p in PROMPTS]
    results: dict[int, tuple[list[int], bytes]] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = greedy(ctx, PROMPTS[i], 32)
        except BaseException as exc:  # reported below, with the others
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert not errors and [results[i] for i in range(len(PROMPTS))] == alone


@pytest.mark.usefixtures("use_backend")
def test_open_close_cycles_leave_the_thread_count_bounded(mlx_ctx: Context) -> None:
    prompt = mlx_ctx.tokenize(PROMPTS[0])
    for _ in range(10):  # MLX's own threads start with the first streams
        with mlx_ctx.open_stream(greedy_config(2)) as stream:
            stream.prefill(prompt)
            stream.generate()
    before = threads()
    for _ in range(200):
        with mlx_ctx.open_stream(greedy_config(2)) as stream:
            stream.prefill(prompt)
            stream.generate()
    assert threads() <= before, (before, threads())


@pytest.mark.usefixtures("use_backend")
def test_bad_input_gets_the_llama_paths_status_codes(ctx: Context) -> None:
    with ctx.open_stream(greedy_config(4)) as stream:
        with pytest.raises(ElizaError, match="call _prefill first"):
            stream.next()
        with pytest.raises(ElizaError, match="outside the vocabulary"):
            stream.prefill([10**7])
        with pytest.raises(ElizaError, match="empty prefill"):
            stream.prefill([])


def test_weights_converted_from_another_gguf_are_refused_in_one_line(
    mlx_library: Path, runtime_bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eliza.app.services.bundle import tiny_vocab
    from eliza.formats.mlx_weights import convert
    from eliza.formats.tiny_gguf import TinyModelSpec, write_tiny_gguf

    bundle = tmp_path / "bundle"
    (bundle / "text").mkdir(parents=True)
    gguf = next((runtime_bundle / "text").glob("*.gguf"))
    (bundle / "text" / gguf.name).write_bytes(gguf.read_bytes())
    other = tmp_path / "other.gguf"
    write_tiny_gguf(other, tiny_vocab(), TinyModelSpec(seed=9))
    convert(other, bundle / "text" / "mlx")
    monkeypatch.setenv("ELIZA_LLM_BACKEND", MLX)
    with Library(mlx_library).open_context(bundle) as ctx, pytest.raises(ElizaError) as refused:
        ctx.open_stream(greedy_config(4))
    message = str(refused.value)
    assert "was converted from a GGUF with sha256" in message and "eliza mlx-weights" in message
    assert "\n" not in message


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_a_damaged_weights_file_is_refused_in_one_line(
    mlx_library: Path, request: pytest.FixtureRequest, architecture: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """One byte of model.safetensors flipped (same size, still loadable): refused, naming the
    file and the repair, instead of computing something else."""
    import shutil

    bundle = tmp_path / "bundle"
    shutil.copytree(
        request.getfixturevalue("runtime_bundle" if architecture == "llama" else "gemma3_bundle"), bundle
    )
    weights = bundle / "text" / "mlx" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x40  # inside the last tensor's float data
    weights.write_bytes(bytes(data))
    monkeypatch.setenv("ELIZA_LLM_BACKEND", MLX)
    with Library(mlx_library).open_context(bundle) as ctx, pytest.raises(ElizaError) as refused:
        ctx.open_stream(greedy_config(4))
    message = str(refused.value)
    assert f"'{weights}' is not the file its conversion wrote" in message and "\n" not in message
    assert "eliza mlx-weights" in message, message


def test_another_llama_gguf_converted_by_the_documented_command_is_served_and_agrees(
    mlx_library: Path, tmp_path: Path
) -> None:
    """Other widths, layers, heads and vocabulary size than the fixture's; converted with
    `eliza mlx-weights`, in processes of their own (each selects its backend once)."""
    from eliza.app.services.bundle import tiny_vocab
    from eliza.formats.tiny_gguf import TinyModelSpec, write_tiny_gguf

    spec = TinyModelSpec(seed=5, n_embd=96, n_layer=3, n_head=6, n_head_kv=2, n_ff=160, vocab_size=30000)
    bundle = tmp_path / "bundle"
    gguf = bundle / "text" / "other.gguf"
    write_tiny_gguf(gguf, tiny_vocab(), spec)
    converted = subprocess.run(
        [sys.executable, "-m", "eliza.cli", "mlx-weights", str(gguf)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert converted.returncode == 0 and (bundle / "text" / "mlx" / "model.safetensors").is_file(), (
        converted.stderr
    )
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    runs = {}
    for backend in ("llama.cpp", MLX):
        out = tmp_path / f"{backend}.jsonl"
        done = bench(
            mlx_library, bundle, prompts, out, max_tokens=32, env={**os.environ, "ELIZA_LLM_BACKEND": backend}
        )
        assert done.returncode == 0, done.stderr
        from eliza.formats.bench_jsonl import load_run

        runs[backend] = load_run(out)
    assert runs[MLX].header["build"]["llm_backend"] == MLX
    assert [p.tokens for p in runs[MLX].prompts] == [p.tokens for p in runs["llama.cpp"].prompts]
    assert sum(len(p.tokens) for p in runs[MLX].prompts) > 0


def test_without_the_runtime_a_hard_selection_fails_and_auto_selection_falls_through(
    mlx_library: Path, runtime_bundle: Path, tmp_path: Path
) -> None:
    """The same gate-ON build on a host without MLX: its module is not where the library
    looks (ELIZA_BACKEND_MODULE_DIR, an empty folder), as on a machine that lacks it."""
    forced, auto = runs_without_the_runtime(mlx_library, runtime_bundle, MLX, tmp_path)
    assert forced.returncode != 0 and "unavailable on this host" in forced.stderr, forced.stderr
    assert auto.returncode == 0, auto.stderr


# Longer than the tiny Gemma 3's window (6) several times over, so that prefill, the decode
# steps after it and reset_keep's continuation all see keys drop out of the local layers.
LONG_PROMPT = (
    "The committee met on a grey morning to read the long report about the bridge, the river, "
    "the old mill and the people who had lived beside them for a hundred years"
)


def test_gemma3_greedy_output_equals_the_llama_path(
    gemma3_ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = (*PROMPTS, LONG_PROMPT)
    assert len(gemma3_ctx.tokenize(LONG_PROMPT)) > 4 * 6
    monkeypatch.setenv("ELIZA_LLM_BACKEND", "llama.cpp")
    reference = [greedy(gemma3_ctx, p) for p in prompts]
    monkeypatch.setenv("ELIZA_LLM_BACKEND", MLX)
    served = [greedy(gemma3_ctx, p) for p in prompts]
    assert served == reference
    assert all(len(tokens) == 48 for tokens, _ in served)  # no EOS: every step compared


def test_the_gemma3_agreement_covers_the_sliding_window(
    mlx_library: Path, gemma3_bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: the same weights with a window no prompt reaches generate otherwise on
    llama.cpp, so the agreement above holds only if the MLX path masks as llama.cpp does."""
    from eliza.app.services.bundle import tiny_vocab
    from eliza.formats.tiny_gguf import write_tiny_gemma3_gguf

    wide = tmp_path / "bundle"
    write_tiny_gemma3_gguf(wide / "text" / "wide.gguf", tiny_vocab(), TinyGemma3Spec(sliding_window=4096))
    monkeypatch.setenv("ELIZA_LLM_BACKEND", "llama.cpp")
    library = Library(mlx_library)
    with library.open_context(gemma3_bundle) as windowed, library.open_context(wide) as unwindowed:
        for prompt in (PROMPTS[3], LONG_PROMPT):
            assert greedy(windowed, prompt) != greedy(unwindowed, prompt), prompt


@pytest.mark.parametrize(
    "spec",
    [
        TinyGemma3Spec(seed=11, n_embd=64, n_layer=5, n_head=4, n_head_kv=2, head_dim=32, n_ff=128,
                       sliding_window=4, swa_pattern=2, rope_base_local=5000.0, tied=False, vocab_size=30000),
        TinyGemma3Spec(seed=12, n_embd=80, n_layer=3, n_head=2, n_head_kv=2, head_dim=40, n_ff=96,
                       sliding_window=9, swa_pattern=3, rope_base=10000.0, tied=True),
    ],
    ids=["untied-gqa2-window4", "tied-mha-window9"],
)  # fmt: skip
def test_another_gemma3_gguf_converted_by_the_documented_command_is_served_and_agrees(
    mlx_library: Path, tmp_path: Path, spec: TinyGemma3Spec
) -> None:
    """Other widths, layers, heads, head sizes, windows, patterns and rope bases than the
    fixture's, tied and untied; converted with `eliza mlx-weights`, each backend in a
    process of its own."""
    from eliza.app.services.bundle import tiny_vocab
    from eliza.formats.bench_jsonl import load_run
    from eliza.formats.tiny_gguf import write_tiny_gemma3_gguf

    bundle = tmp_path / "bundle"
    gguf = bundle / "text" / "other.gguf"
    write_tiny_gemma3_gguf(gguf, tiny_vocab(), spec)
    converted = subprocess.run(
        [sys.executable, "-m", "eliza.cli", "mlx-weights", str(gguf)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert converted.returncode == 0, converted.stderr
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join((PROMPTS[0], PROMPTS[3], LONG_PROMPT)) + "\n")
    runs = {}
    for backend in ("llama.cpp", MLX):
        out = tmp_path / f"{backend}.jsonl"
        done = bench(
            mlx_library, bundle, prompts, out, max_tokens=32, env={**os.environ, "ELIZA_LLM_BACKEND": backend}
        )
        assert done.returncode == 0, done.stderr
        runs[backend] = load_run(out)
    assert runs[MLX].header["build"]["llm_backend"] == MLX
    assert [p.tokens for p in runs[MLX].prompts] == [p.tokens for p in runs["llama.cpp"].prompts]
    assert sum(len(p.tokens) for p in runs[MLX].prompts) > 0


def test_gemma3_prefill_in_chunks_after_a_prefix_continues_as_one_prefill(
    gemma3_ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks of 5 (shorter than the window of 6) and of 11 (longer), each after the cache
    the previous ones left: every chunk's sliding-window mask starts past the cache's first
    key, and the result is the one-call prefill's, on both paths."""
    ids = gemma3_ctx.tokenize(LONG_PROMPT)

    def chunked(size: int) -> tuple[list[int], bytes]:
        with gemma3_ctx.open_stream(greedy_config(24)) as stream:
            for start in range(0, len(ids), size):
                stream.prefill(ids[start : start + size])
            return stream.generate()

    runs = {}
    for backend in ("llama.cpp", MLX):
        monkeypatch.setenv("ELIZA_LLM_BACKEND", backend)
        runs[backend] = [chunked(size) for size in (len(ids), 5, 11)]
    assert runs[MLX] == runs["llama.cpp"]
    assert runs[MLX][1] == runs[MLX][2] == runs[MLX][0]
