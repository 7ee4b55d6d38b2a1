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
    fold, butterfly, _ = _schedule_times(fabric, size)
    out = [fold] if fold else []
    out += butterfly
    return out + ([fold] if fold else [])


def _schedule_times(fabric: Fabric, size: float):
    """(fold exchange or None, butterfly exchanges in order, survivors) with their pair times."""
    n = fabric.world_size
    p2, r, surv = schedule(n)
    evens = np.arange(0, 2 * r, 2)
    fold = (evens, evens + 1, _pair_time(fabric, evens, evens + 1, size)) if r else None
    levels = p2.bit_length() - 1
    idx = np.arange(p2)
    order = list(range(levels)) + list(reversed(range(levels)))
    butterfly = []
    for s in order:
        partner = surv[idx ^ (1 << s)]
        butterfly.append((surv, partner, _pair_time(fabric, surv, partner, size / 2 ** (s + 1))))
    return fold, butterfly, surv


class HalvingDoublingKernel:
    """The exchanges of one fabric and size, planned once.

    The p' survivors of the fold are held as one compact vector: the exchange at distance 2^s
    pairs position j with j xor 2^s, i.e. the two halves of each block of 2^(s+1) positions,
    so a step is one maximum of two strided views plus the pair times (no fancy indexing).
    When every pair of every butterfly step takes the same time (nominal links, g and n powers
    of two), each survivor ends at max(L) plus the steps' times in order: after the halving
    every survivor depends on every other through paths of the same weight. The sum is taken
    step by step, in the recurrence's order, so that the result is bit-identical to it.

    Every step (fold, butterfly, unfold) is a maximum plus a constant, so the finish times are
    max-plus linear in the launch (a launch of ``-inf`` is a rank that takes no part), as
    :class:`commsim.collectives.maxplus.Responses` requires (:attr:`maxplus_linear`).
    """

    maxplus_linear = True

    def __init__(self, kind: str, fabric: Fabric, size: float):
        check_kind(NAME, kind, ALGORITHM.kinds)
        self.kind, self.chosen, self.size, self.world_size = kind, NAME, float(size), fabric.world_size
        fold, butterfly, surv = _schedule_times(fabric, size)
        self._steps = ([fold] if fold else []) + butterfly + ([fold] if fold else [])
        self._degraded = fabric.degraded
        self._fold = fold
        self._survivors = None if fold is None else surv
        # a step sets both partners to max(f_a, f_b) + t; the partner's copy is written last, so
        # position j ends at max(f_j, f_partner) + t of the pair listed at the partner
        self._butterfly = []
        for s, (_, _, t) in zip(_distances(len(surv)), butterfly):
            t_at = t[np.arange(len(surv)) ^ s]
            self._butterfly.append((s, t_at.reshape(-1, 2, s)))
        self._uniform = all(np.all(t == t[0, 0, 0]) for _, t in self._butterfly)
        self._uniform_steps = [float(t[0, 0, 0]) for _, t in self._butterfly]

    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        """Per-rank finish times: every exchange sets both partners to max(f_a, f_b) + t."""
        f = checked_launch(launch, self.world_size).copy()
        if self._fold is not None:
            self._exchange(f, *self._fold)
            fs = f[self._survivors]
        else:
            fs = f
        if self._uniform:
            end = float(fs.max())
            for t in self._uniform_steps:
                end += t
            fs = np.full(len(fs), end)
        else:
            for s, t in self._butterfly:
                v = fs.reshape(-1, 2, s)
                fs = (np.maximum(v[:, 0], v[:, 1])[:, None, :] + t).reshape(-1)
        if self._fold is None:
            return fs
        f[self._survivors] = fs
        self._exchange(f, *self._fold)
        return f

    @staticmethod
    def _exchange(f, a, b, t) -> None:
        done = np.maximum(f[a], f[b]) + t
        f[a] = done
        f[b] = done

    def recurrence(self, launch: np.ndarray) -> np.ndarray:
        """The exchanges one by one with fancy indexing (the slow form, for the tests)."""
        f = checked_launch(launch, self.world_size).copy()
        for a, b, t in self._steps:
            self._exchange(f, a, b, t)
        return f

    def uniform_time(self) -> float:
        """Closed form for simultaneous launch: sum over steps of the step's slowest pair
        (with degraded links, the kernel's finish for simultaneous launch)."""
        if self._degraded:
            return float(self.finish_times(np.zeros(self.world_size)).max())
        return float(sum(t.max() for _, _, t in self._steps))


def _distances(p2: int) -> list:
    """Partner distances of the butterfly over p2 positions: halving 1, 2, 4, ..., then back."""
    levels = p2.bit_length() - 1
    return [1 << s for s in range(levels)] + [1 << s for s in reversed(range(levels))]


ALGORITHM = Algorithm(NAME, ("all_reduce",), HalvingDoublingKernel, "recursive halving then doubling (Rabenseifner)")
