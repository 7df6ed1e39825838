"""Every bad input returns the documented negative code and a message, never a crash."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest

from eliza.adapters import ffi
from eliza.adapters.ffi import (
    ERR_BUNDLE_INVALID,
    ERR_CANCELLED,
    ERR_INVALID_ARG,
    ERR_NOT_IMPLEMENTED,
    Context,
    ElizaError,
    Library,
    greedy_config,
)
from eliza.app.project import load_project_matrix
from eliza.core.c_abi import header_constants
from eliza.core.layout import REPO_ROOT, public_header

HEADER = public_header(REPO_ROOT)


def call_status(lib: Library, name: str, *args):
    """Calls a status-returning function with an out_error slot; returns (rc, message)."""
    err = ctypes.c_void_p()
    rc = getattr(lib.lib, name)(*args, ctypes.byref(err))
    return rc, lib.take_error(err)


def test_null_handles(lib: Library) -> None:
    toks = (ctypes.c_int32 * 4)(1, 2, 3, 4)
    n = ctypes.c_size_t()
    text = ctypes.create_string_buffer(64)
    out_tokens = ctypes.POINTER(ctypes.c_int)()
    out_text = ctypes.c_void_p()
    cases = [
        ("eliza_inference_tokenize", (None, b"hi", 2, 1, 0, ctypes.byref(out_tokens), ctypes.byref(n))),
        ("eliza_inference_detokenize", (None, toks, 4, 0, 0, ctypes.byref(out_text), ctypes.byref(n))),
        ("eliza_inference_llm_stream_prefill", (None, toks, 4)),
        ("eliza_inference_llm_stream_next", (None, toks, 4, ctypes.byref(n), text, 64, None, None)),
        ("eliza_inference_llm_stream_save_slot", (None, b"/tmp/x")),
        ("eliza_inference_llm_stream_restore_slot", (None, b"/tmp/x")),
    ]
    for name, args in cases:
        rc, message = call_status(lib, name, *args)
        assert rc == ERR_INVALID_ARG, name
        assert name in message and "NULL" in message
    for name in ("eliza_inference_llm_stream_cancel", "eliza_inference_llm_stream_reset"):
        assert getattr(lib.lib, name)(None) == ERR_INVALID_ARG
    assert lib.lib.eliza_inference_llm_stream_reset_keep(None, 3) == ERR_INVALID_ARG
    err = ctypes.c_void_p()
    assert not lib.lib.eliza_inference_llm_stream_open(None, ctypes.byref(greedy_config()), ctypes.byref(err))
    assert "ctx and cfg must be non-NULL" in lib.take_error(err)
    # NULL-safe frees
    lib.lib.eliza_inference_destroy(None)
    lib.lib.eliza_inference_llm_stream_close(None)
    lib.lib.eliza_inference_free_string(None)
    lib.lib.eliza_inference_free_tokens(None)


def test_null_pointers_inside_valid_handles(lib: Library, ctx: Context) -> None:
    n = ctypes.c_size_t()
    rc, message = call_status(
        lib, "eliza_inference_tokenize", ctx.handle, b"hi", 2, 1, 0, None, ctypes.byref(n)
    )
    assert rc == ERR_INVALID_ARG and "out_tokens" in message
    err = ctypes.c_void_p()
    assert not lib.lib.eliza_inference_llm_stream_open(ctx.handle, None, ctypes.byref(err))
    assert "cfg" in lib.take_error(err)
    with ctx.open_stream() as stream:
        rc, message = call_status(lib, "eliza_inference_llm_stream_prefill", stream.handle, None, 3)
        assert rc == ERR_INVALID_ARG and "token_ids is NULL" in message
        stream.prefill(ctx.tokenize("hi"))
        text = ctypes.create_string_buffer(64)
        rc, message = call_status(
            lib,
            "eliza_inference_llm_stream_next",
            stream.handle,
            None,
            4,
            ctypes.byref(n),
            text,
            64,
            None,
            None,
        )
        assert rc == ERR_INVALID_ARG and "tokens_out" in message


def test_tokens_cap_zero(ctx: Context) -> None:
    with ctx.open_stream() as stream:
        stream.prefill(ctx.tokenize("hello"))
        with pytest.raises(ElizaError) as err:
            stream.next(tokens_cap=0)
        assert err.value.code == ERR_INVALID_ARG and "tokens_cap" in err.value.message
        assert stream.next().tokens  # nothing was consumed


def test_text_cap_too_small_consumes_nothing(ctx: Context) -> None:
    with ctx.open_stream(greedy_config(6)) as fresh:
        fresh.prefill(ctx.tokenize("hello"))
        want = fresh.generate()
    with ctx.open_stream(greedy_config(6)) as stream:
        stream.prefill(ctx.tokenize("hello"))
        with pytest.raises(ElizaError) as err:
            stream.next(text_cap=2)
        assert err.value.code == ERR_INVALID_ARG and "text_cap 2 is too small" in err.value.message
        assert stream.generate() == want


def test_token_ids_out_of_vocabulary(ctx: Context) -> None:
    n_vocab = 32000
    with ctx.open_stream() as stream:
        for bad in ([-1], [1, n_vocab], [2**31 - 1]):
            with pytest.raises(ElizaError) as err:
                stream.prefill(bad)
            assert err.value.code == ERR_INVALID_ARG and "outside the vocabulary" in err.value.message
    with pytest.raises(ElizaError) as err:
        ctx.detokenize([5, n_vocab])
    assert err.value.code == ERR_INVALID_ARG and "tokens[1]" in err.value.message


def test_empty_prefill_and_next_before_prefill(ctx: Context) -> None:
    with ctx.open_stream() as stream:
        with pytest.raises(ElizaError) as err:
            stream.prefill([])
        assert err.value.code == ERR_INVALID_ARG and "empty prefill" in err.value.message
        with pytest.raises(ElizaError) as err:
            stream.next()
        assert err.value.code == ERR_INVALID_ARG and "_prefill first" in err.value.message


def test_prefill_past_context_size_leaves_stream_usable(ctx: Context) -> None:
    with ctx.open_stream(greedy_config(4)) as stream:
        stream.prefill(ctx.tokenize("hello"))
        with pytest.raises(ElizaError) as err:
            stream.prefill([100] * 600)
        assert err.value.code == ERR_INVALID_ARG and "exceeds the context size 512" in err.value.message
        assert len(stream.generate()[0]) == 4


def test_grammar_is_not_implemented(ctx: Context) -> None:
    # Drafter input errors: tests/native/test_drafter.py.
    with pytest.raises(ElizaError) as err:
        ctx.open_stream(greedy_config(gbnf_grammar=b'root ::= "a"'))
    assert err.value.code == ERR_NOT_IMPLEMENTED and "gbnf_grammar" in err.value.message


def _create_error(lib: Library, bundle) -> str:
    with pytest.raises(ElizaError) as err:
        lib.open_context(bundle)
    return err.value.message


def test_bad_bundles(lib: Library, tiny_bundle: Path, tmp_path: Path) -> None:
    assert "does not exist" in _create_error(lib, tmp_path / "missing")
    assert "NULL or empty" in _create_error(lib, None)

    empty = tmp_path / "no-text"
    (empty / "text").mkdir(parents=True)
    # an artifact of an alternate runtime (the matrix's first gate) is not a text model
    suffix = load_project_matrix().gates[0].artifacts[0].rsplit("*", 1)[-1].rstrip("/")
    (empty / "text" / f"model{suffix}").write_bytes(b"x")
    assert "expected exactly one text/*.gguf" in _create_error(lib, empty)

    model = next((tiny_bundle / "text").glob("*.gguf"))
    truncated = tmp_path / "truncated"
    (truncated / "text").mkdir(parents=True)
    (truncated / "text" / "m.gguf").write_bytes(model.read_bytes()[: model.stat().st_size // 3])
    assert "cannot load text model" in _create_error(lib, truncated)

    corrupt = tmp_path / "corrupt"
    (corrupt / "text").mkdir(parents=True)
    (corrupt / "text" / "m.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 40)
    assert "cannot load text model" in _create_error(lib, corrupt)

    two = tmp_path / "two"
    (two / "text").mkdir(parents=True)
    shutil.copy(model, two / "text" / "a.gguf")
    shutil.copy(model, two / "text" / "b.gguf")
    assert "keep exactly one" in _create_error(lib, two)


def test_bad_slot_files(ctx: Context, tmp_path: Path) -> None:
    good = tmp_path / "good.bin"
    with ctx.open_stream(greedy_config(8)) as stream:
        stream.prefill(ctx.tokenize("hello there"))
        stream.next()
        stream.save_slot(good)
    data = good.read_bytes()
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"not a slot file at all" * 10)
    truncated = tmp_path / "truncated.bin"
    truncated.write_bytes(data[: len(data) // 2])
    flipped = tmp_path / "flipped.bin"
    flipped.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    cases = {
        tmp_path / "missing.bin": "cannot be opened",
        garbage: "bad magic",
        truncated: "corrupt",
        flipped: "checksum mismatch",
    }
    with ctx.open_stream(greedy_config(8)) as stream:
        for path, why in cases.items():
            with pytest.raises(ElizaError) as err:
                stream.restore_slot(path)
            assert err.value.code == ERR_INVALID_ARG
            assert str(path) in err.value.message and why in err.value.message
        stream.restore_slot(good)  # still usable afterwards
        assert stream.next().tokens


def test_malformed_env_override_is_an_error(
    lib: Library, tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ELIZA_N_CTX", "lots")
    message = _create_error(lib, tiny_bundle)
    assert "ELIZA_N_CTX='lots' is not a positive integer" in message


def test_env_override_sets_context_size(
    lib: Library, tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    monkeypatch.setenv("ELIZA_N_CTX", "200")
    with lib.open_context(tiny_bundle) as ctx, ctx.open_stream() as stream:
        with pytest.raises(ElizaError) as err:
            stream.prefill([100] * 300)  # fits the model's default of 512, not the override
        size = int(re.search(r"exceeds the context size (\d+)", err.value.message).group(1))  # type: ignore[union-attr]
        assert 200 <= size < 300  # llama.cpp may round the request up to its padding


def test_bundle_error_code(lib: Library, tmp_path: Path) -> None:
    err = ctypes.c_void_p()
    assert not lib.lib.eliza_inference_create(str(tmp_path / "nope").encode(), ctypes.byref(err))
    assert "does not exist" in lib.take_error(err)
    with pytest.raises(ElizaError) as raised:
        lib.open_context(tmp_path / "nope")
    assert raised.value.code == ERR_BUNDLE_INVALID and "does not exist" in raised.value.message


def test_the_bindings_status_constants_are_the_headers() -> None:
    """Every ELIZA_* constant of the header is the binding's constant of that name less its
    prefix (ELIZA_ERR_CANCELLED: ffi.ERR_CANCELLED), with the same value; the binding has
    no status the header lacks, and names each status as the header does."""
    header = header_constants(HEADER.read_text(encoding="utf-8"))
    statuses = {n: v for n, v in header.items() if n == "ELIZA_OK" or n.startswith("ELIZA_ERR_")}
    assert "ELIZA_OK" in statuses and len(statuses) > 1, f"{HEADER}: no status constants found"
    for name, value in header.items():
        ours = name.removeprefix("ELIZA_")
        assert hasattr(ffi, ours), f"{name} ({value}) has no {ours} in eliza.adapters.ffi"
        assert getattr(ffi, ours) == value, f"ffi.{ours} is {getattr(ffi, ours)}, the header's {name} {value}"
    bound = {n for n in vars(ffi) if n == "OK" or n.startswith("ERR_")}
    assert {f"ELIZA_{n}" for n in bound} == set(statuses)
    assert {value: name for name, value in statuses.items()} == ffi.STATUS_NAMES


def test_rejected_slot_file_leaves_the_stream_as_it_was(ctx: Context, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"x" * 100)
    with ctx.open_stream(greedy_config(8)) as fresh:
        fresh.prefill(ctx.tokenize("hello there"))
        want = fresh.generate()
    with ctx.open_stream(greedy_config(8)) as stream:
        stream.prefill(ctx.tokenize("hello there"))
        with pytest.raises(ElizaError) as err:
            stream.restore_slot(garbage)
        assert err.value.code == ERR_INVALID_ARG
        assert stream.generate() == want  # the cache, logits and counters are untouched
    with ctx.open_stream(greedy_config(8)) as stream:
        stream.prefill(ctx.tokenize("hello there"))
        assert stream.cancel() == 0
        with pytest.raises(ElizaError):
            stream.restore_slot(garbage)
        with pytest.raises(ElizaError) as err:
            stream.next()  # still cancelled: a rejected file changes nothing
        assert err.value.code == ERR_CANCELLED


def test_slot_of_another_model_with_the_same_shapes_is_refused(
    lib: Library, ctx: Context, tmp_path: Path
) -> None:
    from eliza.app.services.bundle import tiny_vocab
    from eliza.formats.tiny_gguf import TinyModelSpec, write_tiny_bundle

    other = tmp_path / "other"
    write_tiny_bundle(other, tiny_vocab(), TinyModelSpec(seed=2))
    slot = tmp_path / "slot.bin"
    with lib.open_context(other) as other_ctx, other_ctx.open_stream(greedy_config(8)) as stream:
        stream.prefill(other_ctx.tokenize("hello there"))
        stream.save_slot(slot)
    with ctx.open_stream(greedy_config(8)) as stream:
        with pytest.raises(ElizaError) as err:
            stream.restore_slot(slot)
        assert "was written by another model" in err.value.message


def test_env_override_out_of_range_is_an_error(
    lib: Library, tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ELIZA_N_CTX", "5000000000")
    assert "is not a positive integer up to" in _create_error(lib, tiny_bundle)
