"""The max-plus recurrences of the kernels, written once (numpy only).

A synchronous step of a ring: rank i can do step k once it has done step k-1 and its
predecessor i-1 has done step k-1 (it needs the chunk that i-1 produced), and the hop into i
then takes t_i (docs/collectives.md):

    f[i, k] = max(f[i, k-1], f[i-1, k-1]) + t_i,    f[i, 0] = L_i.

A pipeline stage that forwards C chunks in order, chunk j becoming available at X_j and each
taking o on the stage: e_k = max(e_{k-1}, X_k) + o, which unrolls to
e_k = (k+1) o + max_{j<=k} (X_j - j o): a cumulative maximum, so whole chunk sequences are
evaluated with one numpy call.
"""

from __future__ import annotations

import numpy as np


def ring_recurrence(launch: np.ndarray, hop: np.ndarray, steps: int) -> np.ndarray:
    """Finish times after ``steps`` steps of the ring recurrence, step by step: O(m x steps).

    ``launch`` and ``hop`` have shape (..., m): the last axis is the ring (position i receives
    from position i-1, cyclically); leading axes are independent rings evaluated together.
    ``hop[..., i]`` is the time of the hop *into* position i. The rings inside a node of the
    hierarchical all-reduce run it directly; :mod:`commsim.collectives.ring_closed_form`
    evaluates the same recurrence in O(m) per ring for long rings.
    """
    f = np.array(launch, dtype=float, copy=True)
    hop = np.asarray(hop, dtype=float)
    for _ in range(steps):
        f = np.maximum(f, np.roll(f, 1, axis=-1)) + hop
    return f


def pipeline(available: np.ndarray, occupancy: np.ndarray) -> np.ndarray:
    """End times of C chunks through one stage per row.

    ``available`` has shape (r, C): when chunk k is ready to enter the stage of row r;
    ``occupancy`` has shape (r,) or (r, 1): how long one chunk holds the stage.
    Returns e with e[:, k] = max(e[:, k-1], available[:, k]) + occupancy.
    """
    available = np.asarray(available, dtype=float)
    o = np.asarray(occupancy, dtype=float).reshape(-1, 1)
    k = np.arange(available.shape[1], dtype=float)
    return (k + 1.0) * o + np.maximum.accumulate(available - k * o, axis=1)
