"""Reduce-scatter and all-gather as collectives of their own: half a ring each.

A ring all-reduce is a reduce-scatter (n-1 steps, each rank ends with the sum of one S/n
shard) followed by an all-gather (n-1 steps). Alone, each costs half (DESIGN.md):

    T = (n-1) * max_i t_i = (n-1) mean(alpha) + (n-1)/n * S / min(B)   (t_i as in the ring module)

S is the total buffer (n shards), as in nccl-tests' size column for these collectives, whose
busbw factor is (n-1)/n (see :mod:`commsim.collectives.busbw`). The two share one model:
in the max-plus recurrence a reduce step and a copy step cost the same.
"""

from __future__ import annotations

import numpy as np

from commsim.network.fabric import Fabric
from commsim.collectives.maxplus import ring_steps
from commsim.collectives.ring import hop_times


def time(fabric: Fabric, size: float) -> float:
    """Closed form for simultaneous launch: (n-1) * slowest hop."""
    n = fabric.world_size
    if n == 1:
        return 0.0
    return (n - 1) * float(hop_times(fabric, size).max())


def finish_times(fabric: Fabric, launch: np.ndarray, size: float) -> np.ndarray:
    """Per-rank finish times (the ring recurrence, n-1 steps)."""
    n = fabric.world_size
    return ring_steps(np.asarray(launch, dtype=float), hop_times(fabric, size), n - 1)
