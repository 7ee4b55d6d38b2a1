"""The figure of `commsim compare`: step time per remedy, and by GPU count over a grid.

One scenario size: horizontal bars of the mean step time per remedy (the baseline first and
marked), each with its p95 as a tick and its speedup written at the bar's end. Several node
counts (``--nodes``): one line per remedy of the samples-per-second speedup over the baseline
against the GPU count. Numbers come from :func:`commsim.mitigations.compare.compare` rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Sequence

from commsim.output.plots.common import COLORS, PlotError, figure, gpu_axis, require_matplotlib, save_figure, seconds_unit


def plot_compare(rows: Sequence[dict], out_dir, title: str) -> List[Path]:
    """Write compare.png and compare.svg into `out_dir`; return their paths."""
    require_matplotlib(str(out_dir))
    if not rows:
        raise PlotError(str(out_dir), "nothing to plot: no rows")
    sizes = sorted({r["world_size"] for r in rows})
    if len(sizes) == 1:
        fig = _bars(rows, title)
    else:
        fig = _by_gpus(rows, sizes, title)
    return save_figure(fig, Path(out_dir), "compare")


def _bars(rows, title):
    labels = [r["mitigation"] for r in rows]
    means = [r["step_time_s"]["mean"] for r in rows]
    p95 = [r["step_time_s"]["p95"] for r in rows]
    scale, unit = seconds_unit(means + p95)
    fig = figure(8, 0.45 * len(rows) + 1.6)
    ax = fig.subplots()
    y = list(range(len(rows)))[::-1]
    colors = [COLORS["baseline"] if lab == "baseline" else COLORS["compute"] for lab in labels]
    ax.barh(y, [m * scale for m in means], color=colors, height=0.6, label="mean step time")
    ax.scatter([p * scale for p in p95], y, marker="|", s=200, color=COLORS["straggler"], zorder=3, label="p95")
    top = max(p95 + means) * scale
    for yi, r, m in zip(y, rows, means):
        ax.text(max(m * scale, r["step_time_s"]["p95"] * scale) + 0.01 * top, yi, f"{r['speedup']:.2f}x",
                va="center", fontsize=8)
    ax.set_yticks(y, labels)
    ax.set_xlim(0, top * 1.15)
    ax.set_xlabel(f"step time ({unit}); label: throughput speedup over the baseline")
    ax.set_title(f"{title}: {rows[0]['world_size']:,} GPUs, step time per remedy")
    ax.legend(loc="lower right", fontsize=8)
    return fig


def _by_gpus(rows, sizes, title):
    fig = figure(8, 4.5)
    ax = fig.subplots()
    names = list(dict.fromkeys(r["mitigation"] for r in rows))
    for name in names:
        pts = sorted((r["world_size"], r["speedup"]) for r in rows if r["mitigation"] == name)
        style = {"color": COLORS["baseline"], "linestyle": "--"} if name == "baseline" else {}
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name, **style)
    gpu_axis(ax, sizes)
    ax.set_ylabel("throughput speedup over the baseline")
    ax.set_title(f"{title}: what each remedy buys, by GPU count")
    ax.legend(fontsize=8, loc="best")
    return fig
