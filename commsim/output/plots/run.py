"""One run (`commsim run SCENARIO --plot PATH`): step time per step, and each rank's waiting
split into exposed communication and waiting on late ranks.

The split is :func:`commsim.analysis.waiting.waiting_split`: a rank's waiting is mostly the
communication backward does not hide (634 ms per step at 1,024 ranks in
scenarios/scaling_1024.yaml), which it would wait without any straggler; the straggler cost is
what it waits beyond that (17.6 ms there). The two are drawn on their own axes, so that the
second is readable.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from commsim.analysis.waiting import WaitingSplit, waiting_split

from commsim.output.plots.common import COLORS, MaxNLocator, check_plot_target, figure, seconds_unit, write_figure


def _step_panel(ax, step: np.ndarray, summary: Mapping[str, Any], n: int) -> None:
    scale, unit = seconds_unit(step)
    steps = np.arange(len(step))
    ax.plot(steps, step * scale, color=COLORS["compute"], linewidth=1.2, marker="." if len(step) <= 200 else None,
            label="step time")
    # Zoom on the step times (and the baseline): the per-step variation is what this panel is
    # for. The ideal line is drawn when it falls in that view, else only named in the legend.
    shown = np.concatenate([step, [summary.get("baseline_step_time_s", step.mean())]]) * scale
    pad = max(0.08 * (shown.max() - shown.min()), 0.01 * shown.max())
    view = (shown.min() - pad, shown.max() + pad)
    refs = [("baseline_step_time_s", "straggler-free baseline", COLORS["baseline"], "--"),
            ("compute_time_s", "ideal (compute only)", COLORS["ideal"], ":")]
    for key, label, color, style in refs:
        if key in summary:
            value = summary[key] * scale
            note = "" if view[0] <= value <= view[1] else " (below this view)"
            ax.axhline(value, color=color, linestyle=style, linewidth=1.2, label=f"{label}: {value:.4g} {unit}{note}")
    ax.axhline(step.mean() * scale, color=COLORS["straggler"], linewidth=1.2,
               label=f"mean: {step.mean() * scale:.4g} {unit} (slowdown {summary.get('slowdown', float('nan')):.3f}×)")
    ax.set_ylim(*view)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"step time ({unit})")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax.set_title(f"{summary.get('scenario', 'run')}: step time per step ({n:,} ranks)")


def _straggler_panels(left, hist, split: WaitingSplit, summary: Mapping[str, Any]) -> None:
    n = split.ranks
    band = split.straggler_band()
    mean = split.straggler_mean
    scale, unit = seconds_unit(np.concatenate([band.ravel(), mean]))
    ranks = np.arange(n)
    left.fill_between(ranks, band[0] * scale, band[1] * scale, step="mid", color=COLORS["band"], alpha=0.6,
                      label="5th-95th percentile over steps (below 0: the rank itself was late)")
    left.plot(ranks, mean * scale, drawstyle="steps-mid", color=COLORS["compute"], linewidth=1,
              label=f"mean over steps (all ranks: {split.mean_straggler_wait * scale:.3g} {unit})")
    if split.straggler_cost_s is not None:
        left.axhline(split.straggler_cost_s * scale, color=COLORS["straggler"], linestyle="--", linewidth=1.2,
                     label=f"straggler cost (summary): {split.straggler_cost_s * scale:.3g} {unit}")
    top = summary.get("stragglers_top", [])
    if top:
        top_ranks = [int(t["rank"]) for t in top]
        text = ", ".join(f"{t['rank']} ({t['fraction']:.0%})" for t in top)
        left.plot(top_ranks, mean[top_ranks] * scale, linestyle="none", marker="v", color=COLORS["straggler"],
                  markersize=8, label=f"most often last: rank {text}")
    lo, hi = float(band.min()), float(band.max())
    if lo < 0 < hi:
        left.axhline(0, color="#444444", linewidth=0.8)
    left.set_xlabel("rank")
    left.set_ylabel(f"waiting on late ranks per step ({unit})")
    left.set_xlim(-0.5, n - 0.5)
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.grid(alpha=0.3)
    left.legend(loc="upper left", bbox_to_anchor=(0.0, -0.16), fontsize="small", ncols=1)
    left.set_title("Waiting on late ranks (beyond exposed communication), per rank", fontsize="medium")
    hist.hist(mean * scale, bins=min(40, max(5, n // 4)), orientation="horizontal", color=COLORS["compute"])
    hist.set_ylim(left.get_ylim())
    hist.set_xlabel("ranks")
    hist.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
    hist.set_ylabel(f"mean over steps ({unit})")
    hist.set_title("Distribution over ranks", fontsize="medium")
    hist.grid(alpha=0.3)


def _split_panel(ax, split: WaitingSplit) -> None:
    parts = [("exposed\ncommunication", split.mean_exposed_comm, COLORS["comm"]),
             ("waiting on\nlate ranks", split.mean_straggler_wait, COLORS["straggler"])]
    scale, unit = seconds_unit([v for _, v, _ in parts])
    y = np.arange(len(parts))
    values = [max(v, 0.0) * scale for _, v, _ in parts]
    ax.barh(y, values, color=[c for _, _, c in parts])
    ax.set_yticks(y, [name for name, _, _ in parts])
    ax.invert_yaxis()
    top = max(values + [1e-12])
    for yi, (_, v, _) in zip(y, parts):
        ax.text(max(v, 0.0) * scale + 0.02 * top, yi, f"{v * scale:.3g} {unit}", va="center", fontsize="small")
    ax.set_xlim(0, top * 1.45)  # room for the value labels
    ax.set_xlabel(f"mean over ranks and steps ({unit})")
    ax.set_title("Waiting per step", fontsize="medium")
    ax.grid(axis="x", alpha=0.3)


def build_run(run_result, summary: Mapping[str, Any], baseline=None):
    """The figure of :func:`plot_run`."""
    step = np.asarray(run_result.step_time, dtype=float)
    split = waiting_split(run_result, summary, baseline)
    fig = figure(12.5, 8.2)
    top, bottom = fig.subfigures(2, 1, height_ratios=[1, 1.15])
    _step_panel(top.subplots(), step, summary, split.ranks)
    left, hist, bars = bottom.subplots(1, 3, width_ratios=[2.3, 0.8, 1.1])
    _straggler_panels(left, hist, split, summary)
    _split_panel(bars, split)
    source = "per rank, from the straggler-free baseline" if split.exposed_source.endswith("baseline") \
        else "the summary's exposed_comm_s"
    bottom.suptitle(f"Waiting on other ranks: exposed communication ({source}) and waiting on late ranks",
                    fontsize="medium")
    return fig


def plot_run(run_result, summary: Mapping[str, Any], path: os.PathLike | str, baseline=None) -> Path:
    """Step time per step, and each rank's waiting split into exposed communication and
    waiting on late ranks, of one run.

    `run_result` is the :class:`commsim.sim.engine.RunResult`, `summary` its ``summarize`` dict,
    `baseline` (optional) the straggler-free run's RunResult: with it the exposed
    communication is each rank's own, without it the summary's ``exposed_comm_s``. The format
    follows PATH's suffix (.png, .svg or .pdf). Returns the path written."""
    path = Path(path)
    check_plot_target(path)
    return write_figure(build_run(run_result, summary, baseline), path)
