"""The perf chart: for each metric, every cell's ratio candidate / reference with its 95 %
interval (a diamond without one for the simulated CPU's exact counts), a line at 1 and the
metric's bound, one row of panels per instrument (wrapped at MAX_COLUMNS); SVG for the
HTML report, PNG beside the Markdown. matplotlib with the Agg backend (no display)."""

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


# The chart's rows of panels, top to bottom: the instrument that decides first.
_INSTRUMENT_ORDER = ("simulated CPU", "wall time", "memory")


# At most this many panels side by side: more wrap onto the next row, so a panel keeps
# its size however many metrics an instrument has.
MAX_COLUMNS = 4


def _figure(plt: Any, rows: Sequence[PerfRow]) -> Any:
    """One row of panels per instrument (the simulated CPU's exact ratios above the wall
    time ones, then memory; an instrument of more than MAX_COLUMNS metrics on several rows),
    one panel per metric, every cell on the same axis."""
    instruments = sorted(
        dict.fromkeys(r.instrument for r in rows),
        key=lambda i: _INSTRUMENT_ORDER.index(i) if i in _INSTRUMENT_ORDER else len(_INSTRUMENT_ORDER),
    )
    by_instrument = {i: list(dict.fromkeys(r.metric for r in rows if r.instrument == i)) for i in instruments}
    lines = [
        (instrument, metrics[at : at + MAX_COLUMNS])
        for instrument, metrics in by_instrument.items()
        for at in range(0, len(metrics), MAX_COLUMNS)
    ]
    cells = list(dict.fromkeys(r.cell for r in rows))
    columns = max(len(m) for _, m in lines)
    # Sized to be read at its own size (the screenshot shows it so): 9-10 pt text, a panel
    # about 4 inches wide, a cell's row a third of an inch.
    height = 1.2 + 0.36 * len(cells)
    fig, axes = plt.subplots(
        len(lines),
        columns,
        figsize=(4.2 * columns + 1.2, height * len(lines) + 0.4),
        sharey=True,
        squeeze=False,
    )
    for line, (instrument, metrics) in enumerate(lines):
        for column in range(len(metrics), columns):
            axes[line][column].set_visible(False)
        for ax, metric in zip(axes[line], metrics, strict=False):
            mine = [r for r in rows if r.metric == metric and r.instrument == instrument]
            for r in mine:
                y = cells.index(r.cell)
                colour = COLOURS.get(r.verdict, "#57606a")
                ax.errorbar(
                    r.ratio,
                    y,
                    xerr=[[r.ratio - r.ci_low], [r.ci_high - r.ratio]],
                    fmt="D" if r.exact else "o",
                    color=colour,
                    capsize=3,
                    markersize=5,
                )
            ax.axvline(1.0, color="#24292f", linewidth=0.8)
            for t in sorted({r.threshold for r in mine}):
                ax.axvline(t, color="#cf222e", linewidth=0.8, linestyle="--")
            better = "higher" if mine and mine[0].direction == "higher" else "lower"
            ax.set_title(f"{instrument}: {metric}\n({better} is better)", fontsize=10)
            ax.tick_params(labelsize=9)
            ax.set_xlabel("candidate / reference", fontsize=9)
            ax.grid(axis="x", linewidth=0.3)
        axes[line][0].set_yticks(range(len(cells)), cells)
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
    """What the chart is drawn from: its rows, the matplotlib that draws them and this
    module, which lays it out (a chart drawn by an older layout is drawn again)."""
    try:
        version = importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    layout = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return hashlib.sha256(f"{version}\n{layout}\n{rows!r}".encode()).hexdigest()


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
