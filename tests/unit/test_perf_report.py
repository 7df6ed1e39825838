"""The report's perf part: a regression FAILS with its figures, a waiver turns it into
VERIFIED (waived: reason) and its expiry back; the perf tables and the chart in all three
formats; `--compare` lists a planted regression between two reports."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest

from eliza.core.evidence import Counts, EvidenceRecord, HostInfo, InputFingerprint, LoadedRecord, Status
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import Cell, Check, Matrix, PerfWaiver
from eliza.core.perf_stats import compare, judge
from eliza.core.report import (
    REPORT_SCHEMA_VERSION,
    GridState,
    HeaderFacts,
    PlatformCapability,
    Report,
    build_report,
)
from eliza.core.report.compare import ReportFormatError, compare_reports
from eliza.formats.matrix_yaml import load_matrix
from eliza.formats.perf_chart import chart_key
from eliza.formats.report_json import read_report, report_to_dict
from eliza.formats.report_render import PERF_CHART, render_report
from tests.signing import TEST_POLICY, library_subject, signed

FINGERPRINT = InputFingerprint.of({"native": "n1"})
CELL = "linux-cpu.none"
CAPS = {"linux-cpu": PlatformCapability(can_build=True, build_reason="", can_run=True, run_reason="")}


@pytest.fixture(scope="module")
def repo_matrix() -> Matrix:
    return load_matrix(REPO_ROOT / "matrix.yaml")


def perf_record(matrix: Matrix, decode_factor: float, *, status: Status) -> EvidenceRecord:
    """A perf record as the runner writes it: every metric of the rule judged on samples
    derived here, decode tok/s scaled by `decode_factor`."""
    reference = [3000.0, 3030.0, 2970.0, 3010.0, 2990.0, 3005.0, 2995.0]
    rows = []
    for rule in matrix.check("perf").metrics:
        factor = decode_factor if rule.metric == "decode_tok_s" else 1.0
        rows.append(judge(compare(rule.metric, [v * factor for v in reference], reference), rule).as_dict())
    verified = sum(1 for r in rows if r["verdict"] == "verified")
    return EvidenceRecord(
        cell=CELL,
        check="perf",
        status=status,
        reason="" if status is Status.PASSED else "decode_tok_s regressed",
        counts=Counts(
            ran=len(rows), passed=verified, failed=len(rows) - verified if status is Status.FAILED else 0
        ),
        fingerprint=FINGERPRINT,
        commit="c0ffee",
        dirty=False,
        host=HostInfo(os="linux", cpu="x86_64"),
        started_at="2026-12-01T10:00:00Z",
        finished_at="2026-12-01T10:00:30Z",
        duration_s=30.0,
        metrics={"decode_tok_s_ratio": decode_factor},
        details={
            "perf": {"metrics": rows, "reference": "commit 808e7c19fbed", "rounds": 7, "ran_on": "native"}
        },
        subjects=(library_subject(CELL),),
    )


def build_record(record: EvidenceRecord) -> EvidenceRecord:
    """The cell's VERIFIED build, naming the library the perf record ran against."""
    return replace(
        record,
        check="build",
        status=Status.PASSED,
        reason="",
        counts=Counts(ran=1, passed=1, failed=0),
        metrics={},
        details={},
    )


def report(matrix: Matrix, record: EvidenceRecord, day: str = "2026-12-01") -> Report:
    def current(cell: Cell, check: Check) -> InputFingerprint:
        return FINGERPRINT

    return build_report(
        matrix,
        records=[
            signed(LoadedRecord(path=Path(f"ev/{r.check}.json"), record=r, cell=r.cell, check=r.check))
            for r in (record, build_record(record))
        ],
        current_fingerprint=current,
        capabilities=CAPS,
        artifact_matches=lambda a: None,
        facts=HeaderFacts(commit="c0ffee", dirty=False, generated_at=f"{day}T12:00:00.000Z", host="here"),
        trust=TEST_POLICY,
    )


def waived(matrix: Matrix, expires: date) -> Matrix:
    w = PerfWaiver(
        cells="linux-cpu.*", metric="decode_tok_s", bound=0.3, reason="known cost", expires=expires
    )
    return replace(matrix, perf_waivers=(w,))


def test_a_regression_fails_and_its_rows_carry_ratio_interval_p_and_bound(repo_matrix: Matrix) -> None:
    rep = report(repo_matrix, perf_record(repo_matrix, 0.85, status=Status.FAILED))
    entry = rep.entry(CELL, "perf")
    assert entry.state is GridState.FAILED and "decode_tok_s" in entry.reason
    decode = next(r for r in rep.perf if r.metric == "decode_tok_s")
    assert decode.verdict == "failed" and decode.ci_high < decode.threshold == 0.95
    assert decode.against == "commit 808e7c19fbed" and decode.ran_on.startswith("native")


def test_a_waiver_verifies_the_regression_until_it_expires(repo_matrix: Matrix) -> None:
    record = perf_record(repo_matrix, 0.85, status=Status.FAILED)
    holding = report(waived(repo_matrix, date(2026, 12, 31)), record).entry(CELL, "perf")
    assert holding.state is GridState.VERIFIED and holding.qualifier == "waived"
    assert holding.reason.startswith("VERIFIED (waived: decode_tok_s: known cost")
    expired = report(waived(repo_matrix, date(2026, 12, 31)), record, day="2027-01-01").entry(CELL, "perf")
    assert expired.state is GridState.FAILED
    assert any("expired" in n for n in expired.notes)


