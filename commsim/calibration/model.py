"""What a calibrated link costs: the simulator's pricing of a calibration, level by level.

The records, the fit and the predictions live in :mod:`commsim.calibration.records`,
:mod:`commsim.calibration.fit` and :mod:`commsim.calibration.prediction` (the package's
``__init__`` is the public surface); this module turns a calibration into the latency and
bandwidth the fabric (:mod:`commsim.network.fabric`) prices one level's hops with.
"""

from __future__ import annotations

import math
from typing import List, Optional, Tuple

import numpy as np

from commsim.calibration.prediction import predict_allreduce_time
from commsim.calibration.records import Calibration, Number


def hop_time(cal: Calibration, size: Number, n: int, level: Optional[str] = None) -> float:
    """Time of one of the 2(n-1) ring steps (each moving size/n bytes over one hop) that makes
    a uniform ring take :func:`predict_allreduce_time`: the per-hop time t_i of docs/collectives.md's
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


def _calibrated_level(cal: Calibration, level: str) -> str:
    """The calibration level that prices the fabric's ``level`` (intra_node / inter_node)."""
    return hop_level_names(cal, [level == "inter_node"])[0]


def measured_level_constants(cal: Calibration, level: str, size_bytes: Number, n: int) -> Tuple[float, float]:
    """(latency, bandwidth) of the fabric's ``level`` for a collective of ``size_bytes`` over
    ``n`` ranks, from the calibration's measured curve (where it has one) or its model: a
    :class:`commsim.network.fabric.LevelPricing`, what ``commsim run`` prices the ring with.

    A healthy hop takes t = predict_allreduce_time(cal, S, n, L) / (2(n-1)) per ring step
    (:func:`hop_time`), so a uniform ring over one level takes exactly the calibrated time.
    t splits into a latency part, alpha of the level's size range (at most t), charged as the
    ring's mean hop latency (latencies pipeline across the ring:
    :func:`commsim.collectives.ring_closed_form.hop_times`), and a transfer part, the rest,
    which moves S/n bytes: the bandwidth is (S/n) / (t - alpha) (infinite when nothing is
    left), so a slow link (a bandwidth factor f) stretches the transfer part only, by 1/f.
    """
    lv = _calibrated_level(cal, level)
    t = hop_time(cal, size_bytes, n, lv)
    alpha = min(cal.level(lv).range_for(size_bytes).alpha_s, t)
    transfer = t - alpha
    return alpha, (float(size_bytes) / n) / transfer if transfer > 0 else math.inf


def fitted_level_constants(cal: Calibration, level: str, size_bytes: Number, n: int) -> Tuple[float, float]:
    """(latency, bandwidth) of the fabric's ``level``: the alpha and B fitted to the size range
    ``size_bytes`` falls in (the measured table is not used; ``n`` is not either): a
    :class:`commsim.network.fabric.LevelPricing`, what ``commsim collective SCENARIO
    --calibration`` prices every algorithm with."""
    r = cal.level(_calibrated_level(cal, level)).range_for(size_bytes)
    return r.alpha_s, r.beta_Bps
