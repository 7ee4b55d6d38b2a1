"""Hierarchical all-reduce: intra-node reduce-scatter, inter-node all-reduce, intra-node all-gather.

1. Inside each node, a ring reduce-scatter over its g GPUs: g-1 steps of S/g bytes; local rank
   j ends with the node's sum of shard j.
2. Every local rank j runs a ring all-reduce of its S/g shard with local rank j of every other
   node: 2(N-1) steps of S/(gN) bytes. These g rings run at once, one per rail (NIC): each
   gets 1/g of the node's ``inter_bandwidth`` (with one NIC per GPU: one NIC each).
3. Inside each node, a ring all-gather: g-1 steps of S/g bytes.

Closed form (all ranks launch together), from the ring recurrence of each stage:

    T = 2(g-1) (alpha_i + S/(g B_i)) + 2(N-1) (alpha_e + S/(N B_e))

The bandwidth terms add up to the flat ring's (2(g-1)/g S/B_i + 2(N-1)/N S/B_e, each level at
its own speed rather than all at the slowest); the network latency is paid 2(N-1) times
instead of 2(gN-1) times. docs/collectives.md; NCCL's CollNet/NVLS-Tree and Horovod's
hierarchical all-reduce follow this pattern.
"""

from __future__ import annotations

import numpy as np

from commsim.collectives.contract import Algorithm, check_kind, checked_launch
from commsim.collectives.maxplus import ring_recurrence
from commsim.collectives.ring_closed_form import RingAllReduce
from commsim.network.fabric import Fabric

NAME = "hierarchical"


def _stage_hops(fabric: Fabric, size: float) -> tuple[np.ndarray, np.ndarray]:
    """Hop times: intra (N, g), the hop into local rank j of node k from local rank j-1;
    inter (g, N), the hop into node k from node k-1 on rail j (1/g of the node's network)."""
    g, N = fabric.gpus_per_node, fabric.nodes
    ranks = np.arange(N * g).reshape(N, g)
    prev_local = np.roll(ranks, 1, axis=1)
    intra = fabric.pair_latency(prev_local, ranks) + (size / g) / fabric.pair_bandwidth(prev_local, ranks)
    rail = ranks.T  # (g, N)
    prev_node = np.roll(rail, 1, axis=1)
    inter = fabric.pair_latency(prev_node, rail) + (size / (g * N)) / (fabric.pair_bandwidth(prev_node, rail) / g)
    return intra, inter


class HierarchicalKernel:
    """Planned once per fabric and size. The inter-node stage is a full ring all-reduce per
    rail, evaluated with the O(n) ring closed form (:class:`RingAllReduce`); the intra-node
    stages run the ring recurrence over all nodes at once."""

    def __init__(self, kind: str, fabric: Fabric, size: float):
        check_kind(NAME, kind, ALGORITHM.kinds)
        self.kind, self.chosen, self.size, self.world_size = kind, NAME, float(size), fabric.world_size
        self.g, self.N = fabric.gpus_per_node, fabric.nodes
        self.intra, inter = _stage_hops(fabric, size)
        self.rails = [RingAllReduce(inter[j]) for j in range(self.g)] if self.N > 1 else []
        # one hop time per stage (nominal links): every stage's ring reaches every rank of it
        # from every other through paths of equal weight, so all ranks finish at
        # max(L) + 2(g-1) t_intra + 2(N-1) t_inter
        self._uniform = None
        if np.all(self.intra == self.intra.flat[0]) and np.all(inter == inter.flat[0]):
            self._uniform = 2 * (self.g - 1) * float(self.intra.flat[0]) + (
                2 * (self.N - 1) * float(inter.flat[0]) if self.N > 1 else 0.0)
        self._nominal = None
        if not fabric.degraded:  # closed form (module docstring)
            intra = fabric.intra_latency + (size / self.g) / fabric.intra_bandwidth
            inter = fabric.inter_latency + (size / (self.g * self.N)) / (fabric.inter_bandwidth / self.g)
            self._nominal = 2 * (self.g - 1) * intra + 2 * (self.N - 1) * inter

    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        """Per-rank finish times: the three stages' ring recurrences, each rank starting a
        stage as soon as it has finished the previous one."""
        g, N = self.g, self.N
        if self._uniform is not None:
            return np.full(self.world_size, checked_launch(launch, self.world_size).max() + self._uniform)
        f = checked_launch(launch, self.world_size).reshape(N, g)  # row = node, column = local rank
        f = ring_recurrence(f, self.intra, g - 1)                  # reduce-scatter within each node
        if self.rails:                                             # one ring all-reduce per rail
            f = np.stack([ring.finish_times(f[:, j]) for j, ring in enumerate(self.rails)], axis=1)
        f = ring_recurrence(f, self.intra, g - 1)                  # all-gather within each node
        return f.reshape(-1)

    def uniform_time(self) -> float:
        """Closed form for simultaneous launch with nominal links; with degraded links, the
        kernel's finish for simultaneous launch."""
        if self._nominal is not None:
            return self._nominal
        return float(self.finish_times(np.zeros(self.world_size)).max())


ALGORITHM = Algorithm(NAME, ("all_reduce",), HierarchicalKernel,
                      "intra-node reduce-scatter, inter-node ring per rail, intra-node all-gather")
