"""Collective algorithms: closed forms, heterogeneous-launch kernels and busbw (numpy only).

Every algorithm module has ``NAME``, ``COLLECTIVE`` (the nccl-tests collective its busbw is
reported as), ``time(fabric, size) -> seconds`` (closed form, all ranks launching together)
and ``finish_times(fabric, launch, size) -> per-rank finish times`` for arbitrary launch times
(a vectorized max-plus kernel with the algorithm's dependency structure).

    >>> from commsim.collectives import Fabric, get, busbw
    >>> f = Fabric(nodes=4, gpus_per_node=8, intra_latency=3e-6, intra_bandwidth=450e9,
    ...            inter_latency=10e-6, inter_bandwidth=400e9)
    >>> t = get("tree").time(f, 256 * 2**20)

Sizes are bytes, times seconds, bandwidths bytes/s (per direction).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from . import auto, halves, halving_doubling, hierarchical, reduce_broadcast, ring, tree
from .busbw import algbw, busbw, busbw_factor
from .fabric import Fabric, flat


class _Half:
    """reduce_scatter / all_gather share one cost (half a ring) under two names."""

    def __init__(self, name: str):
        self.NAME = name
        self.COLLECTIVE = name
        self.time = halves.time
        self.finish_times = halves.finish_times


ALL_REDUCE = ("ring", "tree", "hierarchical", "halving_doubling", "reduce_broadcast", "auto")
ALGORITHMS: dict = {m.NAME: m for m in (ring, tree, hierarchical, halving_doubling,
                                         reduce_broadcast, auto)}
ALGORITHMS["reduce_scatter"] = _Half("reduce_scatter")
ALGORITHMS["all_gather"] = _Half("all_gather")


def get(name: str):
    """The algorithm module called ``name``; ValueError naming the choices otherwise."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown collective algorithm {name!r}; expected one of "
                         f"{', '.join(ALGORITHMS)}") from None


def uniform_time(name: str, fabric: Fabric, size: float) -> float:
    """Closed-form time of algorithm ``name`` when every rank launches together."""
    return get(name).time(fabric, size)


def finish_times(name: str, fabric: Fabric, launch, size: float) -> np.ndarray:
    """Per-rank finish times of algorithm ``name`` for per-rank launch times ``launch``."""
    launch = np.asarray(launch, dtype=float)
    if launch.shape != (fabric.world_size,):
        raise ValueError(f"launch must have shape ({fabric.world_size},), got {launch.shape}")
    return get(name).finish_times(fabric, launch, size)


def table(names, fabric: Fabric, sizes) -> list[dict]:
    """nccl-tests-style rows: one per (size, algorithm) with time, algbw and busbw, and
    ``fastest`` marking the quickest algorithm of each size (for ``commsim collective``)."""
    rows = []
    for size in sizes:
        group = []
        for name in names:
            alg = get(name)
            t = alg.time(fabric, size)
            row = {"size": int(size), "algorithm": name, "time_s": t,
                   "algbw": algbw(size, t), "busbw": busbw(alg.COLLECTIVE, size, t, fabric.world_size)}
            if name == "auto":
                row["chosen"] = auto.choose(fabric, size)[0]
            group.append(row)
        best = min(r["time_s"] for r in group)
        for r in group:
            r["fastest"] = r["time_s"] == best
        rows.extend(group)
    return rows


__all__ = ["ALGORITHMS", "ALL_REDUCE", "Fabric", "flat", "get", "uniform_time", "finish_times",
           "table", "algbw", "busbw", "busbw_factor"]
