"""The perf chart: for each metric, every cell's ratio candidate / reference with its 95 %
interval, a line at 1 and the metric's bound; SVG for the HTML report, PNG beside the
Markdown. matplotlib with the Agg backend (no display)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eliza.core.report.model import PerfRow

COLOURS = {"verified": "#1a7f37", "failed": "#cf222e", "inconclusive": "#8250df"}


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, imported when a chart is drawn (it takes a
    second to import), its font search kept quiet."""
    # Quiet before the import: importing matplotlib logs its paths and platform at DEBUG,
    # and its font search does too.
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def _figure(plt: Any, rows: Sequence[PerfRow]) -> Any:
    metrics = list(dict.fromkeys(r.metric for r in rows))
    cells = list(dict.fromkeys(r.cell for r in rows))
    height = 0.9 + 0.32 * len(cells)
    fig, axes = plt.subplots(
        1, len(metrics), figsize=(3.2 * len(metrics), height), sharey=True, squeeze=False
    )
    for ax, metric in zip(axes[0], metrics, strict=True):
        mine = [r for r in rows if r.metric == metric]
        for r in mine:
            y = cells.index(r.cell)
            colour = COLOURS.get(r.verdict, "#57606a")
            ax.errorbar(
                r.ratio,
                y,
                xerr=[[r.ratio - r.ci_low], [r.ci_high - r.ratio]],
                fmt="o",
                color=colour,
                capsize=3,
                markersize=4,
            )
        ax.axvline(1.0, color="#24292f", linewidth=0.8)
        thresholds = sorted({r.threshold for r in mine})
        for t in thresholds:
            ax.axvline(t, color="#cf222e", linewidth=0.8, linestyle="--")
        better = "higher" if mine and mine[0].direction == "higher" else "lower"
        ax.set_title(f"{metric}\n({better} is better)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("candidate / reference", fontsize=7)
        ax.grid(axis="x", linewidth=0.3)
    axes[0][0].set_yticks(range(len(cells)), cells)
    axes[0][0].invert_yaxis()
    fig.tight_layout()
    return fig


def render_chart(rows: Sequence[PerfRow]) -> tuple[str, bytes]:
    """(SVG text, PNG bytes) of the chart; ("", b"") without rows."""
    if not rows:
        return "", b""
    plt = _pyplot()
    fig = _figure(plt, rows)
    svg, png = io.StringIO(), io.BytesIO()
    fig.savefig(svg, format="svg", metadata={"Date": None})
    fig.savefig(png, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    text = svg.getvalue()
    return text[text.index("<svg") :], png.getvalue()


def chart_key(rows: Sequence[PerfRow]) -> str:
    """What the chart is drawn from: its rows and the matplotlib that draws them."""
    try:
        version = importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    return hashlib.sha256(f"{version}\n{rows!r}".encode()).hexdigest()


def drawn_before(memo: Path, png: Path, key: str) -> str | None:
    """The SVG of the chart drawn last time into this report folder, when it was drawn from
    the same rows (`memo` holds its key and SVG, `png` is its PNG, both still whole); None
    otherwise. matplotlib takes a second to import and draw an unchanged chart again."""
    try:
        data = json.loads(memo.read_text(encoding="utf-8"))
        same = data["key"] == key and data["png_sha256"] == hashlib.sha256(png.read_bytes()).hexdigest()
        return str(data["svg"]) if same else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def memo_text(key: str, svg: str, png: bytes) -> str:
    """What drawn_before reads back."""
    return json.dumps({"key": key, "png_sha256": hashlib.sha256(png).hexdigest(), "svg": svg}) + "\n"
