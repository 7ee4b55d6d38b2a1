"""Recursive halving / doubling all-reduce (Rabenseifner; Thakur, Rabenseifner & Gropp 2005).

Thakur et al., "Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1),
2005, section 4.4: a reduce-scatter by recursive halving (log2 p steps; in step s each rank
exchanges half of what it still holds, S/2^(s+1) bytes, with a partner) followed by an
all-gather by recursive doubling (the same steps in reverse):

    T = 2 log2(p) alpha + 2 (p-1)/p S/B           (p a power of two, one link class)

Partners are at distance 1, 2, 4, ... during the halving (so with node-major ranks the large
early exchanges stay inside a node and only the small late ones cross the network), and in the
reverse order during the doubling. When all GPUs of a node exchange across the network at
once, each gets 1/g of the node's ``inter_bandwidth``.

Not a power of two (Thakur et al. 4.4, in MPICH's simple form): with p' the largest power of
two <= p and r = p - p', the first 2r ranks pair up; each even one sends its whole vector to
its odd neighbour (alpha + S/B) and sits out; the p' survivors run the algorithm above; the
odd ones then send the result back (alpha + S/B): 2 more steps and 2 S/B more.

Each exchange is a max-plus step: both partners finish it at max(f_i, f_j) + t_ij, where t_ij
moves the bytes at the slower of the two directions (both partners send at once).
Closed form (all launch together): the sum over steps of the slowest pair of the step, exact
when every pair of a step uses the same link class (g and n powers of two);
an upper bound otherwise.
"""

from __future__ import annotations

import numpy as np

from commsim.collectives.contract import Algorithm, check_kind, checked_launch
from commsim.network.fabric import Fabric

NAME = "halving_doubling"


def _pair_time(fabric: Fabric, a: np.ndarray, b: np.ndarray, nbytes: float) -> np.ndarray:
    same = (a // fabric.gpus_per_node) == (b // fabric.gpus_per_node)
    bandwidth = fabric.exchange_bandwidth(a, b) / np.where(same, 1, fabric.gpus_per_node)
    return fabric.pair_latency(a, b) + nbytes / bandwidth


def schedule(n: int):
    """(p', r, survivors): the power of two, the number of folded pairs and the surviving ranks."""
    p2 = 1 << (n.bit_length() - 1)
    r = n - p2
    ranks = np.arange(n)
    survivors = ranks[((ranks < 2 * r) & (ranks % 2 == 1)) | (ranks >= 2 * r)]
    return p2, r, survivors


def _steps(fabric: Fabric, size: float):
    """The exchanges in order: (rank array a, partner array b, time array)."""
    n = fabric.world_size
    p2, r, surv = schedule(n)
    out = []
    evens = np.arange(0, 2 * r, 2)
    fold = (evens, evens + 1, _pair_time(fabric, evens, evens + 1, size)) if r else None
    if fold:
        out.append(fold)
    levels = p2.bit_length() - 1
    idx = np.arange(p2)
    order = list(range(levels)) + list(reversed(range(levels)))
    for s in order:
        partner = surv[idx ^ (1 << s)]
        out.append((surv, partner, _pair_time(fabric, surv, partner, size / 2 ** (s + 1))))
    if fold:
        out.append(fold)
    return out


class HalvingDoublingKernel:
    """The exchanges of one fabric and size, planned once."""

    def __init__(self, kind: str, fabric: Fabric, size: float):
        check_kind(NAME, kind, ALGORITHM.kinds)
        self.kind, self.chosen, self.size, self.world_size = kind, NAME, float(size), fabric.world_size
        self._steps = _steps(fabric, size)
        self._degraded = fabric.degraded

    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        """Per-rank finish times: every exchange sets both partners to max(f_a, f_b) + t."""
        f = checked_launch(launch, self.world_size).copy()
        for a, b, t in self._steps:
            done = np.maximum(f[a], f[b]) + t
            f[a] = done
            f[b] = done
        return f

    def uniform_time(self) -> float:
        """Closed form for simultaneous launch: sum over steps of the step's slowest pair
        (with degraded links, the kernel's finish for simultaneous launch)."""
        if self._degraded:
            return float(self.finish_times(np.zeros(self.world_size)).max())
        return float(sum(t.max() for _, _, t in self._steps))


ALGORITHM = Algorithm(NAME, ("all_reduce",), HalvingDoublingKernel, "recursive halving then doubling (Rabenseifner)")
