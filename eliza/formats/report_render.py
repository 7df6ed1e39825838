"""Render a `Report` to HTML, Markdown (CI job summary) and JSON, written atomically.

Everything that comes from evidence (reasons, log tails, details) is untrusted text: the
HTML template is autoescaped, and the Markdown filters below escape what GitHub would
otherwise interpret as markup.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from eliza.core.report import GridState, Report
from eliza.formats.files import atomic_write_bytes, atomic_write_text
from eliza.formats.perf_chart import chart_key, drawn_before, memo_text, render_chart
from eliza.formats.report_json import report_to_dict

DEFAULT_TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "templates"
HTML_TEMPLATE = "report.html.j2"
MARKDOWN_TEMPLATE = "report.md.j2"
PERF_CHART = "report-perf.png"  # beside report.md, which shows it
PERF_CHART_MEMO = ".report-perf.json"  # the rows' key and the SVG the PNG was drawn with


@dataclass(frozen=True, kw_only=True)
class ReportPaths:
    html: Path
    markdown: Path
    json: Path


# --------------------------------------------------------------------------- filters

_MD_ESCAPED = re.compile(r"([\\`*_\[\]|#~])")


def md_text(value: object) -> str:
    """Plain text safe inside Markdown prose or a table cell: one line, no markup, no HTML."""
    text = " ".join(str(value).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_ESCAPED.sub(r"\\\1", text)


def md_code(value: object) -> str:
    """An inline code span that survives backticks in the value."""
    text = " ".join(str(value).split())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_block(value: object) -> str:
    """A fenced code block longer than any backtick run inside, so the text cannot close it."""
    text = str(value).rstrip("\n")
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def html_code_spans(value: object) -> Markup:
    """Escape, then show `backticked` parts as <code>; for the checklist's own wording."""
    escaped = str(escape(str(value)))
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped))


def short_sha(value: object, length: int = 12) -> str:
    return str(value)[:length]


def make_environment(templates_dir: Path | None = None) -> Environment:
    env = Environment(
        loader=FileSystemLoader(templates_dir or DEFAULT_TEMPLATES_DIR),
        undefined=StrictUndefined,
        # "html.j2" is listed because select_autoescape matches name suffixes: without it
        # report.html.j2 would render unescaped.
        autoescape=select_autoescape(
            enabled_extensions=("html", "html.j2", "j2.html"), default_for_string=True, default=False
        ),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["md_text"] = md_text
    env.filters["md_code"] = md_code
    env.filters["md_block"] = md_block
    env.filters["code_spans"] = html_code_spans
    env.filters["short_sha"] = short_sha
    env.globals["GridState"] = GridState
    return env


# --------------------------------------------------------------------------- rendering


def render_html(report: Report, env: Environment | None = None, *, perf_svg: str = "") -> str:
    """perf_svg: the perf chart (render_chart), inlined; matplotlib's own SVG, not evidence text."""
    template = (env or make_environment()).get_template(HTML_TEMPLATE)
    return template.render(report=report, perf_svg=Markup(perf_svg))


def render_markdown(report: Report, env: Environment | None = None, *, perf_png: str = "") -> str:
    """perf_png: the chart's file name beside the Markdown ("" : no chart)."""
    return (
        (env or make_environment()).get_template(MARKDOWN_TEMPLATE).render(report=report, perf_png=perf_png)
    )


def render_json(report: Report) -> str:
    return json.dumps(report_to_dict(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render_report(
    report: Report, out_dir: Path, templates_dir: Path | None = None, *, charts: Path | None = None
) -> ReportPaths:
    """Write report.html, report.md and report.json into `out_dir`.

    All three are rendered before any is written, so a template error leaves the previous
    report intact instead of a mix of old and new files. `charts`: a folder of perf charts
    drawn before, by their rows' key, which a report written elsewhere (a release's, a
    `--out` folder) takes its chart from instead of drawing it again.
    """
    env = make_environment(templates_dir)
    out = Path(out_dir)
    key = chart_key(report.perf) if report.perf else ""
    svg, png = _perf_chart(report, out, key, charts)
    html = render_html(report, env, perf_svg=svg)
    markdown = render_markdown(report, env, perf_png=PERF_CHART if svg else "")
    body = render_json(report)
    if png:
        atomic_write_bytes(out / PERF_CHART, png)
        atomic_write_text(out / PERF_CHART_MEMO, memo_text(key, svg, png))
    return ReportPaths(
        html=atomic_write_text(out / "report.html", html),
        markdown=atomic_write_text(out / "report.md", markdown),
        json=atomic_write_text(out / "report.json", body),
    )


# The charts a `charts` folder keeps: the newest ones (each verify's perf rows draw a new one).
CHARTS_KEPT = 8


def _perf_chart(report: Report, out: Path, key: str, charts: Path | None) -> tuple[str, bytes]:
    """(SVG, PNG to write into `out`) of the report's perf chart: b"" when `out` holds it
    already, ("", b"") when the report has no perf rows."""
    if not key:
        return render_chart(report.perf)
    drawn = drawn_before(out / PERF_CHART_MEMO, out / PERF_CHART, key)
    if drawn is not None:
        return drawn, b""
    if charts is not None:
        memo, png_file = charts / f"{key}.json", charts / f"{key}.png"
        shared = drawn_before(memo, png_file, key)
        if shared is not None:
            try:
                return shared, png_file.read_bytes()
            except OSError:
                pass  # gone since: drawn again below
    svg, png = render_chart(report.perf)
    if charts is not None and png:
        atomic_write_bytes(charts / f"{key}.png", png)
        atomic_write_text(charts / f"{key}.json", memo_text(key, svg, png))
        _prune(charts)
    return svg, png


def _prune(charts: Path) -> None:
    """Keeps the CHARTS_KEPT newest charts of the folder."""
    try:
        memos = sorted(charts.glob("*.json"), key=lambda m: m.stat().st_mtime, reverse=True)
    except OSError:
        return
    for memo in memos[CHARTS_KEPT:]:
        for stale in (memo, memo.with_suffix(".png")):
            stale.unlink(missing_ok=True)
