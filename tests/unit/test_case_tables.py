"""The case tables of native/cases: the shipped ones parse, bad lines are named, a seam
step is judged, the gate table expands per cell, and the runner's output is read back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eliza.core.layout import REPO_ROOT
from eliza.formats.case_tables import (
    ERROR_NAMES,
    GATE_TABLE,
    SEAM_TABLE,
    SELECTOR_TABLE,
    SESSION_WORDS,
    CaseTableError,
    StepResult,
    expand_gate_cases,
    parse_env,
    parse_gate_table,
    parse_runner_output,
    parse_seam_table,
    parse_selector_table,
    plan_text,
)
from eliza.formats.matrix_yaml import load_matrix

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
SELECTOR = parse_selector_table((REPO_ROOT / SELECTOR_TABLE).read_text(), "selector.cases")
GATES = parse_gate_table((REPO_ROOT / GATE_TABLE).read_text(), "gate-fallthrough.cases")
SEAM = parse_seam_table((REPO_ROOT / SEAM_TABLE).read_text(), "seam.cases")
# The binding's table as the judge receives it (the codes are the header's; see below).
NAMES = {
    0: "ELIZA_OK",
    -1: "ELIZA_ERR_NOT_IMPLEMENTED",
    -2: "ELIZA_ERR_INVALID_ARG",
    -7: "ELIZA_ERR_CANCELLED",
}


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


def test_shipped_seam_table() -> None:
    by_name = {c.name: c for c in SEAM}
    case = by_name["reset_keep-backend-error-falls-back-to-a-full-reset"]
    assert case.env == "seam" and case.session == "keep=fail"
    assert [(f.name, f.rank) for f in case.fakes] == [("seam", 10)]
    keep = case.steps[2]
    assert (keep.call, keep.args, keep.status) == ("reset_keep", (2,), 0)
    drafter = by_name["next-passes-the-drafter-stats"].steps[1]
    assert (drafter.tokens, drafter.text, drafter.drafted, drafter.accepted) == (
        (2, 3, 4),
        "seam:[2][3][4]",
        4,
        2,
    )
    prefill = by_name["prefill-error-names-the-call-and-the-backend"].steps[0]
    assert prefill.args == (1, -2) and prefill.status == "INVALID_ARG"
    assert prefill.texts == (
        "eliza_inference_llm_stream_prefill: backend 'seam': fake session: token -2 is outside",
    )
    assert by_name["next-on-an-auto-selected-backend"].env is None


def test_seam_error_names_are_the_headers() -> None:
    header = (REPO_ROOT / "native" / "include" / "eliza-inference-ffi.h").read_text()
    assert set(ERROR_NAMES) == set(re.findall(r"#define ELIZA_ERR_(\w+)\s", header))


def test_seam_session_words_are_the_kits() -> None:
    """The kit parses the session column itself; both must know the same words."""
    kit = (REPO_ROOT / "native" / "testkit" / "testkit.cpp").read_text()
    for key, values in SESSION_WORDS.items():
        assert f'key == "{key}"' in kit, key
        for value in values:
            assert f'value == "{value}"' in kit, (key, value)


def test_seam_judgement() -> None:
    by_name = {c.name: c for c in SEAM}
    steps = by_name["next-steps-until-max-tokens"].steps
    first = steps[1]  # next -> 0 tokens 4 text seam:[4]
    assert first.judge(StepResult(rc=0, tokens=(4,), text="seam:[4]"), NAMES) == ""
    assert "got tokens 5" in first.judge(StepResult(rc=0, tokens=(5,), text="seam:[5]"), NAMES)
    assert first.judge(StepResult(rc=0, tokens=(4,), text="low:[4]"), NAMES) != ""
    assert first.judge(StepResult(rc=0, tokens=(4,), text="seam:[4]", drafted=1, accepted=1), NAMES) != ""
    assert "got 1" in first.judge(StepResult(rc=1, tokens=(4,), text="seam:[4]"), NAMES)
    said = "a success says nothing"
    assert first.judge(StepResult(rc=0, tokens=(4,), text="seam:[4]", message=said), NAMES) != ""
    assert steps[-1].judge(StepResult(rc=1), NAMES) == ""  # no tokens expected after the final step
    assert steps[-1].judge(StepResult(rc=1, tokens=(8,)), NAMES) != ""

    error = by_name["next-error-names-the-call-and-the-backend"].steps[0]
    message = (
        "eliza_inference_llm_stream_next: backend 'seam': fake session: nothing to continue: prefill first"
    )
    assert error.judge(StepResult(rc=-2, message=message), NAMES) == ""
    assert "lacks 'prefill first'" in error.judge(StepResult(rc=-2, message=message[:60]), NAMES)
    assert "carries no message" in error.judge(StepResult(rc=-2), NAMES)
    assert "got CANCELLED" in error.judge(StepResult(rc=-7, message=message), NAMES)
    assert error.judge(StepResult(rc=0), NAMES) != ""

    fallback = by_name["reset_keep-count-above-n_keep-falls-back-to-a-full-reset"].steps
    assert fallback[1].judge(StepResult(rc=0), NAMES) == ""
    assert fallback[1].judge(StepResult(rc=2), NAMES) == "want reset_keep -> 0; got 2"
    assert fallback[2].judge(StepResult(held=()), NAMES) == ""
    assert "the fake holds 1" in fallback[2].judge(StepResult(held=(1,)), NAMES)
    assert "no fake session open" in fallback[2].judge(StepResult(held=None), NAMES)

    close = by_name["close-right-after-open"].steps[0]
    assert close.judge(StepResult(closed=True), NAMES) == ""
    assert "outlived the close" in close.judge(StepResult(closed=False), NAMES)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("a | s/1/1/1 | - | - | prefill 1", "step 'prefill 1': not 'call -> expect'"),
        ("a | s/1/1/1 | - | - | rewind -> 0", "unknown call 'rewind'"),
        ("a | s/1/1/1 | - | - | reset_keep -> 0", "reset_keep takes 1 integer argument"),
        ("a | s/1/1/1 | - | - | prefill x -> 0", "prefill takes ids"),
        ("a | s/1/1/1 | - | - | reset -> BROKEN", "expect a count >= 0 or one of NOT_IMPLEMENTED"),
        ("a | s/1/1/1 | - | - | reset -> INVALID_ARG a text", "reset has no message to hold texts"),
        ("a | s/1/1/1 | - | - | prefill 1 -> 0 tokens 2", "'tokens' after the status; only next takes"),
        ("a | s/1/1/1 | - | - | next -> 0 drafted", "text, drafted and accepted one word each"),
        ("a | s/1/1/1 | - | - | held -> 1 x", "held -> ids >= 0, or none"),
        ("a | s/1/1/1 | - | - | close -> gone", "close -> closed"),
        ("a | s/1/1/1 | - | keep=sometimes | reset -> 0", "session word 'keep=sometimes'"),
        ("a | s/1/1/1 | - | draft=1:2 | reset -> 0", "session word 'draft=1:2'"),
        ("a | - | - | - | reset -> 0", "needs a fake to serve its stream"),
        ("a | s/1/1 | - | - | reset -> 0", "fake 's/1/1' is not name/available/can_serve/rank"),
        ("a | s/1/1/1 | - | - | reset -> 0\na | s/1/1/1 | - | - | reset -> 0", "case 'a' appears twice"),
    ],
)
def test_bad_seam_lines_are_named(line: str, message: str) -> None:
    with pytest.raises(CaseTableError, match=re.escape(message)) as err:
        parse_seam_table(line, "s.cases")
    assert str(err.value).startswith("s.cases:")


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
