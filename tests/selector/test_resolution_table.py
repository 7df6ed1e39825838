"""The compiled selector against the resolution table of llm-backend.h, one row a case,
with fake factories whose available / can_serve / rank / name each test sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from eliza.adapters.ffi import ERR_INVALID_ARG
from eliza.core.layout import REPO_ROOT
from eliza.formats.case_tables import SELECTOR_TABLE, SelectorCase, parse_selector_table
from tests.selector.kit import TestKit

IN_TREE = (0, None, None)  # nullptr and no error: the llama.cpp path

# --- the case table: every row of the resolution table and its edge cases ----------------
# native/cases/selector.cases, which case_runner also runs on targets the host cannot load.

CASES = parse_selector_table((REPO_ROOT / SELECTOR_TABLE).read_text(encoding="utf-8"), str(SELECTOR_TABLE))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_selector_case_table(kit: TestKit, case: SelectorCase) -> None:
    for fake in case.fakes:
        kit.register_fake(fake.name, available=fake.available, can_serve=fake.can_serve, rank=fake.rank)
    rc, chosen, error = kit.select(case.bundle, env=case.env)
    assert case.judge(rc, chosen, error, ERR_INVALID_ARG) == ""


def test_case_table_covers_the_table_rows() -> None:
    """Each outcome of the resolution table has cases: in-tree, chosen, and errors."""
    expects = {c.expect.split(" ", 1)[0] for c in CASES}
    assert expects == {"in-tree", "chosen", "error"}
    assert len(CASES) >= 20


# --- registration, the real environment and _open: beyond what a table row can say ----


def test_re_registration_is_idempotent_by_name(kit: TestKit) -> None:
    assert kit.register_fake("dup", available=True, rank=4) is True
    assert kit.register_fake("dup", available=False, rank=400) is False
    assert kit.register_fake("DUP", available=False) is False
    assert kit.registered() == ["dup"]
    assert kit.select(env="dup") == (1, "dup", None)  # the first factory stays


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
        assert (step.tokens, step.text, step.status) == ([4], b"fake-open:[4]", 0)  # last id + 1

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
