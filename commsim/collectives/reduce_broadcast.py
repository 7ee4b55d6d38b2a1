"""The naive all-reduce: every rank sends its whole vector to a root, which reduces and then
sends the result back to every rank (a linear reduce followed by a linear broadcast, as
MPI's basic linear algorithms do; Thakur et al. 2005, section 1).

The root's link serializes it: 2(n-1) whole-vector transfers,

    T = 2 sum_{j != root} (alpha_j + S / B_j)  ~  2(n-1)(alpha + S/B),

which grows linearly with n in the bandwidth term where a ring's stays at 2S/B: the reason
rings (and trees) replaced it.

Model: root 0 receives from ranks 1, 2, ..., n-1 in order, message j starting when the root has
finished message j-1 and rank j has launched; then it sends the result to 1, 2, ..., n-1 in
order; rank j finishes when its copy has arrived, the root when the last copy has been sent.
A transfer between nodes uses the root node's network link (``inter_bandwidth``); rank j's
message to the root and the root's copy to j are priced in their own directions.
"""

from __future__ import annotations

import numpy as np

from commsim.collectives.contract import Algorithm, check_kind, checked_launch
from commsim.network.fabric import Fabric

NAME = "reduce_broadcast"


def transfer_times(fabric: Fabric, size: float) -> tuple[np.ndarray, np.ndarray]:
    """(to the root, from the root): time of each rank's whole-vector transfer to root 0 and of
    the root's copy back (index 0, the root itself, is 0)."""
    ranks = np.arange(fabric.world_size)
    root = np.zeros_like(ranks)
    up = fabric.pair_latency(ranks, root) + size / fabric.pair_bandwidth(ranks, root)
    down = fabric.pair_latency(root, ranks) + size / fabric.pair_bandwidth(root, ranks)
    up[0] = down[0] = 0.0
    return up, down


class ReduceBroadcastKernel:
    """Reduce to root 0, then broadcast, planned once per fabric and size."""

    def __init__(self, kind: str, fabric: Fabric, size: float):
        check_kind(NAME, kind, ALGORITHM.kinds)
        self.kind, self.chosen, self.size, self.world_size = kind, NAME, float(size), fabric.world_size
        self.up, self.down = transfer_times(fabric, size)
        # Reduce: r_j = max(r_{j-1}, L_j) + up_j unrolls to max_j (L_j + sum_{k >= j} up_k), with
        # the root's own launch as j = 0.
        self._tail = np.cumsum(self.up[::-1])[::-1]
        self._copies = np.cumsum(self.down)

    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        """Per-rank finish times (module docstring)."""
        reduced = float(np.max(checked_launch(launch, self.world_size) + self._tail))
        arrive = reduced + self._copies  # broadcast: copies leave back to back
        arrive[0] = arrive[-1]
        return arrive

    def uniform_time(self) -> float:
        """Closed form for simultaneous launch: every transfer in turn, both ways."""
        return float(self.up.sum()) + float(self.down.sum())


ALGORITHM = Algorithm(NAME, ("all_reduce",), ReduceBroadcastKernel, "linear reduce to a root, then linear broadcast")
