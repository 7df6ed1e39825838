"""The report rendered from evidence written the way verify writes it: in headless
Chromium, across merged directories, and against an edited matrix."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from eliza.adapters.browser import find_chromium, screenshot
from eliza.adapters.conan import llama_source_version
from eliza.adapters.git import GitState
from eliza.app.project import current, host_facts, load_project_matrix
from eliza.app.services.bench_options import default_settings_description
from eliza.app.services.clock import now
from eliza.app.services.inputs import input_hashes
from eliza.app.services.recording import host_info, to_record
from eliza.app.services.reporting import overview_window, render, report_screenshot
from eliza.core.evidence import Status
from eliza.core.fingerprint import fingerprint_for
from eliza.core.layout import REPO_ROOT
from eliza.core.outcome import CheckOutcome
from eliza.core.report import GridState
from eliza.core.report.model import PerfRow
from eliza.formats.matrix_yaml import parse_matrix
from eliza.formats.report_render import render_report
from tests.signing import write_signed

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
    write_signed(directory, record)


BROWSERS = "chromium, chromium-browser or google-chrome"


def _os_release() -> set[str]:
    """ID and ID_LIKE of /etc/os-release ("debian", "ubuntu", ...)."""
    try:
        text = Path("/etc/os-release").read_text(encoding="utf-8")
    except OSError:
        return set()
    return {
        word.lower()
        for _key, value in re.findall(r"^(ID|ID_LIKE)=(.*)$", text, flags=re.M)
        for word in value.strip("\"' ").split()
    }


def _can_install_as_root() -> bool:
    if os.geteuid() == 0:
        return True
    sudo = shutil.which("sudo")
    if sudo is None:
        return False
    return subprocess.run([sudo, "-n", "true"], capture_output=True, check=False).returncode == 0


def _a_package_provides_chromium() -> bool:
    """Whether apt can install the package ci/setup.sh asks for: it has a candidate, or apt
    has no package lists yet (setup.sh fetches them first) and this is not Ubuntu (Debian's
    archive has chromium; Ubuntu's is a snap)."""
    policy = subprocess.run(["apt-cache", "policy", "chromium"], capture_output=True, text=True, check=False)
    found = re.search(r"^\s*Candidate:\s*(\S+)", policy.stdout, flags=re.M)
    if found and found.group(1) != "(none)":
        return True
    lists = Path("/var/lib/apt/lists")
    if lists.is_dir() and any(lists.glob("*_Packages*")):
        return False
    return "ubuntu" not in _os_release()


def no_browser_expected() -> str | None:
    """Why ci/setup.sh installs no browser on this host (None: it installs chromium, so a
    host without one is a broken install). It installs one on Debian/Ubuntu, as root or
    with passwordless sudo, where a package provides it."""
    missing = f"no {BROWSERS} on PATH"
    system = platform.system()
    if system != "Linux":
        return f"{missing}: ci/setup.sh installs none on {system} (install Chromium or Google Chrome)"
    if shutil.which("apt-get") is None or shutil.which("apt-cache") is None:
        return f"{missing}: not Debian/Ubuntu (no apt-get), ci/setup.sh installs none (install Chromium)"
    if not _can_install_as_root():
        return f"{missing}: ci/setup.sh installs it only as root or with passwordless sudo (chromium)"
    if not _a_package_provides_chromium():
        return (
            f"{missing}, and no package provides chromium here (apt-cache policy chromium: no candidate; "
            "Ubuntu ships it only as a snap): install Google Chrome"
        )
    return None


def test_report_renders_in_chromium_with_escaped_script(tmp_path: Path) -> None:
    browser = find_chromium()  # the way the report finds it
    if browser is None:
        why = no_browser_expected()
        if why is not None:
            pytest.skip(why)
        pytest.fail(f"no {BROWSERS} on PATH, though ci/setup.sh installs chromium here: run bash ci/setup.sh")
    version = subprocess.run([browser, "--version"], capture_output=True, text=True, timeout=60, check=False)
    if version.returncode != 0 and "snap" in (version.stdout + version.stderr).lower():
        pytest.skip(f"{browser} is a snap stub that needs snapd (Ubuntu's chromium): install Google Chrome")
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


def test_the_screenshot_holds_the_whole_grid_and_the_perf_chart(tmp_path: Path) -> None:
    """report.png is the page's overview: no column is cut on the right, no row below, and
    the would-ship column and the chart are in it; a window too small would leave content
    running into its edge, which the trimmed image would then still touch."""
    if find_chromium() is None:
        pytest.skip(no_browser_expected() or f"no {BROWSERS} on PATH")
    from PIL import Image

    bundle = tmp_path / "bundle"
    write_evidence(
        tmp_path / "evidence", bundle,
        CheckOutcome(cell="linux-cpu.none", check="build", status=Status.PASSED, ran=1, passed=1,
                     started_at=now(), finished_at=now()),
    )  # fmt: skip
    paths, report = render(MATRIX, [tmp_path / "evidence"], tmp_path / "report", bundle)
    assert report.would_ship and len(report.columns) > 12
    rows = [
        PerfRow(cell=c.id, platform=c.platform.id, check="perf", metric=m, direction="higher", ratio=1.0,
                ci_low=0.97, ci_high=1.03, p_value=0.5, bound=0.05, threshold=0.95, verdict="verified",
                candidate=10.0, reference=10.0, rounds=9, against="baseline", ran_on="native",
                measured_at="2026-12-01T00:00:00Z", state=GridState.VERIFIED, anchor="a")
        for c in MATRIX.cells_of("linux-cpu") for m in ("decode_tok_s", "prefill_tok_s", "first_token_ms")
    ]  # fmt: skip
    report = replace(report, perf=tuple(rows))
    paths = render_report(report, tmp_path / "report")
    png = report_screenshot(paths.html, tmp_path / "report.png", report)
    assert png is not None
    window = overview_window(report)
    with Image.open(png) as image:
        width, height = image.size
    assert width < window[0] and height < window[1], ((width, height), window)
    assert width >= 1400 and height > 1200  # the grid's rows and the chart below them
