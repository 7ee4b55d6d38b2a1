"""Flat ring over all ranks: all-reduce (reduce-scatter then all-gather), or either half alone.

Ranks form one ring in node-major order, so the ring crosses the network once per node
(the hop into local rank 0 of each node) and uses the intra-node link elsewhere
(:meth:`commsim.network.fabric.Fabric.ring_links`). Each step moves S/n bytes over every hop
(Patarasuk & Yuan 2009); the step over the hop into rank i takes
(:func:`commsim.collectives.ring_closed_form.hop_times`)

    t_i = mean over hops(alpha) + (S/n) / B_i

Occupancy is per hop, so the slowest hop paces the pipeline (bandwidth term
2(n-1)/n * S / min(B)); latency is not occupancy: a chunk's chain of dependencies crosses every
hop about twice, so the latency term is 2(n-1) * mean(alpha) = 2 * sum(alpha) * (n-1)/n, hop by
hop as in NCCL's tuning model (N network hops and n-N NVLink hops per lap). An all-reduce is
K = 2(n-1) steps, a reduce-scatter or an all-gather K = n-1 (S is then the whole buffer of n
shards, as nccl-tests' size column; a reduce step and a copy step cost the same). Closed form:

    T = K * max_i t_i;   all-reduce: 2(n-1) mean(alpha) + 2(n-1)/n * S / min(B)

With one class this is the textbook 2(n-1) alpha + 2(n-1)/n S/B. With one ring per NIC (NCCL's
rail-aligned channels) each ring carries S/nics over one NIC: the same as one ring over the
node's aggregate ``inter_bandwidth``. Late launches go through the ring's max-plus recurrence,
evaluated in O(n) by :class:`commsim.collectives.ring_closed_form.RingAllReduce` /
:class:`~commsim.collectives.ring_closed_form.RingHalf`.
"""

from __future__ import annotations

import numpy as np

from commsim.collectives.contract import KINDS, Algorithm, check_kind
from commsim.collectives.ring_closed_form import RingAllReduce, RingHalf
from commsim.collectives.ring_closed_form import hop_times as step_times
from commsim.network.fabric import Fabric

NAME = "ring"


def hop_times(fabric: Fabric, size: float) -> np.ndarray:
    """Time of one ring step over the hop into each rank (from its predecessor) on ``fabric``."""
    alpha, bandwidth = fabric.ring_links()
    return step_times(size, alpha, bandwidth)


def steps(kind: str, n: int) -> int:
    """Ring steps of a collective over n ranks: 2(n-1) for an all-reduce, n-1 for either half."""
    if n <= 1:
        return 0
    return 2 * (n - 1) if kind == "all_reduce" else n - 1


class RingKernel:
    """A ring all-reduce, reduce-scatter or all-gather planned for one fabric and size."""

    def __init__(self, kind: str, fabric: Fabric, size: float):
        check_kind(NAME, kind, KINDS)
        self.kind, self.chosen, self.size, self.world_size = kind, NAME, float(size), fabric.world_size
        self.hop_time = hop_times(fabric, size)
        self._closed = RingAllReduce(self.hop_time) if kind == "all_reduce" else RingHalf(self.hop_time)

    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        return self._closed.finish_times(launch)

    def uniform_time(self) -> float:
        """K x the slowest step (module docstring)."""
        k = steps(self.kind, self.world_size)
        return 0.0 if k == 0 else k * float(self.hop_time.max())


ALGORITHM = Algorithm(NAME, KINDS, RingKernel, "flat node-major ring (all-reduce, reduce-scatter, all-gather)")
