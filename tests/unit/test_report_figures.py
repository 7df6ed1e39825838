"""Item figures of the report: the native-suite's sanitizer and race counts, and the last
fuzz run's executions, corpus size and findings per target."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from eliza.app.services.inputs import fuzz_inputs
from eliza.app.services.reporting import with_fuzz_figures
from eliza.core.layout import REPO_ROOT
from eliza.formats.fuzz_json import FuzzSummaryError, read_fuzz_summary
from tests.unit.test_report_model import loaded, record, report_of


def test_race_and_sanitizer_counts_are_figures() -> None:
    rec = record("linux-cpu.none", "build")
    rec = replace(rec, metrics={"race.cancel_vs_next.iterations": 1000, "sanitizer_reports": 0, "ran": 3})
    names = {f.name: f.value for f in report_of(loaded(rec)).figures}
    assert names == {"race.cancel_vs_next.iterations": "1000", "sanitizer_reports": "0"}


def _summary(tmp_path: Path, inputs: str) -> Path:
    path = tmp_path / "summary.json"
    path.write_text(
        json.dumps(
            {
                "cell": "linux-cpu.none@asan-ubsan",
                "finished_at": "2026-11-30T18:00:00.000Z",
                "inputs": inputs,
                "seconds_per_target": 60,
                "sanitizers": ["address", "undefined"],
                "targets": {
                    "tokenize": {
                        "executions": 480000,
                        "seconds": 61.2,
                        "corpus_files": 7,
                        "findings": [],
                        "exit_status": 0,
                        "leak_check": "done",
                    },
                    # written before summaries recorded the leak check
                    "bundle": {
                        "executions": 900,
                        "seconds": 60.5,
                        "corpus_files": 4,
                        "findings": ["crash-ab"],
                        "exit_status": 1,
                    },
                },
            }
        ),
        encoding="utf-8",
    )
    return path


def test_fuzz_figures_per_target_and_their_freshness(tmp_path: Path) -> None:
    empty = report_of()
    fresh = with_fuzz_figures(empty, _summary(tmp_path, fuzz_inputs(REPO_ROOT)), REPO_ROOT)
    got = {(f.cell, f.check, f.name): (f.value, f.fresh) for f in fresh.figures}
    assert got == {
        ("linux-cpu.none@asan-ubsan", "fuzz", "fuzz.bundle.executions"): ("900 in 60 s", True),
        ("linux-cpu.none@asan-ubsan", "fuzz", "fuzz.bundle.corpus_files"): ("4", True),
        ("linux-cpu.none@asan-ubsan", "fuzz", "fuzz.bundle.findings"): ("crash-ab", True),
        ("linux-cpu.none@asan-ubsan", "fuzz", "fuzz.bundle.leak_check"): ("not recorded", True),
        ("linux-cpu.none@asan-ubsan", "fuzz", "fuzz.tokenize.executions"): ("480000 in 61 s", True),
        ("linux-cpu.none@asan-ubsan", "fuzz", "fuzz.tokenize.corpus_files"): ("7", True),
        ("linux-cpu.none@asan-ubsan", "fuzz", "fuzz.tokenize.findings"): ("0", True),
        ("linux-cpu.none@asan-ubsan", "fuzz", "fuzz.tokenize.leak_check"): ("done", True),
    }
    stale = with_fuzz_figures(empty, _summary(tmp_path, "other sources"), REPO_ROOT)
    assert not any(f.fresh for f in stale.figures)
    assert with_fuzz_figures(empty, tmp_path / "none.json", REPO_ROOT) == empty


@pytest.mark.parametrize("text", ["{", "[]", '{"cell": 1}', "\u0000", '{"targets": {"a": null}}'])
def test_a_broken_fuzz_summary_is_a_load_problem(tmp_path: Path, text: str) -> None:
    path = tmp_path / "summary.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(FuzzSummaryError, match="not a fuzz summary"):
        read_fuzz_summary(path)
    report = with_fuzz_figures(report_of(), path, REPO_ROOT)
    assert [p.path for p in report.problems] == [str(path)]
    assert report.figures == report_of().figures
