"""The report rendered from evidence written the way verify writes it: in headless
Chromium, across merged directories, and against an edited matrix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from eliza.adapters.browser import screenshot
from eliza.adapters.conan import llama_source_version
from eliza.adapters.git import GitState
from eliza.app.project import current, host_facts, load_project_matrix
from eliza.app.services.bench_options import default_settings_description
from eliza.app.services.clock import now
from eliza.app.services.inputs import input_hashes
from eliza.app.services.recording import host_info, to_record
from eliza.app.services.reporting import render
from eliza.core.evidence import Status
from eliza.core.fingerprint import fingerprint_for
from eliza.core.layout import REPO_ROOT
from eliza.core.outcome import CheckOutcome
from eliza.formats.evidence_json import write_record
from eliza.formats.matrix_yaml import parse_matrix

MATRIX = load_project_matrix()


def write_evidence(directory: Path, bundle: Path, outcome: CheckOutcome) -> None:
    """One record with the fingerprint render() computes for the current tree."""
    hashes = input_hashes(
        REPO_ROOT,
        bundle,
        bundle / "no-prompts.txt",
        host_facts(),
        llama_source=llama_source_version(current().env),
        bench_settings=default_settings_description(current().env),
    )
    cell, check = MATRIX.cell(outcome.cell), MATRIX.check(outcome.check)
    record = to_record(
        outcome,
        fingerprint_for(cell, check, hashes),
        GitState(commit="0" * 40, dirty=False),
        host_info(host_facts()),
        REPO_ROOT,
    )
    write_record(directory, record)


@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="chromium is not installed (ci/setup.sh installs it)"
)
def test_report_renders_in_chromium_with_escaped_script(tmp_path: Path) -> None:
    evil = "<script>alert('x')</script>"
    write_evidence(
        tmp_path / "evidence",
        tmp_path / "bundle",
        CheckOutcome(
            cell="linux-cpu.none",
            check="build",
            status=Status.FAILED,
            ran=2,
            passed=1,
            reason=evil,
            log_tail=evil,
            started_at=now(),
            finished_at=now(),
        ),
    )

    paths, report = render(MATRIX, [tmp_path / "evidence"], tmp_path / "report", tmp_path / "bundle")
    html = paths.html.read_text()
    assert evil not in html and "&lt;script&gt;" in html
    assert report.entry("linux-cpu.none", "build").state.value == "failed"
    png = screenshot(paths.html, tmp_path / "report.png")
    assert png is not None and png.stat().st_size > 20_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evidence_for_another_matrix_is_stale_and_merges_across_directories(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    gated = next(c.id for c in MATRIX.cells_of("linux-cpu") if c.gates)
    for directory, cell_id in (("job-a", "linux-cpu.none"), ("job-b", gated)):
        write_evidence(
            tmp_path / directory,
            bundle,
            CheckOutcome(
                cell=cell_id,
                check="build",
                status=Status.PASSED,
                ran=3,
                passed=3,
                started_at=now(),
                finished_at=now(),
            ),
        )

    _, merged = render(MATRIX, [tmp_path / "job-a", tmp_path / "job-b"], tmp_path / "r1", bundle)
    assert merged.entry("linux-cpu.none", "build").state.value == "verified"
    assert merged.entry(gated, "build").state.value == "verified"

    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["platforms"][0]["llama_options"]["cpu_isa"] = "x86-64-v2"
    edited = parse_matrix(yaml.safe_dump(data, sort_keys=False), str(REPO_ROOT / "matrix.yaml"))
    _, stale = render(edited, [tmp_path / "job-a", tmp_path / "job-b"], tmp_path / "r2", bundle)
    entry = stale.entry("linux-cpu.none", "build")
    assert entry.state.value == "stale" and "matrix" in entry.reason
