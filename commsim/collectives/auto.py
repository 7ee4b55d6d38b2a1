"""``auto``: pick the fastest all-reduce algorithm per message size, as NCCL's tuner does.

NCCL (src/graph/tuning.cc, ncclTopoGetAlgoTime and the selection in enqueue.cc) estimates a
time for every enabled (algorithm, protocol) pair from its cost model and runs the fastest.
Here the estimates are the candidates' closed forms (:meth:`Kernel.uniform_time`; with an NCCL
model, that model's times: :mod:`commsim.collectives.nccl_model`). Ties go to the earlier
candidate. The choice is made on the simultaneous-launch estimate, as NCCL chooses before it
knows who is late; late launches then go through the chosen algorithm's own kernel.
"""

from __future__ import annotations

import numpy as np

from commsim.collectives import halving_doubling, hierarchical, reduce_broadcast, ring, tree
from commsim.collectives.contract import Algorithm, Kernel, check_kind
from commsim.network.fabric import Fabric

NAME = "auto"

CANDIDATES = tuple(m.ALGORITHM for m in (ring, tree, hierarchical, halving_doubling, reduce_broadcast))


def plan_candidates(fabric: Fabric, size: float) -> list:
    """Every candidate's all-reduce kernel for ``size`` bytes, in candidate order."""
    return [c.plan("all_reduce", fabric, size) for c in CANDIDATES]


def fastest(kernels: list) -> Kernel:
    """The kernel with the smallest simultaneous-launch time (the earlier one on a tie)."""
    best = None
    for k in kernels:
        if best is None or k.uniform_time() < best.uniform_time():
            best = k
    return best


def choose(fabric: Fabric, size: float) -> tuple[str, float]:
    """(name, closed-form time) of the fastest candidate for ``size`` bytes."""
    best = fastest(plan_candidates(fabric, size))
    return best.chosen, best.uniform_time()


class AutoKernel:
    """The fastest candidate's kernel for one fabric and size; ``chosen`` names it."""

    def __init__(self, kind: str, fabric: Fabric, size: float):
        check_kind(NAME, kind, ALGORITHM.kinds)
        self.kind, self.size, self.world_size = kind, float(size), fabric.world_size
        self.pick = fastest(plan_candidates(fabric, size))
        self.chosen = self.pick.chosen
        # the engine's late-rank decisions (commsim.collectives.maxplus.Responses) hold for the
        # pick's finish times where they are max-plus linear (the tree, halving-doubling)
        self.maxplus_linear = bool(getattr(self.pick, "maxplus_linear", False))

    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        return self.pick.finish_times(launch)

    def uniform_time(self) -> float:
        return self.pick.uniform_time()


ALGORITHM = Algorithm(NAME, ("all_reduce",), AutoKernel, "the fastest candidate for the size")
