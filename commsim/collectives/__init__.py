"""Collective algorithms: one kernel contract, one registry, numpy only.

Every algorithm (ring, tree, hierarchical, halving_doubling, reduce_broadcast, auto; the ring's
reduce-scatter and all-gather; NCCL's cost models) is planned once per (kind, size, fabric)
into a :class:`~commsim.collectives.contract.Kernel` with ``finish_times(launch)`` (per-rank
finish times for arbitrary launch times: a vectorized max-plus kernel with the algorithm's
dependency structure), ``uniform_time()`` (all ranks launching together), ``kind`` and
``chosen``. :mod:`commsim.collectives.kernels` holds the registry and :func:`make_kernel`.

    >>> from commsim.collectives import Fabric, make_kernel
    >>> f = Fabric(nodes=4, gpus_per_node=8, intra_latency=3e-6, intra_bandwidth=450e9,
    ...            inter_latency=10e-6, inter_bandwidth=400e9)
    >>> t = make_kernel("tree", f, 256 * 2**20).uniform_time()

Sizes are bytes, times seconds, bandwidths bytes/s (per direction).
"""

from __future__ import annotations

import numpy as np

from commsim.collectives.busbw import algbw, busbw, busbw_factor
from commsim.collectives.contract import KINDS, Algorithm, Kernel
from commsim.collectives.kernels import (ALGORITHMS, ALL_REDUCE, COST_MODELS, REGISTRY, algorithms_for, check_model,
                                         make_kernel, selection)
from commsim.network.fabric import Fabric, flat


def get(name: str) -> Algorithm:
    """The registered algorithm a user-facing name runs (the ring for reduce_scatter and
    all_gather); ValueError naming the choices otherwise."""
    return selection(name)[0]


def uniform_time(name: str, fabric: Fabric, size: float) -> float:
    """Closed-form time of algorithm ``name`` when every rank launches together."""
    return make_kernel(name, fabric, size).uniform_time()


def finish_times(name: str, fabric: Fabric, launch, size: float) -> np.ndarray:
    """Per-rank finish times of algorithm ``name`` for per-rank launch times ``launch``."""
    launch = np.asarray(launch, dtype=float)
    if launch.shape != (fabric.world_size,):
        raise ValueError(f"launch must have shape ({fabric.world_size},), got {launch.shape}")
    return make_kernel(name, fabric, size).finish_times(launch)


def table(names, fabric: Fabric, sizes, model: str = "alpha-beta") -> list[dict]:
    """nccl-tests-style rows, one per (size, algorithm): ``size`` (bytes), ``algorithm``,
    ``time_s``, ``algbw`` and ``busbw`` (bytes/s, nccl-tests convention for the algorithm's
    collective), ``chosen`` (what runs: auto's pick, or NCCL's algorithm/protocol under an NCCL
    model) and ``fastest`` (True on the quickest all-reduce of each size). For
    ``commsim collective --algorithm NAME|all``."""
    check_model(model)
    names = list(names)
    covered = algorithms_for(model)
    for name in names:
        selection(name)
        if name not in covered:
            raise ValueError(f"collective model {model} covers algorithms {', '.join(covered)}; got {name!r}")
    rows = []
    for size in sizes:
        group = []
        for name in names:
            k = make_kernel(name, fabric, size, model)
            t = k.uniform_time()
            # the name itself, unless something else runs (auto's pick, NCCL's algorithm/protocol)
            chosen = name if k.chosen == selection(name)[0].name else k.chosen
            group.append({"size": int(size), "algorithm": name, "time_s": t, "algbw": algbw(size, t),
                          "busbw": busbw(k.kind, size, t, fabric.world_size), "chosen": chosen,
                          "_kind": k.kind})
        reducing = [r["time_s"] for r in group if r["_kind"] == "all_reduce"]
        best = min(reducing) if reducing else None
        for r in group:
            r["fastest"] = r.pop("_kind") == "all_reduce" and r["time_s"] == best
        rows.extend(group)
    return rows


__all__ = ["ALGORITHMS", "ALL_REDUCE", "COST_MODELS", "KINDS", "REGISTRY", "Algorithm", "Fabric", "Kernel", "flat",
           "get", "make_kernel", "uniform_time", "finish_times", "table", "algorithms_for", "algbw", "busbw",
           "busbw_factor"]
