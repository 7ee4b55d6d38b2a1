"""Predicted all-reduce busbw against message size, measured calibration points overlaid.

The curves and points come from :mod:`commsim.analysis.busbw_curve`."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import List, Sequence

import numpy as np

from commsim.analysis.busbw_curve import BusbwCurve, MeasuredPoints

from commsim.output.plots.common import FixedLocator, FuncFormatter, NullLocator, figure, save_figure


def size_text(x: float) -> str:
    """Bytes with a binary prefix: 8 B, 32 KiB, 2 GiB."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= factor:
            return f"{x / factor:g} {unit}"
    return f"{x:g} B"


def _title(curves: Sequence[BusbwCurve]) -> str:
    kinds = sorted({(c.algorithm, c.model) for c in curves})
    how = "; ".join(f"{a}, {m}" for a, m in kinds)
    return "All-reduce bus bandwidth vs message size" + (f" ({how})" if how else " (measured)")


def build_busbw(curves: Sequence[BusbwCurve], measured: Sequence[MeasuredPoints] = ()):
    """Predicted busbw per curve (lines) and measured busbw (hollow markers), log-log."""
    fig = figure(8.8, 5.2)
    ax = fig.add_subplot()
    sizes = [s for c in curves for s in c.size_bytes] + [float(s) for m in measured for s in m.size_bytes]
    worlds = sorted({c.world_size for c in curves})
    for c in curves:
        # one world size: said once, in the legend's title
        label = f"predicted: {c.label}" + (f" ({c.world_size:,} GPUs)" if len(worlds) > 1 else "")
        ax.plot(c.size_bytes, np.asarray(c.busbw_Bps) / 1e9, label=label)
    for m, marker in zip(measured, itertools.cycle("o^sDv")):
        ax.plot(m.size_bytes, m.busbw_Bps / 1e9, linestyle="none", marker=marker, markerfacecolor="none", label=m.label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    lo, hi = (int(np.floor(np.log2(min(sizes)))), int(np.ceil(np.log2(max(sizes))))) if sizes else (3, 32)
    ax.xaxis.set_major_locator(FixedLocator([2.0 ** k for k in range(lo, hi + 1, 4)]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: size_text(x)))
    ax.set_xlabel("message size per rank (bytes, binary prefixes)")
    ax.set_ylabel("all-reduce busbw (GB/s)")
    ax.grid(alpha=0.3, which="both")
    ax.set_title(_title(curves), fontsize="medium")
    if curves or measured:
        # busbw rises with size: the upper left of the axes stays empty
        ax.legend(loc="upper left", fontsize="small",
                  title=f"{worlds[0]:,} GPUs" if len(worlds) == 1 else None, title_fontsize="small")
    return fig


def plot_busbw(curves: Sequence[BusbwCurve], out_dir: Path, measured: Sequence[MeasuredPoints] = ()) -> List[Path]:
    return save_figure(build_busbw(curves, measured), out_dir, "busbw_vs_size")
