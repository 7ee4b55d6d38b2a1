"""Prediction rows of the physical model: what `commsim collective --nodes/--gpus-per-node` prints.

One row per size, nccl-tests' columns (``size_bytes``, ``time_us``, ``algbw_GBps``,
``busbw_GBps``) plus what the physical model adds: ``chosen`` (NCCL's algorithm/protocol for
the size), ``low_us`` / ``high_us`` (the 95% prediction interval of a calibration; null on
nominal hardware, which has no fit to be uncertain about) and ``note`` (the extrapolation
note: how many times the calibrated node count; a measured scale's residual correction).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from commsim.calibration.physical_fit import PhysicalFit
from commsim.collectives.nccl.scale import bus_factor
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import System


def physical_rows(kind: str, nodes: int, gpus_per_node: int, sizes: Sequence[float], *,
                  fit: Optional[PhysicalFit] = None, system: Optional[System] = None,
                  algorithm: Optional[str] = None, protocol: Optional[str] = None,
                  source: str = "collective") -> Tuple[List[dict], str]:
    """(rows, note) for `kind` on `nodes` x `gpus_per_node`: from a calibration's `fit`, or
    from nominal `system` alone. `algorithm` / `protocol` restrict NCCL's choice like
    NCCL_ALGO / NCCL_PROTO (an InputError naming the key when nothing can run)."""
    S = np.asarray(list(sizes), dtype=float)
    kw = {k: v for k, v in (("algorithm", algorithm), ("protocol", protocol)) if v}
    if fit is not None:
        p = fit.plan(kind, nodes, gpus_per_node, source=source, **kw)
        pred = fit.predict(kind, nodes, gpus_per_node, S, **kw)
        t, low, high, note = pred.time_us, pred.low_us, pred.high_us, pred.note
    else:
        p = plan(kind, system, nodes, gpus_per_node, source=source, **kw)
        t, low, high, note = p.time_us(S), None, None, ""
    chosen = p.choose(S)
    factor = bus_factor(kind, nodes * gpus_per_node)
    rows = []
    for i, size in enumerate(S):
        algbw = size / (t[i] * 1e3)
        rows.append({
            "size_bytes": int(size), "time_us": float(t[i]), "algbw_GBps": float(algbw),
            "busbw_GBps": float(algbw * factor), "chosen": "/".join(chosen[i]),
            "low_us": None if low is None else float(low[i]), "high_us": None if high is None else float(high[i]),
            "note": note,
        })
    return rows, note
