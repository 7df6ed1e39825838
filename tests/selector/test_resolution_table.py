"""The compiled selector against the resolution table of llm-backend.h, one row a case,
with fake factories whose available / can_serve / rank / name each test sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from eliza.adapters.ffi import ERR_INVALID_ARG
from tests.selector.kit import TestKit

IN_TREE = (0, None, None)  # nullptr and no error: the llama.cpp path


# --- one case per row of the table ----------------------------------------------------


@pytest.mark.parametrize("env", ["llama.cpp", "llamacpp"])
def test_row_env_llama_cpp_forces_in_tree_path(kit: TestKit, env: str) -> None:
    kit.register_fake("npu-rt", available=True, can_serve=True, rank=100)
    assert kit.select(env=env) == IN_TREE


def test_row_env_names_available_backend_that_can_serve(kit: TestKit) -> None:
    kit.register_fake("npu-rt", rank=100)
    kit.register_fake("xla-rt", rank=200)
    assert kit.select(env="npu-rt") == (1, "npu-rt", None)  # env beats rank


def test_row_env_names_registered_but_unavailable_backend(kit: TestKit) -> None:
    kit.register_fake("npu-rt", available=False)
    rc, chosen, error = kit.select(env="npu-rt")
    assert (rc, chosen) == (ERR_INVALID_ARG, None)
    assert error is not None
    assert "'npu-rt'" in error and "unavailable on this host" in error


def test_row_env_names_available_backend_without_its_artifact(kit: TestKit) -> None:
    kit.register_fake("npu-rt", can_serve=False)
    rc, chosen, error = kit.select("/bundles/gguf-only", env="npu-rt")
    assert (rc, chosen) == (ERR_INVALID_ARG, None)
    assert error is not None
    assert "'npu-rt'" in error and "'/bundles/gguf-only' lacks the artifact" in error


def test_row_env_names_unregistered_backend(kit: TestKit) -> None:
    kit.register_fake("xla-rt")
    rc, chosen, error = kit.select(env="npu-rt")
    assert (rc, chosen) == (ERR_INVALID_ARG, None)
    assert error is not None
    assert "'npu-rt' is not registered in this build" in error and "registered: xla-rt" in error


def test_row_unset_several_qualify_highest_rank_wins(kit: TestKit) -> None:
    kit.register_fake("low", rank=5)
    kit.register_fake("high", rank=50)
    kit.register_fake("unavailable-higher", available=False, rank=500)
    kit.register_fake("cannot-serve-higher", can_serve=False, rank=400)
    assert kit.select() == (1, "high", None)


def test_row_unset_none_qualifies_in_tree_path(kit: TestKit) -> None:
    kit.register_fake("a", available=False)
    kit.register_fake("b", can_serve=False)
    assert kit.select() == IN_TREE


def test_row_unset_nothing_registered_in_tree_path(kit: TestKit) -> None:
    assert kit.registered() == []
    assert kit.select() == IN_TREE


# --- edge cases -----------------------------------------------------------------------


@pytest.mark.parametrize("env", ["", " ", "\t\n "])
def test_empty_or_whitespace_env_counts_as_unset(kit: TestKit, env: str) -> None:
    kit.register_fake("a", rank=3)
    assert kit.select(env=env) == (1, "a", None)


@pytest.mark.parametrize("env", ["NPU-RT", "Npu-Rt", "  npu-rt  "])
def test_env_matches_case_insensitively_and_trimmed(kit: TestKit, env: str) -> None:
    kit.register_fake("npu-rt")
    assert kit.select(env=env) == (1, "npu-rt", None)


@pytest.mark.parametrize("env", ["LLAMA.CPP", "LlamaCpp", " llama.cpp "])
def test_llama_cpp_alias_case_variants(kit: TestKit, env: str) -> None:
    kit.register_fake("a", rank=99)
    assert kit.select(env=env) == IN_TREE


def test_rank_tie_goes_to_earliest_registered(kit: TestKit) -> None:
    kit.register_fake("first", rank=7)
    kit.register_fake("second", rank=7)
    assert kit.select() == (1, "first", None)


@pytest.mark.parametrize("rank", [0, -1])
def test_rank_not_above_llama_cpp_is_never_auto_selected(kit: TestKit, rank: int) -> None:
    kit.register_fake("meek", rank=rank)
    assert kit.select() == IN_TREE
    assert kit.select(env="meek") == (1, "meek", None)  # but an explicit request is honoured


def test_re_registration_is_idempotent_by_name(kit: TestKit) -> None:
    assert kit.register_fake("dup", available=True, rank=4) is True
    assert kit.register_fake("dup", available=False, rank=400) is False
    assert kit.register_fake("DUP", available=False) is False
    assert kit.registered() == ["dup"]
    assert kit.select(env="dup") == (1, "dup", None)  # the first factory stays


def test_unregistered_error_lists_none_when_empty(kit: TestKit) -> None:
    _, _, error = kit.select(env="ghost")
    assert error is not None and "(registered: none;" in error


def test_select_reads_the_real_environment(kit: TestKit, monkeypatch: pytest.MonkeyPatch) -> None:
    kit.register_fake("a", rank=1)
    kit.register_fake("b", rank=2)
    monkeypatch.setenv("ELIZA_LLM_BACKEND", "a")
    assert kit.select(use_env=True) == (1, "a", None)
    monkeypatch.setenv("ELIZA_LLM_BACKEND", "Llama.Cpp")
    assert kit.select(use_env=True) == IN_TREE
    monkeypatch.delenv("ELIZA_LLM_BACKEND")
    assert kit.select(use_env=True) == (1, "b", None)


# --- through _open of the test kit's own FFI ------------------------------------------


def test_open_dispatches_to_the_chosen_factory(
    kit: TestKit, tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ELIZA_LLM_BACKEND", raising=False)
    kit.register_fake("fake-open", rank=5)
    with kit.open_context(tiny_bundle) as ctx:
        before = kit.fake_opens("fake-open")
        with ctx.open_stream() as stream:
            stream.prefill([1, 2, 3])
            step = stream.next()
        assert kit.fake_opens("fake-open") == before + 1
        assert step.text == b"fake:fake-open" and step.status == 1

        monkeypatch.setenv("ELIZA_LLM_BACKEND", "llama.cpp")
        with ctx.open_stream() as stream:
            stream.prefill(ctx.tokenize("The price"))
            assert stream.next().text == b""  # real model: the first byte of the planted €
        assert kit.fake_opens("fake-open") == before + 1


def test_open_fails_loudly_on_a_hard_select_error(
    kit: TestKit, tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eliza.adapters.ffi import ElizaError

    kit.register_fake("sleepy", available=False)
    monkeypatch.setenv("ELIZA_LLM_BACKEND", "sleepy")
    with kit.open_context(tiny_bundle) as ctx, pytest.raises(ElizaError) as err:
        ctx.open_stream()
    assert "eliza_inference_llm_stream_open" in err.value.message
    assert "'sleepy' is compiled in but unavailable on this host" in err.value.message
