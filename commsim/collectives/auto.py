"""``auto``: pick the fastest all-reduce algorithm per message size, as NCCL's tuner does.

NCCL (src/graph/tuning.cc, ncclTopoGetAlgoTime and the selection in enqueue.cc) estimates a
time for every enabled (algorithm, protocol) pair from its cost model and runs the fastest.
Here the estimates are this package's closed forms (or, with an NCCL model, that model's
times; see :mod:`commsim.collectives.nccl_model`). Ties go to the earlier candidate.
"""

from __future__ import annotations

import numpy as np

from commsim.collectives import halving_doubling, hierarchical, reduce_broadcast, ring, tree
from commsim.network.fabric import Fabric

NAME = "auto"
COLLECTIVE = "all_reduce"

CANDIDATES = {m.NAME: m for m in (ring, tree, hierarchical, halving_doubling, reduce_broadcast)}


def choose(fabric: Fabric, size: float) -> tuple[str, float]:
    """(name, closed-form time) of the fastest candidate for ``size`` bytes."""
    best = None
    for name, module in CANDIDATES.items():
        t = module.time(fabric, size)
        if best is None or t < best[1]:
            best = (name, t)
    return best


def time(fabric: Fabric, size: float) -> float:
    """The fastest candidate's closed-form time."""
    return choose(fabric, size)[1]


def finish_times(fabric: Fabric, launch: np.ndarray, size: float) -> np.ndarray:
    """Finish times of the algorithm ``choose`` picks for this size (chosen on the uniform
    closed form, as NCCL chooses before it knows who is late)."""
    return CANDIDATES[choose(fabric, size)[0]].finish_times(fabric, launch, size)
