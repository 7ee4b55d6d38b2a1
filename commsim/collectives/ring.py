"""Flat ring all-reduce over all ranks (reduce-scatter then all-gather).

Ranks form one ring in node-major order, so the ring crosses the network once per node
(the hop into local rank 0 of each node) and uses the intra-node link elsewhere. Each of the
2(n-1) steps moves S/n bytes over every hop (DESIGN.md, Modeling reference):

    T = 2(n-1) * max_hop(alpha_hop + (S/n) / B_hop)

In the ring recurrence (commsim/ring.py, maxplus.ring_steps) every step waits for the
predecessor's previous step, so the slowest hop class bounds the pipeline: with one class
this is the textbook 2(n-1) alpha + 2(n-1)/n S/B; with NVLink inside and a network between
nodes the network hop sets the pace of every step.

With one ring per NIC (NCCL's rail-aligned channels) each ring carries S/nics over one NIC,
which is the same as one ring over the node's aggregate ``inter_bandwidth``.
"""

from __future__ import annotations

import numpy as np

from .fabric import Fabric
from .maxplus import ring_steps

NAME = "ring"
COLLECTIVE = "all_reduce"


def hop_times(fabric: Fabric, size: float) -> np.ndarray:
    """Time of the hop into each rank (from rank i-1) for one step (S/n bytes)."""
    n = fabric.world_size
    ranks = np.arange(n)
    prev = (ranks - 1) % n
    return fabric.pair_latency(prev, ranks) + (size / n) / fabric.pair_bandwidth(prev, ranks)


def time(fabric: Fabric, size: float) -> float:
    """Closed form for simultaneous launch: 2(n-1) * slowest hop."""
    n = fabric.world_size
    if n == 1:
        return 0.0
    return 2 * (n - 1) * float(hop_times(fabric, size).max())


def finish_times(fabric: Fabric, launch: np.ndarray, size: float) -> np.ndarray:
    """Per-rank finish times for launch times ``launch`` (the ring recurrence, 2(n-1) steps)."""
    n = fabric.world_size
    return ring_steps(np.asarray(launch, dtype=float), hop_times(fabric, size), 2 * (n - 1))
