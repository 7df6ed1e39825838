"""The case tables of native/cases: the shipped ones parse, bad lines are named, the gate
table expands per cell, and the runner's output is read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from eliza.core.layout import REPO_ROOT
from eliza.formats.case_tables import (
    GATE_TABLE,
    SELECTOR_TABLE,
    CaseTableError,
    expand_gate_cases,
    parse_env,
    parse_gate_table,
    parse_runner_output,
    parse_selector_table,
    plan_text,
)
from eliza.formats.matrix_yaml import load_matrix

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
SELECTOR = parse_selector_table((REPO_ROOT / SELECTOR_TABLE).read_text(), "selector.cases")
GATES = parse_gate_table((REPO_ROOT / GATE_TABLE).read_text(), "gate-fallthrough.cases")


def test_shipped_selector_table() -> None:
    by_name = {c.name: c for c in SELECTOR}
    whitespace = by_name["whitespace-env-is-unset"]
    assert whitespace.env == "\t\n "
    assert by_name["unset-nothing-registered"].env is None and by_name["unset-nothing-registered"].fakes == ()
    fakes = by_name["unset-highest-rank-wins"].fakes
    assert [(f.name, f.available, f.can_serve, f.rank) for f in fakes][2] == (
        "unavailable-higher",
        False,
        True,
        500,
    )
    assert by_name["rank-negative-never-auto-selected"].fakes[0].rank == -1


def test_selector_judgement() -> None:
    by_name = {c.name: c for c in SELECTOR}
    chosen = by_name["unset-highest-rank-wins"]
    assert chosen.judge(1, "high", None, -2) == ""
    assert "want chosen high" in chosen.judge(1, "low", None, -2)
    error = by_name["env-names-unregistered-backend"]
    message = "'npu-rt' is not registered in this build (registered: xla-rt; ...)"
    assert error.judge(-2, None, message, -2) == ""
    assert error.judge(-2, None, "'npu-rt' is not registered in this build", -2) != ""
    assert by_name["unset-none-qualifies"].judge(0, None, None, -2) == ""
    assert by_name["unset-none-qualifies"].judge(0, None, "an error", -2) != ""


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("a | b | c", "1: 3 fields, want 5"),
        ("a | x/1/1 | - | /b | in-tree", "fake 'x/1/1' is not name/available/can_serve/rank"),
        ("a | - | npu | /b | in-tree", "env 'npu' must be - or a value in double quotes"),
        ("a | - | - | /b | maybe", "expect 'maybe'"),
        ("a | - | - | /b | in-tree\na | - | - | /b | in-tree", "case 'a' appears twice"),
    ],
)
def test_bad_selector_lines_are_named(line: str, message: str) -> None:
    with pytest.raises(CaseTableError, match=message) as err:
        parse_selector_table(line, "t.cases")
    assert str(err.value).startswith("t.cases")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("a | gguf | - | generates | sometimes", "expect 'sometimes'"),
        ("a | elsewhere | - | generates | generates", "bundle 'elsewhere'"),
        ("a | gguf | {factory} | generates | generates", "need {gate} in the case name"),
    ],
)
def test_bad_gate_lines_are_named(line: str, message: str) -> None:
    with pytest.raises(CaseTableError, match=message):
        parse_gate_table(line, "g.cases")


def test_gate_table_expands_per_gate_and_per_cell() -> None:
    none = expand_gate_cases(GATES, MATRIX.gates, MATRIX.cell("linux-arm64.none"))
    litert = expand_gate_cases(GATES, MATRIX.gates, MATRIX.cell("linux-arm64.litert"))
    per_gate = sum("{gate}" in t.name for t in GATES)
    assert len(none) == len(GATES) - per_gate + per_gate * len(MATRIX.gates)
    by_name = {c.name: c for c in litert}
    explicit = by_name["explicit-request-litert-fails-loudly"]
    assert explicit.env == "litert-lm" and explicit.kind == "open-error"
    assert explicit.texts == ("'litert-lm' is compiled in but unavailable on this host",)
    assert by_name["explicit-request-mlx-fails-loudly"].texts == (
        "'mlx-coreml' is not registered in this build",
    )
    assert by_name["corrupt-gguf-loads-only-when-the-llama-path-needs-it"].kind == "open-error"
    assert {c.name: c for c in none}[
        "corrupt-gguf-loads-only-when-the-llama-path-needs-it"
    ].kind == "create-error"
    assert by_name["env-llama.cpp-generates-as-the-no-gate-build"].env == "LLAMA.CPP"
    assert by_name["mlx-only-bundle-leaves-llama.cpp-without-a-model"].bundle == "only-mlx"


def test_plan_text_is_tab_separated_with_paths(tmp_path: Path) -> None:
    cases = expand_gate_cases(GATES, MATRIX.gates, MATRIX.cell("linux-arm64.litert"))
    bundles = {name: tmp_path / name for name in ("gguf", "corrupt-gguf", "only-litert", "only-mlx")}
    lines = plan_text(cases, bundles).splitlines()
    assert lines[0].startswith("#") and len(lines) == len(cases) + 1
    first = lines[1].split("\t")
    assert first == [cases[0].name, str(tmp_path / "gguf"), "-", "generates", ""]


def test_runner_output_is_read_back() -> None:
    out = "\n".join(
        [
            "llama_model_loader: some log line",
            "ok a",
            "FAIL b: the error lacks 'x'",
            "output a 0 1 2 3 | 6869",
            "output a 1 4 | 21",
            "summary 2 1",
        ]
    )
    report = parse_runner_output(out, "selector::")
    assert [(c.name, c.passed) for c in report.cases] == [("selector::a", True), ("selector::b", False)]
    assert report.cases[1].message == "the error lacks 'x'"
    assert report.outputs == {"a": ("1 2 3 | 6869", "4 | 21")}
    assert report.summary == (2, 1)
    assert parse_runner_output("ok a\n").summary is None  # it stopped before its summary


def test_env_escapes() -> None:
    assert parse_env('"a\\tb\\nc\\\\d\\"e"', "w") == 'a\tb\nc\\d"e'
    assert parse_env("-", "w") is None