def test_an_inconclusive_record_is_its_own_state_never_verified(repo_matrix: Matrix) -> None:
    record = replace(
        perf_record(repo_matrix, 1.0, status=Status.PASSED), status=Status.INCONCLUSIVE, reason="more rounds"
    )
    entry = report(repo_matrix, record).entry(CELL, "perf")
    assert entry.state is GridState.INCONCLUSIVE
    rep = report(repo_matrix, record)
    assert rep.entry(CELL, "build").state is GridState.VERIFIED
    assert rep.header.verified == 1  # the build alone: inconclusive never counts


def test_all_three_formats_show_the_perf_section_and_the_chart(repo_matrix: Matrix, tmp_path: Path) -> None:
    rep = report(repo_matrix, perf_record(repo_matrix, 0.85, status=Status.FAILED))
    paths = render_report(rep, tmp_path)
    html = paths.html.read_text()
    assert '<section id="perf">' in html and "<svg" in html and "decode_tok_s" in html
    markdown = paths.markdown.read_text()
    assert "## Performance" in markdown and f"]({PERF_CHART})" in markdown
    assert (tmp_path / PERF_CHART).read_bytes().startswith(b"\x89PNG")
    rows = json.loads(paths.json.read_text())["perf"]
    assert {r["metric"] for r in rows} == {r.metric for r in repo_matrix.check("perf").metrics}


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry for each chart report_render draws (render_chart counted)."""
    from eliza.formats import report_render

    counts: list[int] = []
    draw = report_render.render_chart

    def counted(rows: object) -> tuple[str, bytes]:
        counts.append(1)
        return draw(rows)  # type: ignore[arg-type]

    monkeypatch.setattr(report_render, "render_chart", counted)
    return counts


def test_an_unchanged_chart_is_not_drawn_again_and_a_changed_or_damaged_one_is(
    repo_matrix: Matrix, tmp_path: Path, drawn: list[int]
) -> None:
    slow = report(repo_matrix, perf_record(repo_matrix, 0.85, status=Status.FAILED))
    first = render_report(slow, tmp_path).html.read_text()
    png = (tmp_path / PERF_CHART).read_bytes()
    again = render_report(slow, tmp_path)
    assert len(drawn) == 1  # the same rows: the chart of last time
    assert again.html.read_text() == first and (tmp_path / PERF_CHART).read_bytes() == png
    assert f"]({PERF_CHART})" in again.markdown.read_text()
    render_report(report(repo_matrix, perf_record(repo_matrix, 1.0, status=Status.PASSED)), tmp_path)
    assert len(drawn) == 2  # other rows: drawn
    render_report(slow, tmp_path)
    assert len(drawn) == 3 and (tmp_path / PERF_CHART).read_bytes() == png
    (tmp_path / PERF_CHART).write_bytes(png[:100])  # a PNG that is not the one drawn: drawn again
    render_report(slow, tmp_path)
    assert len(drawn) == 4 and (tmp_path / PERF_CHART).read_bytes() == png


def test_a_report_written_elsewhere_takes_the_chart_drawn_from_the_same_rows(
    repo_matrix: Matrix, tmp_path: Path, drawn: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from eliza.formats import report_render

    charts = tmp_path / "charts"
    slow = report(repo_matrix, perf_record(repo_matrix, 0.85, status=Status.FAILED))
    first = render_report(slow, tmp_path / "one", charts=charts)
    png = (tmp_path / "one" / PERF_CHART).read_bytes()
    elsewhere = render_report(slow, tmp_path / "two", charts=charts)
    assert len(drawn) == 1  # the same rows in another folder: the chart drawn for the first
    assert elsewhere.html.read_text() == first.html.read_text()
    assert (tmp_path / "two" / PERF_CHART).read_bytes() == png
    other = report(repo_matrix, perf_record(repo_matrix, 1.0, status=Status.PASSED))
    render_report(other, tmp_path / "three", charts=charts)
    assert len(drawn) == 2  # other rows: drawn
    (charts / f"{chart_key(slow.perf)}.png").write_bytes(png[:100])  # damaged: drawn again
    render_report(slow, tmp_path / "four", charts=charts)
    assert len(drawn) == 3 and (tmp_path / "four" / PERF_CHART).read_bytes() == png
    monkeypatch.setattr(report_render, "CHARTS_KEPT", 1)
    newest = report(repo_matrix, perf_record(repo_matrix, 0.97, status=Status.PASSED))
    render_report(newest, tmp_path / "five", charts=charts)
    assert len(drawn) == 4
    assert sorted(p.name for p in charts.iterdir()) == sorted(
        f"{chart_key(newest.perf)}{suffix}" for suffix in (".json", ".png")
    )  # the newest chart kept, the older ones gone


def test_compare_lists_a_planted_regression_first(repo_matrix: Matrix, tmp_path: Path) -> None:
    old = report_to_dict(report(repo_matrix, perf_record(repo_matrix, 1.0, status=Status.PASSED)))
    new = report_to_dict(report(repo_matrix, perf_record(repo_matrix, 0.85, status=Status.FAILED)))
    since = compare_reports(old, new, old_source="old/report.json")
    assert [(c.cell, c.check, c.before, c.now) for c in since.regressions] == [
        (CELL, "perf", "verified", "failed")
    ]
    assert since.regressed
    decode = next(m for m in since.metrics if m.metric == "decode_tok_s")
    assert decode.significant and decode.now < decode.before
    assert not compare_reports(old, old, old_source="same").regressed
    back = compare_reports(new, old, old_source="new")
    assert [(c.cell, c.check) for c in back.newly_verified] == [(CELL, "perf")] and not back.regressions


def test_an_unknown_report_format_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"schema_version": REPORT_SCHEMA_VERSION + 1, "rows": []}))
    with pytest.raises(ReportFormatError, match=r"report\.json: field 'schema_version'"):
        read_report(path)
    path.write_text("{not json")
    with pytest.raises(ReportFormatError, match="not JSON"):
        read_report(path)
