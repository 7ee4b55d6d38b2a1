"""Figures of a sweep's table: the stacked step time (by GPU count or by a swept key), the
scaling efficiency with its knee, and the straggler-sensitivity heatmap.

Each ``build_*`` returns the figure (tests inspect its legends, titles and limits); each
``plot_*`` builds and writes it. The numbers come from :mod:`commsim.analysis.sweep_table`.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import List, Sequence

import numpy as np

from commsim.analysis.sweep_table import (MAX_PANELS, Breakdown, SweepTable, breakdown_by_gpus, breakdown_by_key,
                                          key_value_label, scaling_panels, short_key, slowdown_grids)

from commsim.output.plots.common import (COLORS, FuncFormatter, PercentFormatter, bar_limits, figure, gpu_axis,
                                         panel_grid, save_figure, seconds_unit, share_value_axis)

PANEL_WIDTH, PANEL_HEIGHT = 5.2, 4.2
LEGEND_NAMES = ("ideal (compute only)", "compute", "exposed communication", "straggler cost")


def _stacked_bars(ax, data: Breakdown, scale: float) -> None:
    x = np.arange(len(data.labels))
    ax.bar(x, data.compute * scale, color=COLORS["compute"], label="compute")
    ax.bar(x, data.exposed_comm * scale, bottom=data.compute * scale, color=COLORS["comm"],
           label="exposed communication")
    ax.bar(x, data.straggler * scale, bottom=(data.compute + data.exposed_comm) * scale, color=COLORS["straggler"],
           label="straggler cost")
    ax.plot(x, data.compute * scale, color=COLORS["ideal"], linestyle="--", marker="_", markersize=14,
            label="ideal (compute only)")
    ax.set_xticks(x, data.labels)
    if len(data.labels) > 6 or max((len(s) for s in data.labels), default=0) > 8:
        ax.tick_params(axis="x", labelrotation=45)
    ax.grid(axis="y", alpha=0.3)


def _bar_panels(fig, panels: Sequence[Breakdown], titles: Sequence[str], xlabel: str) -> bool:
    """Stacked bars in panels, one legend for the figure below them: four columns on a
    figure of 9 inches or more, else two (a legend wider than the figure is clipped). The panels share one value
    axis unless their heights differ too much (:func:`share_value_axis`); each axis starts
    at 0 unless the compute floor would squeeze the rest (:func:`bar_limits`), and then says
    so. Returns whether the axis is shared."""
    shared = share_value_axis([float(p.top.max()) for p in panels])
    axes = panel_grid(fig, len(panels), sharey=shared)
    # one unit for a shared axis; a panel on its own scale gets its own (310 ms, not 0.31 s)
    scale, unit = seconds_unit(np.concatenate([p.top for p in panels]))
    everything = Breakdown((), np.concatenate([p.compute for p in panels]), np.concatenate([p.exposed_comm for p in panels]),
                           np.concatenate([p.straggler for p in panels]))
    ncols = min(3, len(panels))
    for i, (ax, data, title) in enumerate(zip(axes, panels, titles)):
        if not shared:
            scale, unit = seconds_unit(data.top)
        _stacked_bars(ax, data, scale)
        ref = everything if shared else data
        low, high, zoomed = bar_limits(float(ref.compute.min()), float(ref.top.max()))
        ax.set_ylim(low * scale, high * scale)
        ax.set_xlabel(xlabel)
        if not shared or i % ncols == 0:
            ax.set_ylabel(f"step time ({unit})" + (f"; axis from {low * scale:g}" if zoomed else ""))
        if title:
            ax.set_title(title, fontsize="medium")
    handles, names = axes[0].get_legend_handles_labels()
    # a part that is zero everywhere (no straggler cost in a straggler-free sweep) is not named
    absent = {"straggler cost": not everything.straggler.any(), "exposed communication": not everything.exposed_comm.any()}
    order = [names.index(n) for n in LEGEND_NAMES if not absent.get(n, False)]
    width = fig.get_figwidth()
    fig.legend([handles[i] for i in order], [names[i] for i in order], loc="outside lower center",
               ncols=4 if width >= 9 else 2, fontsize="small")
    return shared


def _scale_note(shared: bool, panels: int) -> str:
    return "" if shared or panels < 2 else " (each panel on its own scale)"


def _size(count: int) -> tuple:
    ncols = min(3, count)
    # at least 7 inches wide: room for the suptitle and a two-column legend
    return max(7.0, PANEL_WIDTH * ncols + 0.6), PANEL_HEIGHT * math.ceil(count / ncols) + 0.5


def build_step_breakdown(table: SweepTable):
    """Stacked step time (compute / exposed comm / straggler cost) vs GPU count, ideal line;
    one panel per combination of the other swept values."""
    others = table.other_keys()
    groups = table.groups(others)[:MAX_PANELS]
    fig = figure(*_size(len(groups)))
    shared = _bar_panels(fig, [breakdown_by_gpus(rows) for _, rows in groups],
                         [key_value_label(others, combo) if others else "" for combo, _ in groups], "GPUs (world size)")
    fig.suptitle("Step time by GPU count: where it goes" + _scale_note(shared, len(groups))
                 + table.truncation_note(others))
    return fig


def plot_step_breakdown(table: SweepTable, out_dir: Path) -> List[Path]:
    return save_figure(build_step_breakdown(table), out_dir, "step_time_breakdown")


def breakdown_stem(key: str) -> str:
    return f"step_time_by_{key.replace('.', '_').replace('[', '_').replace(']', '')}"


def build_breakdown_by_key(table: SweepTable, key: str):
    """Stacked step time over the values of one swept key (GPU count fixed), in numeric order;
    one panel per combination of the other swept values."""
    others = table.other_keys(exclude=(key,))
    groups = table.groups(others)[:MAX_PANELS]
    fig = figure(*_size(len(groups)))
    shared = _bar_panels(fig, [breakdown_by_key(table, key, rows) for _, rows in groups],
                         [key_value_label(others, combo) if others else "" for combo, _ in groups], key)
    gpus = table.gpu_counts()
    fig.suptitle(f"Step time by {key} ({gpus[0]:,} GPUs)" + _scale_note(shared, len(groups))
                 + table.truncation_note(others))
    return fig


def plot_breakdown_by_key(table: SweepTable, key: str, out_dir: Path) -> List[Path]:
    return save_figure(build_breakdown_by_key(table, key), out_dir, breakdown_stem(key))


def build_scaling_efficiency(table: SweepTable, threshold: float = 0.85):
    """Scaling efficiency vs GPU count, one line per other swept value (see
    :func:`commsim.analysis.sweep_table.scaling_panels`), the knee circled and named in the legend."""
    panels = scaling_panels(table, threshold)
    lines_per_panel = max(len(p.lines) for p in panels)
    ncols = min(3, len(panels))
    fig = figure(max(7.6, 5.4 * ncols), (4.6 + 0.22 * lines_per_panel) * math.ceil(len(panels) / ncols))
    axes = panel_grid(fig, len(panels), ncols)
    lowest = min(e for p in panels for line in p.lines for e in line.efficiency)
    for i, (ax, panel) in enumerate(zip(axes, panels)):
        markers = itertools.cycle("osD^v<>ph")
        for line in panel.lines:
            name = line.label or "efficiency"
            (drawn,) = ax.plot(line.gpus, line.efficiency, marker=next(markers),
                               label=f"{name}: {line.knee_text(threshold)}")
            if line.knee:
                # The knee: a ring around the first point below the threshold; its text is in the
                # legend, where the labels of several lines cannot overlap.
                ax.plot([line.knee], [line.efficiency[line.gpus.index(line.knee)]], marker="o", markersize=15,
                        markerfacecolor="none", color=drawn.get_color(), markeredgewidth=1.8, linestyle="none")
        # Named in the legend, not written on the plot, where a point could sit under the text.
        ax.axhline(threshold, color="#888888", linestyle="--", linewidth=1, label=f"{threshold:.0%} threshold")
        gpu_axis(ax, table.gpu_counts())
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(max(0.0, min(lowest, threshold) - 0.08), 1.02)
        if i % ncols == 0:  # the panels of a row share the y axis
            ax.set_ylabel("scaling efficiency (compute / step time)")
        ax.grid(alpha=0.3)
        if panel.title:
            ax.set_title(panel.title, fontsize="medium")
        legend_title = ", ".join(short_key(k) for k in panel.line_keys) if panel.line_keys else None
        ax.legend(title=legend_title, loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize="small",
                  title_fontsize="small")
    fig.suptitle(f"Scaling efficiency vs GPU count (circled: the knee, the first GPU count below {threshold:.0%})"
                 + table.truncation_note(table.other_keys()[:1] if len(table.other_keys()) >= 2 else []))
    return fig


def plot_scaling_efficiency(table: SweepTable, out_dir: Path, threshold: float = 0.85) -> List[Path]:
    return save_figure(build_scaling_efficiency(table, threshold), out_dir, "scaling_efficiency")


def build_straggler_heatmap(table: SweepTable, severity_key: str):
    """Slowdown over (straggler severity x GPU count), one heatmap per other combination."""
    grids = slowdown_grids(table, severity_key)
    gpus, severities = grids[0].gpus, grids[0].severities
    ncols = min(3, len(grids))
    fig = figure(1.0 + ncols * max(4.2, 0.7 * len(gpus) + 1.6),
                 0.8 + math.ceil(len(grids) / ncols) * max(3.2, 0.45 * len(severities) + 1.4))
    axes = panel_grid(fig, len(grids), ncols, sharey=False)
    values = np.array([float(r["slowdown"]) for r in table.rows])
    vmin, vmax = 1.0, max(1.0 + 1e-9, float(values.max()))
    image = None
    for ax, g in zip(axes, grids):
        image = ax.imshow(g.slowdown, origin="lower", aspect="auto", cmap="magma_r", vmin=vmin, vmax=vmax)
        ax.set_xticks(range(len(gpus)), [f"{n:,}" for n in gpus])
        ax.set_yticks(range(len(severities)), severities)
        ax.set_xlabel("GPUs (world size)")
        ax.set_ylabel(severity_key)
        if len(gpus) > 6:
            ax.tick_params(axis="x", labelrotation=45)
        if g.slowdown.size <= 120:
            for (i, j), v in np.ndenumerate(g.slowdown):
                if not np.isnan(v):
                    dark = (v - vmin) / (vmax - vmin) > 0.5
                    ax.text(j, i, f"{v:.2f}×", ha="center", va="center", fontsize="small",
                            color="white" if dark else "black")
        if g.title:
            ax.set_title(g.title, fontsize="medium")
    fig.colorbar(image, ax=list(axes), label="slowdown (mean step time / straggler-free)",
                 format=FuncFormatter(lambda v, _: f"{v:.2f}×"))
    others = table.other_keys(exclude=(severity_key,))
    fig.suptitle(f"Straggler sensitivity: slowdown by {severity_key} and GPU count" + table.truncation_note(others))
    return fig


def plot_straggler_heatmap(table: SweepTable, severity_key: str, out_dir: Path) -> List[Path]:
    return save_figure(build_straggler_heatmap(table, severity_key), out_dir, "straggler_heatmap")
