"""What a calibrated ring hop costs (the simulator's pricing of a calibration), and the names
the rest of the project imports from here.

The records, the fit and the predictions live in :mod:`commsim.calibration.records`,
:mod:`commsim.calibration.fit` and :mod:`commsim.calibration.prediction`; they are re-exported
below for callers that import them from this module (the file format is not: it lives in
:mod:`commsim.calibration.file`, which imports the records, not this module).
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from commsim.calibration.errors import CalibrationError
from commsim.calibration.fit import (
    FIT_ERROR_MIN_SIZE,
    MAX_RANGES,
    MIN_SIZES_PER_RANGE,
    MIN_TRANSFER_SHARE,
    RESIDUAL_FLOOR,
    fit_alpha_beta,
    fit_error,
    fit_link,
    fit_ranges,
    make_link,
)
from commsim.calibration.prediction import interpolate_busbw, predict_allreduce_time, predict_with_source
from commsim.calibration.records import (
    LEVELS,
    Calibration,
    ComputeTiming,
    FitError,
    LinkCalibration,
    Measurement,
    Number,
    Provenance,
    RankCompute,
    SizeRange,
    SourceFile,
    allreduce_factor,
    default_level,
    model_time,
)
from commsim.collectives.busbw import algbw, busbw

__all__ = [  # the names this module has always offered
    "LEVELS", "FIT_ERROR_MIN_SIZE", "MAX_RANGES", "MIN_SIZES_PER_RANGE", "MIN_TRANSFER_SHARE",
    "RESIDUAL_FLOOR", "Calibration", "CalibrationError", "ComputeTiming", "FitError", "LinkCalibration",
    "Measurement", "Provenance", "RankCompute", "SizeRange", "SourceFile", "algbw", "allreduce_factor", "busbw",
    "calibrated_hop_times", "default_level", "fit_alpha_beta", "fit_error", "fit_link", "fit_ranges",
    "hop_level_names", "hop_time", "interpolate_busbw", "make_link", "model_time", "predict_allreduce_time",
    "predict_with_source",
]


def hop_time(cal: Calibration, size: Number, n: int, level: Optional[str] = None) -> float:
    """Time of one of the 2(n-1) ring steps (each moving size/n bytes over one hop) that makes
    a uniform ring take :func:`predict_allreduce_time`: the per-hop time t_i of DESIGN.md's
    max-plus recurrence for a healthy hop on this level."""
    if n <= 1:
        return 0.0
    return predict_allreduce_time(cal, size, n, level) / (2.0 * (n - 1))


def hop_level_names(cal: Calibration, crosses: np.ndarray) -> List[str]:
    """Level of each ring hop: inter_node where the hop crosses nodes, intra_node elsewhere;
    a calibration with a single level (flat, or only one of the two) uses it for every hop
    (with two levels they are intra_node and inter_node: 'flat' does not combine)."""
    names = cal.level_names
    if len(names) == 1:
        return [names[0]] * len(crosses)
    return ["inter_node" if c else "intra_node" for c in crosses]


def calibrated_hop_times(cal: Calibration, crosses: Sequence[bool], size_bytes: Number,
                         bandwidth_factors: Optional[Sequence[float]] = None) -> np.ndarray:
    """Per-hop step times t_i of a ring all-reduce of `size_bytes` over n = len(crosses) ranks,
    for DESIGN.md's max-plus recurrence (hop i enters rank i from rank i-1).

    A healthy hop of level L takes predict_allreduce_time(cal, S, n, L) / (2(n-1)): with every
    hop on one level the ring then takes exactly the calibrated all-reduce time (measured
    curve or model). `crosses[i]` says whether hop i crosses nodes (see
    commsim.scenario.topology.ring_hop_links). As in commsim.collectives.ring_closed_form.hop_times, a hop's time splits into a
    latency part, alpha of its level's size range, charged as the ring's mean hop latency
    (latencies pipeline across the ring), and a transfer part, the rest, which a bandwidth
    factor f_i < 1 (a slow link) stretches by 1/f_i.
    """
    crosses = np.asarray(crosses, dtype=bool)
    n = len(crosses)
    if n <= 1:
        return np.zeros(n)
    levels = hop_level_names(cal, crosses)
    per_level = {lv: hop_time(cal, size_bytes, n, lv) for lv in set(levels)}
    t = np.array([per_level[lv] for lv in levels], dtype=np.float64)
    alpha = np.array([min(cal.level(lv).range_for(size_bytes).alpha_s, per_level[lv]) for lv in levels])
    transfer = t - alpha
    if bandwidth_factors is not None:
        transfer = transfer / np.asarray(bandwidth_factors, dtype=np.float64)
    return alpha.mean() + transfer
