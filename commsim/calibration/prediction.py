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


def calibrated_world_sizes(cal: Calibration, level: Optional[str] = None) -> Tuple[int, ...]:
    """The world sizes measured on link level `level` (None: on every level), increasing."""
    levels = [cal.level(level)] if level is not None else list(cal.levels)
    return tuple(sorted({m.world_size for lv in levels for m in lv.table}))


def extrapolation_note(cal: Calibration, ranks: int, nodes: Optional[int] = None,
                       level: Optional[str] = None) -> Optional[str]:
    """None when a prediction for `ranks` ranks (on `nodes` nodes, where known) stays within
    what the calibration measured, else one line saying how far it reaches beyond:

        extrapolating: 64 ranks is 8 x the largest calibrated world size 8

    The ring model's n-dependence (2(n-1) latency steps, the 2(n-1)/n transfer factor) is
    fitted at the measured world sizes only; at other rank counts congestion, protocol and
    topology changes are not in the data. Rank counts are those of level `level` (None: every
    level). Nodes: a prediction over several nodes from a calibration with only intra-node
    links, or over more nodes than the calibration's hosts (when it names them)."""
    if ranks <= 1:  # one rank does not communicate: nothing is predicted
        return None
    notes = []
    sizes = calibrated_world_sizes(cal, level)
    if ranks > sizes[-1]:
        notes.append(f"{ranks} ranks is {ranks / sizes[-1]:.3g} x the largest calibrated world size {sizes[-1]}")
    elif ranks < sizes[0]:
        notes.append(f"{ranks} ranks is below the smallest calibrated world size {sizes[0]}")
    if nodes is not None and nodes > 1:
        hosts = len(cal.provenance.hostnames)
        if cal.level_names == ("intra_node",):
            notes.append(f"{nodes} nodes, but the calibration measured links inside one node only (level intra_node)")
        elif hosts and nodes > hosts:
            notes.append(f"{nodes} nodes is {nodes / hosts:.3g} x the {hosts} calibrated host{'s' if hosts > 1 else ''}")
    return "extrapolating: " + "; ".join(notes) if notes else None
