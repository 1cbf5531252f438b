"""Draw the benchmark plots of docs/benchmarks.md: ``python -m tests.bench.plots [--from DIR]``.

The newest result of every kind, among docs/bench/data and `--from` (test-artifacts/bench after
`make bench`), is copied to docs/bench/data (older copies of that kind are removed), and every
plot is drawn from those copies into docs/bench/<name>.svg. So the SVGs can always be re-drawn
from committed data, and the same data gives byte-identical SVGs: a fixed hash salt, no date in
the metadata, text as paths (the DejaVu font matplotlib ships). matplotlib is a test extra only;
it never enters the product's import path. What is drawn is decided in tests/bench/plot_data.py.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from tests.bench import plot_data as d

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "bench"
MAX_LABELLED_BARS = 10
LOG_TICKS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
REF_STYLE: dict[str, dict[str, Any]] = {
    "budget": {"color": "tab:red", "linestyle": "-", "linewidth": 1.5},
    "target": {"color": "tab:orange", "linestyle": "--", "linewidth": 1.2},
    "guide": {"color": "0.45", "linestyle": ":", "linewidth": 1.0},
}


# ------------------------------------------------------------------ panels
def draw_refs(ax: Axes, refs: Sequence[d.Ref], *, vertical: bool) -> None:
    """Budget lines across the panel, or over one category's slot only."""
    for ref in refs:
        style = REF_STYLE[ref.style]
        span = (0.0, 1.0) if ref.category is None else (ref.category - 0.45, ref.category + 0.45)
        if ref.category is None:
            line = ax.axvline if vertical else ax.axhline
            line(ref.value, *span, label=ref.label, **style)
        else:
            segment = ax.vlines if vertical else ax.hlines
            segment(ref.value, *span, label=ref.label, **style)


def headroom(panel: d.Bars) -> float:
    """The value axis's end: room above the bars and budgets for the legend."""
    values = [v for s in panel.series for v in s.values] + [r.value for r in panel.refs]
    return 1.45 * max(values)


def draw_bars(ax: Axes, panel: d.Bars) -> None:
    width = 0.8 / len(panel.series)
    # numbers on the bars only while they fit side by side
    labelled = len(panel.series) * len(panel.categories) <= MAX_LABELLED_BARS
    for i, series in enumerate(panel.series):
        where = [c - 0.4 + width * (i + 0.5) for c in range(len(panel.categories))]
        draw = ax.barh if panel.horizontal else ax.bar
        bars = draw(where, series.values, width, label=series.name or None)
        if labelled:
            ax.bar_label(bars, fmt="%.3g", fontsize=7, padding=2)
    (ax.set_xlim if panel.horizontal else ax.set_ylim)(0, headroom(panel))
    ticks = ax.set_yticks if panel.horizontal else ax.set_xticks
    ticks(range(len(panel.categories)), panel.categories)
    (ax.set_xlabel if panel.horizontal else ax.set_ylabel)(panel.axis)
    if panel.horizontal:
        ax.invert_yaxis()  # the first category on top, as in the table
    draw_refs(ax, panel.refs, vertical=panel.horizontal)


def log_axis(ax: Axes, values: Sequence[float]) -> None:
    """A log scale labelled in plain seconds (1, 2, 5, 10 ...) rather than powers of ten."""
    low, high = 0.7 * min(values), 2.5 * max(values)  # the legend goes above the top budget
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    ticks = [t for t in LOG_TICKS if low <= t <= high]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.yaxis.set_minor_formatter(NullFormatter())


def draw_strip(ax: Axes, panel: d.Strip) -> None:
    for i, column in enumerate(panel.columns):
        count = len(column.values)
        # spread the points of a column a little so that equal values stay visible
        xs = [i + (0.3 * (k / (count - 1) - 0.5) if count > 1 else 0) for k in range(count)]
        ax.plot(xs, column.values, "o", markersize=4, label=f"{column.name} ({count} runs)")
    ax.set_xticks(range(len(panel.columns)), [c.name for c in panel.columns])
    ax.set_xlim(-0.6, len(panel.columns) - 0.4)
    ax.set_ylabel(panel.axis)
    if panel.log:
        log_axis(ax, [v for c in panel.columns for v in c.values] + [r.value for r in panel.refs])
    else:
        ax.set_ylim(bottom=0)
    draw_refs(ax, panel.refs, vertical=False)


