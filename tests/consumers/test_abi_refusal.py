"""A library that reports another ABI version is refused, with one clear message, by every
loader: both consumers, case_runner (both modes) and e2e_loop_bench. The stand-in library
exports every function of the header, but all except eliza_inference_abi_version abort:
a loader that called anything before checking the version would die of SIGABRT."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from eliza.core.layout import REPO_ROOT
from tests.consumers.helpers import EXIT_ABI_MISMATCH, PROMPTS, run_consumer

STUB_SOURCE = r"""
#include <cstdlib>
#include "eliza-inference-ffi.h"

extern "C" {
const char * eliza_inference_abi_version(void) { return "8"; }
void eliza_inference_free_string(char *) { std::abort(); }
EliInferenceContext * eliza_inference_create(const char *, char **) { std::abort(); }
void eliza_inference_destroy(EliInferenceContext *) { std::abort(); }
int eliza_inference_tokenize_supported(void) { std::abort(); }
int eliza_inference_tokenize(EliInferenceContext *, const char *, size_t, int, int, int **, size_t *,
                             char **) { std::abort(); }
int eliza_inference_detokenize(EliInferenceContext *, const int32_t *, size_t, int, int, char **, size_t *,
                               char **) { std::abort(); }
void eliza_inference_free_tokens(int *) { std::abort(); }
int eliza_inference_llm_stream_supported(void) { std::abort(); }
EliLlmStream * eliza_inference_llm_stream_open(EliInferenceContext *, const eliza_llm_stream_config_t *,
                                               char **) { std::abort(); }
int eliza_inference_llm_stream_prefill(EliLlmStream *, const int32_t *, size_t, char **) { std::abort(); }
int eliza_inference_llm_stream_next(EliLlmStream *, int32_t *, size_t, size_t *, char *, size_t, int32_t *,
                                    int32_t *, char **) { std::abort(); }
int eliza_inference_llm_stream_cancel(EliLlmStream *) { std::abort(); }
int eliza_inference_llm_stream_reset(EliLlmStream *) { std::abort(); }
int eliza_inference_llm_stream_reset_keep(EliLlmStream *, int32_t) { std::abort(); }
int eliza_inference_llm_stream_save_slot(EliLlmStream *, const char *, char **) { std::abort(); }
int eliza_inference_llm_stream_restore_slot(EliLlmStream *, const char *, char **) { std::abort(); }
void eliza_inference_llm_stream_close(EliLlmStream *) { std::abort(); }
int eliza_testkit_select(const char *, const char *, int, char **, char **) { std::abort(); }
void eliza_testkit_clear_registry(void) { std::abort(); }
int eliza_testkit_register_fake(const char *, int, int, int) { std::abort(); }
}
"""

MISMATCH = 'reports ABI version "8"'


@pytest.fixture(scope="module")
def abi8_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared library exporting the whole ABI (and the test kit's selector entry points)
    whose eliza_inference_abi_version returns "8"."""
    d = tmp_path_factory.mktemp("abi8")
    (d / "stub.cpp").write_text(STUB_SOURCE)
    lib = d / "libelizainference.so"
    subprocess.run(
        ["g++", "-std=c++17", "-shared", "-fPIC", "-I", str(REPO_ROOT / "native" / "include"),
         str(d / "stub.cpp"), "-o", str(lib)],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return lib


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line of explanation, got: {stderr!r}"
    return lines[0]


def test_a_consumer_refuses_another_abi(
    consumer_command: list[str], abi8_library: Path, tiny_bundle: Path, tmp_path: Path
) -> None:
    run = run_consumer(consumer_command, abi8_library, tiny_bundle, tmp_path / "result.json")
    assert run.returncode == EXIT_ABI_MISMATCH, run.describe()
    line = one_line(run.stderr)
    assert MISMATCH in line and "written for ABI 9" in line and str(abi8_library) in line, line
    assert run.result is not None and run.result["passed"] is False
    assert run.result["exit_status"] == EXIT_ABI_MISMATCH
    assert run.result["abi"] == {"expected": "9", "library": "8"}
    steps = run.steps()
    assert steps["load"]["ok"] is True
    assert steps["abi_version"]["ok"] is False and MISMATCH in steps["abi_version"]["detail"]
    assert list(steps) == ["load", "abi_version"], "nothing may run after the refusal"


def test_case_runner_refuses_another_abi_in_both_modes(
    abi8_library: Path, library_path: Path, tmp_path: Path
) -> None:
    case_runner = library_path.parent / "case_runner"
    plan = tmp_path / "plan.tsv"
    plan.write_text("# empty plan\n")
    runs = {
        "fallthrough": [str(case_runner), "fallthrough", "--library", str(abi8_library), "--plan", str(plan),
                        "--prompts", str(PROMPTS), "--max-tokens", "4"],
        "selector": [str(case_runner), "selector", "--kit", str(abi8_library), "--cases",
                     str(REPO_ROOT / "native" / "cases" / "selector.cases")],
    }  # fmt: skip
    for mode, argv in runs.items():
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 3, (mode, done.returncode, done.stderr)
        line = one_line(done.stderr)
        assert line.startswith("case_runner: ") and MISMATCH in line and "built for ABI 9" in line, (
            mode,
            line,
        )
        assert "summary" not in done.stdout, mode


def test_e2e_loop_bench_refuses_another_abi(
    abi8_library: Path, library_path: Path, tiny_bundle: Path, tmp_path: Path
) -> None:
    out = tmp_path / "bench.jsonl"
    done = subprocess.run(
        [str(library_path.parent / "e2e_loop_bench"), "--library", str(abi8_library),
         "--bundle", str(tiny_bundle), "--prompts", str(PROMPTS), "--max-tokens", "4", "--repeats", "1",
         "--out", str(out)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    assert line.startswith("e2e_loop_bench: ") and MISMATCH in line and "built for ABI 9" in line, line
    assert not out.exists()


def test_the_good_library_is_accepted_by_case_runner(library_path: Path, tmp_path: Path) -> None:
    # The refusal above is the version check, not a case_runner that refuses everything.
    plan = tmp_path / "plan.tsv"
    plan.write_text("# empty plan\n")
    done = subprocess.run(
        [str(library_path.parent / "case_runner"), "fallthrough", "--library", str(library_path),
         "--plan", str(plan), "--prompts", str(PROMPTS)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.stderr == "" and done.stdout.strip() == "summary 0 0", done
