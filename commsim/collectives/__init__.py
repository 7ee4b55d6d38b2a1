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

import numpy as np

from commsim.collectives import auto, halves, halving_doubling, hierarchical, reduce_broadcast, ring, tree
from commsim.collectives.busbw import algbw, busbw, busbw_factor
from commsim.network.fabric import Fabric, flat


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


def algorithms_for(model: str = "alpha-beta") -> tuple:
    """Algorithm names a cost model covers, in display order (``--algorithm all``)."""
    if model == "alpha-beta":
        return tuple(ALGORITHMS)
    from commsim.collectives.nccl_model import SUPPORTED

    return tuple(name for name in ALGORITHMS if name in SUPPORTED)


def table(names, fabric: Fabric, sizes, model: str = "alpha-beta") -> list[dict]:
    """nccl-tests-style rows, one per (size, algorithm): ``size`` (bytes), ``algorithm``,
    ``time_s``, ``algbw`` and ``busbw`` (bytes/s, nccl-tests convention for the algorithm's
    collective), ``chosen`` (what runs: auto's pick, or NCCL's algorithm/protocol under an NCCL
    model) and ``fastest`` (True on the quickest all-reduce of each size). For
    ``commsim collective --algorithm NAME|all``."""
    from commsim.collectives.kernels import collective_time
    from commsim.collectives.nccl_model import MODELS, SUPPORTED, NcclModel

    names = list(names)
    for name in names:
        get(name)
        if model != "alpha-beta" and name not in SUPPORTED:
            raise ValueError(f"collective model {model} covers algorithms {', '.join(algorithms_for(model))}; got {name!r}")
    nccl = NcclModel.named(model) if model in MODELS else None
    rows = []
    for size in sizes:
        group = []
        for name in names:
            alg = get(name)
            t = collective_time(name, fabric, size, model)
            if nccl is not None:
                algo, collective = SUPPORTED[name]
                a, p, _ = nccl.choose(fabric, size, collective, algo)
                chosen = f"{a}/{p}"
            else:
                chosen = auto.choose(fabric, size)[0] if name == "auto" else name
            group.append({"size": int(size), "algorithm": name, "time_s": t, "algbw": algbw(size, t),
                          "busbw": busbw(alg.COLLECTIVE, size, t, fabric.world_size), "chosen": chosen})
        reducing = [r["time_s"] for r in group if get(r["algorithm"]).COLLECTIVE == "all_reduce"]
        best = min(reducing) if reducing else None
        for r in group:
            r["fastest"] = get(r["algorithm"]).COLLECTIVE == "all_reduce" and r["time_s"] == best
        rows.extend(group)
    return rows


__all__ = ["ALGORITHMS", "ALL_REDUCE", "Fabric", "flat", "get", "uniform_time", "finish_times",
           "table", "algorithms_for", "algbw", "busbw", "busbw_factor"]