def draw_curves(ax: Axes, panel: d.Curves) -> None:
    for curve in panel.curves:
        style = {"color": "black", "linewidth": 2.0} if curve.emphasis else {"linewidth": 1.2}
        if panel.step:
            ax.step(curve.xs, curve.ys, where="post", label=curve.name, **style)
        else:
            ax.plot(curve.xs, curve.ys, label=curve.name, **style)
    ax.set_xlabel(panel.x_axis)
    ax.set_ylabel(panel.y_axis)
    ax.set_xlim(left=0)  # from the start: a curve sampled late shows its gap
    ax.set_ylim(bottom=0)
    draw_refs(ax, panel.x_refs, vertical=True)
    draw_refs(ax, panel.y_refs, vertical=False)


def draw_panel(ax: Axes, panel: d.Panel) -> None:
    legend: dict[str, Any] = {"loc": "best"}
    match panel:
        case d.Bars(horizontal=True):
            draw_bars(ax, panel)
            legend = {"loc": "upper right"}  # into the headroom right of the bars
        case d.Bars():
            draw_bars(ax, panel)
            legend = {"loc": "upper left", "ncols": 2}  # into the headroom above the bars
        case d.Strip():
            draw_strip(ax, panel)
        case d.Curves():
            draw_curves(ax, panel)
    ax.set_title(panel.title, fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, **legend)


# ------------------------------------------------------------------ figures and files
@contextmanager
def deterministic_style() -> Iterator[None]:
    with mpl.rc_context(
        {
            "svg.hashsalt": "local-ccm-bench",  # SVG ids are hashes: a fixed salt keeps them stable
            "svg.fonttype": "path",
            "font.size": 9,
            "axes.grid": True,
            "grid.alpha": 0.3,
        }
    ):
        yield


def draw(plot: d.Plot, path: Path) -> None:
    columns = min(3, len(plot.panels))
    rows = math.ceil(len(plot.panels) / columns)
    with deterministic_style():
        # one panel alone gets the room of one and a half, for the two-line title
        fig = Figure(figsize=(max(6.6, 4.4 * columns), 3.6 * rows), layout="constrained")
        axes = fig.subplots(rows, columns, squeeze=False).flatten()
        for ax, panel in zip(axes, plot.panels, strict=False):
            draw_panel(ax, panel)
        for ax in axes[len(plot.panels) :]:
            ax.remove()
        fig.suptitle(f"{plot.title}\n{plot.source} · {plot.provenance}", fontsize=10)
        fig.savefig(path, format="svg", metadata={"Date": None})


def gather(data: Path, sources: Sequence[Path]) -> dict[str, d.ResultFile]:
    """Copy the newest result of each kind into `data`; drop older copies of the same kind."""
    files = {
        p.name: p for src in [data, *sources] if src.is_dir() for p in sorted(src.glob("*.json"))
    }
    newest = {k: f for k, f in d.newest_by_kind(files).items() if k in d.PLOTTED_KINDS}
    data.mkdir(parents=True, exist_ok=True)
    for kind, chosen in newest.items():
        if files[chosen.name].parent != data:
            shutil.copyfile(files[chosen.name], data / chosen.name)
        for old in data.glob(f"{kind}-*.json"):
            parsed = d.parse_name(old.name)
            if parsed and parsed.kind == kind and parsed.name != chosen.name:
                old.unlink()
    return newest


def draw_all(out: Path, sources: Sequence[Path]) -> int:
    """Draw every plot that has data; the number of plots that could not be drawn."""
    data = out / "data"
    newest = gather(data, sources)
    present, missing = d.plan(newest)
    for spec in missing:
        print(f"bench plots: no {spec.kind}-*.json yet, {spec.name}.svg not drawn")
    failed = 0
    for spec in present:
        source = newest[spec.kind].name
        try:
            plot = d.build_plot(spec, source, json.loads((data / source).read_text()))
        except (KeyError, TypeError, ValueError) as error:  # a result of another format
            print(f"bench plots: {spec.name}.svg not drawn, {source}: {error!r}", file=sys.stderr)
            failed += 1
            continue
        draw(plot, out / f"{spec.name}.svg")
        print(f"bench plots: {out / spec.name}.svg from {source}")
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--from", dest="sources", type=Path, action="append", default=[],
        help="also take newer results from this directory (repeatable)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=OUT, help="where the SVGs and data/ go")
    args = parser.parse_args(argv)
    return 1 if draw_all(args.out, args.sources) else 0


if __name__ == "__main__":
    sys.exit(main())
