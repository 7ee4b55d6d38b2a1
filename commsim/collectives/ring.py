"""Flat ring all-reduce over all ranks (reduce-scatter then all-gather).

Ranks form one ring in node-major order, so the ring crosses the network once per node
(the hop into local rank 0 of each node) and uses the intra-node link elsewhere. Each of the
2(n-1) steps moves S/n bytes over every hop (DESIGN.md, Modeling reference). The per-step
time of the hop into rank i follows commsim's ring kernel (commsim/collectives/ring_closed_form.py ``hop_times``):

    t_i = mean over hops(alpha) + (S/n) / B_i

Occupancy is per hop, so the slowest hop paces the pipeline (bandwidth term
2(n-1)/n * S / min(B)); latency is not occupancy: a chunk's chain of dependencies crosses every
hop about twice, so the latency term is 2(n-1) * mean(alpha) = 2 * sum(alpha) * (n-1)/n, hop by
hop as in NCCL's tuning model (N network hops and n-N NVLink hops per lap). Closed form:

    T = 2(n-1) * max_i t_i = 2(n-1) mean(alpha) + 2(n-1)/n * S / min(B)

With one class this is the textbook 2(n-1) alpha + 2(n-1)/n S/B. With one ring per NIC (NCCL's
rail-aligned channels) each ring carries S/nics over one NIC: the same as one ring over the
node's aggregate ``inter_bandwidth``.
"""

from __future__ import annotations

import numpy as np

from commsim.network.fabric import Fabric
from commsim.collectives.maxplus import ring_steps

NAME = "ring"
COLLECTIVE = "all_reduce"


def hop_times(fabric: Fabric, size: float) -> np.ndarray:
    """Time of one step over the hop into each rank (from rank i-1): commsim.collectives.ring_closed_form.hop_times
    (the ring's mean hop latency plus S/n bytes at that hop's bandwidth) on the fabric's links."""
    from commsim.collectives.ring_closed_form import hop_times as ring_hop_times

    n = fabric.world_size
    ranks = np.arange(n)
    prev = (ranks - 1) % n
    return ring_hop_times(size, fabric.pair_latency(prev, ranks), fabric.pair_bandwidth(prev, ranks))


def time(fabric: Fabric, size: float) -> float:
    """Closed form for simultaneous launch: 2(n-1) * slowest step (see module docstring)."""
    n = fabric.world_size
    if n == 1:
        return 0.0
    return 2 * (n - 1) * float(hop_times(fabric, size).max())


def finish_times(fabric: Fabric, launch: np.ndarray, size: float) -> np.ndarray:
    """Per-rank finish times for launch times ``launch`` (the ring recurrence, 2(n-1) steps)."""
    n = fabric.world_size
    return ring_steps(np.asarray(launch, dtype=float), hop_times(fabric, size), 2 * (n - 1))
