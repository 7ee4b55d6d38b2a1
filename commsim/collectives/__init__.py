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

The names below are loaded on first use (PEP 562 ``__getattr__``): the engine imports
``commsim.collectives.contract`` and ``.kernels``, and importing the package on the way must not
cost it every algorithm (the registry itself loads an algorithm's module when it is first asked
for). ``algbw``/``busbw``/``busbw_factor`` are bound here at once: ``busbw`` is also the name of
their submodule, which would otherwise shadow the function once anything imported it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict

from commsim.collectives.busbw import algbw, busbw, busbw_factor
from commsim.lazy import lazy_names

# public name -> the module that defines it (a submodule of this package, or network.fabric)
_EXPORTS: Dict[str, str] = {
    "KINDS": "commsim.collectives.contract",
    "Algorithm": "commsim.collectives.contract",
    "Kernel": "commsim.collectives.contract",
    **dict.fromkeys(("ALGORITHMS", "ALL_REDUCE", "COST_MODELS", "REGISTRY", "algorithms_for", "check_model",
                     "finish_times", "get", "make_kernel", "selection", "table", "uniform_time"),
                    "commsim.collectives.kernels"),
    "Fabric": "commsim.network.fabric",
    "flat": "commsim.network.fabric",
}

__all__ = ["ALGORITHMS", "ALL_REDUCE", "COST_MODELS", "KINDS", "REGISTRY", "Algorithm", "Fabric", "Kernel", "flat",
           "get", "make_kernel", "uniform_time", "finish_times", "table", "algorithms_for", "algbw", "busbw",
           "busbw_factor", "check_model", "selection"]


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, globals())


if TYPE_CHECKING:  # the same names, for type checkers and readers
    from commsim.collectives.contract import KINDS, Algorithm, Kernel  # noqa: F401
    from commsim.collectives.kernels import (  # noqa: F401
        ALGORITHMS,
        ALL_REDUCE,
        COST_MODELS,
        REGISTRY,
        algorithms_for,
        check_model,
        finish_times,
        get,
        make_kernel,
        selection,
        table,
        uniform_time,
    )
    from commsim.network.fabric import Fabric, flat  # noqa: F401
