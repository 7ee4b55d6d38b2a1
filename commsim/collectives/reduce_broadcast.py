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
A transfer between nodes uses the root node's network link (``inter_bandwidth``).
"""

from __future__ import annotations

import numpy as np

from commsim.network.fabric import Fabric

NAME = "reduce_broadcast"
COLLECTIVE = "all_reduce"


def transfer_times(fabric: Fabric, size: float) -> np.ndarray:
    """Time of the root's transfer with each rank (index 0, the root itself, is 0)."""
    ranks = np.arange(fabric.world_size)
    root = np.zeros_like(ranks)
    t = fabric.pair_latency(root, ranks) + size / fabric.pair_bandwidth(root, ranks)
    t[0] = 0.0
    return t


def time(fabric: Fabric, size: float) -> float:
    """Closed form for simultaneous launch."""
    return 2.0 * float(transfer_times(fabric, size).sum())


def finish_times(fabric: Fabric, launch: np.ndarray, size: float) -> np.ndarray:
    """Per-rank finish times (see module docstring)."""
    launch = np.asarray(launch, dtype=float)
    t = transfer_times(fabric, size)
    # Reduce: r_j = max(r_{j-1}, L_j) + t_j unrolls to max_j (L_j + sum_{k >= j} t_k), with the
    # root's own launch as j = 0.
    tail = np.cumsum(t[::-1])[::-1]
    reduced = float(np.max(launch + tail))
    # Broadcast: copies leave back to back.
    arrive = reduced + np.cumsum(t)
    arrive[0] = arrive[-1]
    return arrive
