"""Predictions from a calibration: its measured curve where it has one, its fitted model elsewhere."""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import numpy as np

from commsim.calibration.records import Calibration, Measurement, Number, allreduce_factor


def interpolate_busbw(rows: Sequence[Measurement], size: Number) -> Optional[float]:
    """busbw at `size` from measurements of one world size, linear in log(size) between the
    neighbouring measured sizes; None when `size` lies outside the measured range."""
    if not rows:
        return None
    sizes = np.array([m.size_bytes for m in rows], dtype=float)
    if size < sizes[0] or size > sizes[-1]:
        return None
    bws = np.array([m.busbw for m in rows], dtype=float)
    return float(np.interp(math.log(size), np.log(sizes), bws))


def predict_with_source(
    cal: Calibration, size: Number, n: int, level: Optional[str] = None
) -> Tuple[float, str]:
    """:func:`predict_allreduce_time` and where the figure came from: "table" (measured
    curve), "model" (alpha-beta) or "none" (one rank or zero bytes: nothing to do)."""
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n!r}")
    if size < 0:
        raise ValueError(f"size must be >= 0 bytes, got {size!r}")
    if n == 1 or size == 0:
        return 0.0, "none"
    link = cal.level(level)
    bw = interpolate_busbw(link.rows_for(n), size)
    if bw is not None and bw > 0:
        return float(size) / (bw / allreduce_factor(n)), "table"
    return link.model_time(size, n), "model"


def predict_allreduce_time(cal: Calibration, size: Number, n: int, level: Optional[str] = None) -> float:
    """Predicted all-reduce time (s) of `size` bytes over `n` ranks on link level `level`.

    The measured curve when `n` equals a measured world size and `size` lies inside that
    table (busbw interpolated in log-size, then t = S / (busbw * n / (2(n-1)))); otherwise
    the alpha-beta model of the size range `size` falls in. One rank, or zero bytes, costs nothing."""
    return predict_with_source(cal, size, n, level)[0]
