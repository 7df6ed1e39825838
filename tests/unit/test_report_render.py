"""Rendering: escaping of evidence text, a self-contained HTML page, Markdown tables, JSON."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from jinja2 import UndefinedError

from eliza.core.evidence import Counts, EvidenceRecord, HostInfo, InputFingerprint, LoadedRecord, Status
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import Cell, Check, CheckKind, DeviceGatedItem, Gate, Matrix, Platform, Requirement
from eliza.core.report import GridState, HeaderFacts, PlatformCapability, Report, build_report
from eliza.core.report.model import ShipView
from eliza.formats.matrix_yaml import load_matrix
from eliza.formats.report_json import report_to_dict
from eliza.formats.report_render import (
    HTML_TEMPLATE,
    MARKDOWN_TEMPLATE,
    make_environment,
    md_block,
    md_code,
    md_text,
    render_report,
)
from tests.signing import TEST_POLICY, library_subject, signed

XSS = "<script>alert(1)</script>"
CURRENT = {"native": "n1", "matrix": "m1"}
# The project's own exit checklist: the boxes are data of matrix.yaml.
EXIT_CHECKLIST = load_matrix(REPO_ROOT / "matrix.yaml").exit_checklist

LINUX = Platform(
    id="linux-cpu",
    description="Linux x86_64, CPU",
    os="linux",
    arch="x86_64",
    llama_backend="cpu",
    run_requires=(Requirement.X86_64_V3_CPU,),
    allowed_gates=("npu", "xla"),
)
ANDROID = Platform(
    id="android-arm64",
    description="Android arm64",
    os="android",
    arch="arm64",
    llama_backend="cpu",
    build_requires=(Requirement.ANDROID_NDK,),
    run_requires=(Requirement.ANDROID_DEVICE,),
)
NPU = Gate(
    id="npu",
    description="NPU runtime",
    cmake_option="ELIZA_ENABLE_NPU",
    conan_option="with_npu",
    factory="npu-rt",
    artifacts=("text/*.npumodel",),
)
XLA = Gate(
    id="xla",
    description="XLA runtime",
    cmake_option="ELIZA_ENABLE_XLA",
    conan_option="with_xla",
    factory="xla-rt",
    artifacts=("text/*.xlapkg",),
)
CHECKS = (
    Check(
        id="build",
        kind=CheckKind.BUILD,
        description="builds",
        pass_rule="links, exports only eliza_*",
        needs_run=False,
    ),
    Check(
        id="selector",
        kind=CheckKind.SELECTOR,
        description="selector table",
        pass_rule="all rows pass",
        needs_run=True,
    ),
    Check(
        id="abi",
        kind=CheckKind.ABI,
        description="ABI vs no-gate",
        pass_rule="no diff",
        needs_run=False,
        gated_cells_only=True,
    ),
)
MATRIX = Matrix(
    exit_checklist=EXIT_CHECKLIST,
    source="matrix.yaml",
    sha256="9" * 64,
    platforms=(LINUX, ANDROID),
    gates=(NPU, XLA),
    checks=CHECKS,
    cells=(
        Cell(platform=LINUX, gates=(), checks=CHECKS),
        Cell(platform=LINUX, gates=(NPU, XLA), checks=CHECKS),
        Cell(platform=ANDROID, gates=(), checks=CHECKS),
    ),
    device_gated=(
        DeviceGatedItem(
            id="pixel-bench",
            title="NPU on-device tok/s",
            needs="Pixel",
            milestone="M4",
            evidence="bench record from a Pixel",
            platforms=("android-arm64",),
        ),
    ),
)
CAPS = {
    "linux-cpu": PlatformCapability(can_build=True, build_reason="", can_run=True, run_reason=""),
    "android-arm64": PlatformCapability(
        can_build=False, build_reason="android-ndk not found", can_run=False, run_reason="no device"
    ),
}


def rec(cell: str, check: str, **kw: object) -> LoadedRecord:
    values: dict[str, object] = {
        "cell": cell,
        "check": check,
        "status": Status.PASSED,
        "counts": Counts(ran=4, passed=4, failed=0),
        "fingerprint": InputFingerprint.of(CURRENT),
        "commit": "abc123",
        "dirty": False,
        "host": HostInfo(os="linux", cpu="x86_64", tools={"cmake": "3.30"}),
        "started_at": "2026-01-31T12:00:00Z",
        "finished_at": "2026-01-31T12:00:04Z",
        "duration_s": 4.0,
        "metrics": {"tok_s": 812.5},
        "subjects": (library_subject(cell),),
    }
    values.update(kw)
    record = EvidenceRecord(**values)  # type: ignore[arg-type]
    return signed(LoadedRecord(path=Path(f"ev/{cell}__{check}.json"), record=record, cell=cell, check=check))


@pytest.fixture
def report() -> Report:
    records = [
        rec("linux-cpu.none", "build", details={"isa": "x86-64-v3", "llama_commit": "0c1e570"}),
        rec(
            "linux-cpu.none",
            "selector",
            status=Status.FAILED,
            counts=Counts(ran=4, passed=3, failed=1),
            reason=f"row 5 {XSS} | rank tie",
            log_tail=f"case 5 failed\n{XSS}\n",
        ),
        rec("linux-cpu.npu+xla", "build", fingerprint=InputFingerprint.of(dict(CURRENT, native="old"))),
        rec("linux-cpu.npu+xla", "abi", details={"abi_diff": f"- sym {XSS}\n+ sym2"}),
        LoadedRecord(path=Path("ev/junk__x.json"), problem=f"ev/junk__x.json: not valid JSON {XSS}"),
    ]
    return build_report(
        MATRIX,
        records=records,
        current_fingerprint=lambda cell, check: InputFingerprint.of(CURRENT),
        capabilities=CAPS,
        artifact_matches=lambda artifact: None,
        facts=HeaderFacts(commit="abc123", dirty=True, generated_at="2026-02-01T00:00:00Z", host="ci runner"),
        trust=TEST_POLICY,
    )


def test_render_writes_three_files_atomically(tmp_path: Path, report: Report) -> None:
    paths = render_report(report, tmp_path / "out")
    names = ["report.html", "report.md", "report.json"]
    assert [paths.html.name, paths.markdown.name, paths.json.name] == names
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.html", "report.json", "report.md"]


def test_html_escapes_evidence_text_and_is_self_contained(tmp_path: Path, report: Report) -> None:
    html = render_report(report, tmp_path).html.read_text(encoding="utf-8")
    assert (
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
    ) in html
    assert "<script" not in html.lower()
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    # reason (grid title, entry, checklist), log tail, ABI diff, load problem: all escaped
    assert html.count(escaped) >= 5
    assert f"case 5 failed\n{escaped}" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.IGNORECASE)
    assert "http://" not in html and "https://" not in html
    assert "<link" not in html and "@import" not in html and "url(" not in html


def test_html_grid_legend_and_anchors(tmp_path: Path, report: Report) -> None:
    html = render_report(report, tmp_path).html.read_text(encoding="utf-8")
    grid = html[html.index('<table class="grid">') : html.index("</table>")]
    assert grid.count("<tr>") == 4  # header + three cells
    assert 'class="state st-verified"' in grid and 'class="state st-failed"' in grid
    assert 'class="state st-stale"' in grid and 'class="state st-not-buildable-here"' in grid
    assert 'class="state st-device-gated"' in grid and 'class="state st-na"' in grid
    for state in GridState:
        assert f'<span class="chip {state.css}">{state.label}</span>' in html  # legend
    # every link into the page has a target, checklist links included
    ids = set(re.findall(r'id="([^"]+)"', html))
    hrefs = set(re.findall(r'href="#([^"]+)"', html))
    assert hrefs and hrefs <= ids
    assert "ev-linux-cpu.none--build" in hrefs
    assert "0c1e570" in html and "x86-64-v3" in html  # build facts
    assert "812.5" in html  # metrics
    assert "inputs changed since this evidence: native" in html
    assert "android-ndk not found" in html
    assert "not claimed" in html and "NPU on-device tok/s" in html
    assert '<span class="badge dirty">dirty</span>' in html


def test_markdown_grid_checklist_and_tables(tmp_path: Path, report: Report) -> None:
    md = render_report(report, tmp_path).markdown.read_text(encoding="utf-8")
    lines = md.splitlines()
    assert "| cell | `build` | `selector` | `abi` |" in lines
    assert "|---|---|---|---|" in lines
    assert "| `linux-cpu.none` | verified | FAILED | n/a |" in lines
    assert "| `linux-cpu.npu+xla` | stale | not run | verified |" in lines
    assert "| `android-arm64.none` | no build here | device-gated | n/a |" in lines
    assert "**2 of 7 checks verified**" in md
    boxes = [line for line in lines if line.startswith("- [")]
    # the only box whose evidence is all VERIFIED is the ABI one
    # box 4 also needs the consumer check, which this matrix does not declare
    assert [b[:6] for b in boxes] == ["- [ ] ", "- [ ] ", "- [ ] ", "- [ ] "]
    assert any("missing: linux-cpu.none · selector: FAILED" in line for line in lines)
    assert (
        "| NPU on-device tok/s | Pixel | M4 | bench record from a Pixel | android-arm64 | not claimed |"
    ) in lines
    # evidence text cannot break the table or inject HTML
    assert "<script>" not in md
    [attention] = [line for line in lines if line.startswith("| `linux-cpu.none` | `selector` |")]
    assert "&lt;script&gt;" in attention and r"\| rank tie" in attention
    assert len(re.findall(r"(?<!\\)\|", attention)) == 5
    assert "- `ev/junk__x.json`: not valid JSON &lt;script&gt;" in md


def test_markdown_all_ticked_when_evidence_is_complete(tmp_path: Path) -> None:
    records = [rec(c, k) for c in ("linux-cpu.none", "linux-cpu.npu+xla") for k in ("build", "selector")]
    records.append(rec("linux-cpu.npu+xla", "abi"))
    records.append(rec("linux-cpu.npu+xla", "consumer"))
    records.append(rec("linux-cpu.none", "consumer"))
    checks = (
        *CHECKS,
        Check(
            id="consumer",
            kind=CheckKind.CONSUMER,
            description="the consumers drive the C ABI",
            pass_rule="every step passes",
            needs_run=True,
        ),
        Check(
            id="byte-identity-reference",
            kind=CheckKind.BYTE_IDENTITY_REFERENCE,
            description="ffi vs llama.h",
            pass_rule="identical",
            needs_run=True,
        ),
        Check(
            id="byte-identity-baseline",
            kind=CheckKind.BYTE_IDENTITY_BASELINE,
            description="vs baseline",
            pass_rule="identical",
            needs_run=True,
        ),
        Check(
            id="gate-fallthrough",
            kind=CheckKind.GATE_FALLTHROUGH,
            description="falls through",
            pass_rule="llama.cpp serves",
            needs_run=True,
            gated_cells_only=True,
        ),
    )
    matrix = Matrix(
        exit_checklist=EXIT_CHECKLIST,
        source="m.yaml",
        sha256="1" * 64,
        platforms=(LINUX,),
        gates=(NPU, XLA),
        checks=checks,
        cells=(
            Cell(platform=LINUX, gates=(), checks=checks),
            Cell(platform=LINUX, gates=(NPU, XLA), checks=checks),
        ),
    )
    records += [
        rec("linux-cpu.none", "byte-identity-reference"),
        rec("linux-cpu.none", "byte-identity-baseline"),
        rec("linux-cpu.npu+xla", "gate-fallthrough"),
    ]
    full = build_report(
        matrix,
        records=records,
        current_fingerprint={
            (c.id, k.id): InputFingerprint.of(CURRENT) for c in matrix.cells for k in checks
        },
        capabilities=CAPS,
        artifact_matches=lambda artifact: True,
        facts=HeaderFacts(commit="abc", dirty=False, generated_at="2026-02-01T00:00:00Z", host="h"),
        trust=TEST_POLICY,
    )
    md = render_report(full, tmp_path).markdown.read_text(encoding="utf-8")
    boxes = [line for line in md.splitlines() if line.startswith("- [")]
    assert len(boxes) == 4 and all(b.startswith("- [x] ") for b in boxes)
    assert "missing:" not in md
    assert "## Device-gated" in md and "The matrix declares no device-gated items." in md


def test_json_round_trips_with_states(tmp_path: Path, report: Report) -> None:
    data = json.loads(render_report(report, tmp_path).json.read_text(encoding="utf-8"))
    assert data == json.loads(json.dumps(report_to_dict(report)))
    assert data["schema_version"] == 1
    states = {(e["cell"], e["check"]): e["state"] for row in data["rows"] for e in row["entries"]}
    assert states == {
        ("linux-cpu.none", "build"): "verified",
        ("linux-cpu.none", "selector"): "failed",
        ("linux-cpu.none", "abi"): "n/a",
        ("linux-cpu.npu+xla", "build"): "stale",
        ("linux-cpu.npu+xla", "selector"): "not-run",
        ("linux-cpu.npu+xla", "abi"): "verified",
        ("android-arm64.none", "build"): "not-buildable-here",
        ("android-arm64.none", "selector"): "device-gated",
        ("android-arm64.none", "abi"): "n/a",
    }
    assert data["header"]["dirty"] is True
    selector = next(e for row in data["rows"] for e in row["entries"] if e["check"] == "selector")
    assert selector["evidence"]["log_tail"] == f"case 5 failed\n{XSS}\n"  # JSON keeps the raw text
    assert data["problems"] == [{"path": "ev/junk__x.json", "message": f"not valid JSON {XSS}"}]


def test_broken_template_fails_loudly_and_writes_nothing(tmp_path: Path, report: Report) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / HTML_TEMPLATE).write_text("{{ report.header.no_such_field }}", encoding="utf-8")
    (templates / MARKDOWN_TEMPLATE).write_text("ok", encoding="utf-8")
    with pytest.raises(UndefinedError):
        render_report(report, tmp_path / "out", templates_dir=templates)
    assert not (tmp_path / "out").exists()


def test_html_templates_are_autoescaped_and_markdown_is_not() -> None:
    env = make_environment()
    autoescape = env.autoescape
    assert callable(autoescape)
    assert autoescape(HTML_TEMPLATE) is True
    assert autoescape("x.j2.html") is True
    assert autoescape(MARKDOWN_TEMPLATE) is False


def test_markdown_filters() -> None:
    assert md_text("a|b <i>*x*</i>\nnext") == r"a\|b &lt;i&gt;\*x\*&lt;/i&gt; next"
    assert md_code("plain") == "`plain`"
    assert md_code("has ` tick") == "``has ` tick``"
    assert md_code("`edge") == "`` `edge ``"
    block = md_block("text\n```\nmore")
    assert block.startswith("````text\n") and block.endswith("\n````")


def test_the_grid_ends_with_what_a_release_would_ship(tmp_path: Path, report: Report) -> None:
    views = (
        ShipView(cell="linux-cpu.none", verdict="refused", line="linux-cpu.none: refused: selector: FAILED",
                 reasons=("selector: FAILED",)),
        ShipView(cell="linux-cpu.npu+xla", verdict="ship", line="linux-cpu.npu+xla: ships (3 VERIFIED)"),
        ShipView(cell="android-arm64.none", verdict="not here", line="android-arm64.none: not here: no NDK",
                 reasons=("no NDK",)),
    )  # fmt: skip
    paths = render_report(replace(report, would_ship=views), tmp_path)
    html = paths.html.read_text(encoding="utf-8")
    grid = html[html.index('<table class="grid">') : html.index("</table>")]
    assert ">would ship</th>" in grid
    assert 'class="state ship-refused" title="linux-cpu.none: refused: selector: FAILED"' in grid
    assert 'class="state ship-ship"' in grid and 'class="state ship-not-here"' in grid
    assert html.count("<li>selector: FAILED</li>") == 1  # the refusing entry, below the grid
    lines = paths.markdown.read_text(encoding="utf-8").splitlines()
    assert "| cell | `build` | `selector` | `abi` | would ship |" in lines
    assert "| `linux-cpu.none` | verified | FAILED | n/a | refused |" in lines
    assert "| `android-arm64.none` | no build here | device-gated | n/a | not here |" in lines
    assert "- linux-cpu.none: refused: selector: FAILED" in lines
    body = json.loads(paths.json.read_text(encoding="utf-8"))
    assert [v["verdict"] for v in body["would_ship"]] == ["refused", "ship", "not here"]
