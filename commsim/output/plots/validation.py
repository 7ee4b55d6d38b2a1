"""Predicted against measured step time (``commsim validate`` JSON files).

The cases, in numeric order of their names, come from :mod:`commsim.analysis.validation_cases`."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import List, Sequence

import numpy as np

from commsim.analysis.validation_cases import ValidationCase, median_abs_error

from commsim.output.plots.common import COLORS, figure, save_figure, seconds_unit, spans_decades


def build_validation(cases: Sequence[ValidationCase], band: float = 0.10):
    """Left: predicted vs measured mean (filled) and p95 (hollow) step time with the ±band
    error band; right: the error of each case, with their median."""
    fig = figure(11.5, 0.8 + max(4.0, 0.32 * len(cases) + 1.5))
    left, right = fig.subplots(1, 2, width_ratios=[1.1, 1])
    allv = [v for c in cases for v in c.values()]
    scale, unit = seconds_unit(allv)
    # the data's own range, padded: not from 0, where a 20-130 ms range would be a corner
    lo, hi = min(allv) * scale / 1.3, max(allv) * scale * 1.3
    line = np.geomspace(lo, hi, 50) if spans_decades(allv) else np.linspace(lo, hi, 50)
    left.fill_between(line, line * (1 - band), line * (1 + band), color=COLORS["band"], alpha=0.5,
                      label=f"±{band:.0%} error band")
    left.plot(line, line, color="#444444", linewidth=1, label="predicted = measured")
    markers = itertools.cycle("osD^v<>ph")
    for c in cases:
        (pt,) = left.plot([c.measured_mean * scale], [c.predicted_mean * scale], marker=next(markers),
                          linestyle="none", label=c.name)
        if c.measured_p95 is not None and c.predicted_p95 is not None:
            # its case's colour given outright, so that it does not use up the next case's
            left.plot([c.measured_p95 * scale], [c.predicted_p95 * scale], marker=pt.get_marker(), linestyle="none",
                      color=pt.get_color(), markerfacecolor="none")
    if spans_decades(allv):
        left.set_xscale("log")
        left.set_yscale("log")
    left.set_xlim(lo, hi)
    left.set_ylim(lo, hi)
    left.set_xlabel(f"measured step time ({unit})")
    left.set_ylabel(f"predicted step time ({unit})")
    left.set_title("Mean (filled) and p95 (hollow) step time", fontsize="medium")
    left.grid(alpha=0.3)
    left.legend(loc="upper left", fontsize="x-small")
    errors = [c.error_pct for c in cases]
    y = np.arange(len(cases))
    right.axvspan(-band * 100, band * 100, color=COLORS["band"], alpha=0.5)
    right.barh(y, errors, color=[COLORS["compute"] if abs(e) <= band * 100 else COLORS["straggler"] for e in errors])
    right.axvline(0, color="#444444", linewidth=1)
    right.set_yticks(y, [c.name for c in cases], fontsize="small")
    right.invert_yaxis()  # the first case on top, as in the legend
    right.set_xlabel("error of predicted mean step time (%)")
    right.set_title(f"Error per case (median |error| {median_abs_error(cases):.1f}%)", fontsize="medium")
    right.grid(axis="x", alpha=0.3)
    fig.suptitle("Predicted vs measured step time (commsim validate)")
    return fig


def plot_validation(cases: Sequence[ValidationCase], out_dir: Path, band: float = 0.10) -> List[Path]:
    return save_figure(build_validation(cases, band), out_dir, "predicted_vs_measured")
