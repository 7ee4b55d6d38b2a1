"""The registry of collective algorithms and the one way to plan a kernel.

:data:`REGISTRY` maps every algorithm's name to its :class:`commsim.collectives.contract.Algorithm`
record (name, kinds it implements, planner). :func:`make_kernel` plans a collective under a
cost model and returns a :class:`commsim.collectives.contract.Kernel`:

- ``alpha-beta`` (default): the algorithm's own planner on ``fabric.at_size(size)`` (the fabric
  priced for this size), with its dependency structure (a late rank delays exactly the ranks
  that depend on it);
- ``nccl-2.7`` / ``nccl-2.19`` / ``nccl-2.30``: NCCL's tuning model gives one time per call
  (fastest protocol for the size); every rank finishes at max(launch) + that time.

Names a user can ask for (:data:`ALGORITHMS`, ``collective.algorithm``, ``--algorithm``) are the
all-reduce algorithms plus ``reduce_scatter`` and ``all_gather``: those two collectives run as
rings (:func:`selection`), as NCCL runs them whatever algorithm its all-reduce uses.
"""

from __future__ import annotations

from typing import Dict, Tuple

from commsim.collectives import auto, halving_doubling, hierarchical, nccl_tuner, reduce_broadcast, ring, tree
from commsim.collectives.contract import Algorithm, Kernel, check_kind
from commsim.collectives.nccl_model import MODELS, NCCL_ALGORITHMS, NcclKernel
from commsim.network.fabric import Fabric

COST_MODELS: Tuple[str, ...] = ("alpha-beta",) + tuple(MODELS)

REGISTRY: Dict[str, Algorithm] = {m.ALGORITHM.name: m.ALGORITHM for m in (
    ring, tree, hierarchical, halving_doubling, reduce_broadcast, auto, nccl_tuner)}

HALVES = ("reduce_scatter", "all_gather")
# NCCL's own choice priced by the physical model: a user can name it, but it is no alpha-beta
# all-reduce algorithm of its own (auto does not pick among it)
PHYSICAL: Tuple[str, ...] = (nccl_tuner.ALGORITHM.name,)
ALL_REDUCE: Tuple[str, ...] = tuple(name for name, a in REGISTRY.items() if "all_reduce" in a.kinds and name not in PHYSICAL)
ALGORITHMS: Tuple[str, ...] = ALL_REDUCE + PHYSICAL + HALVES  # what a user can name, in display order


def selection(name: str) -> Tuple[Algorithm, str]:
    """(algorithm, kind) that a user-facing name runs: an all-reduce algorithm, or a
    reduce-scatter / all-gather on the ring. ValueError naming the choices otherwise."""
    if name in HALVES:
        return REGISTRY[ring.NAME], name
    try:
        return REGISTRY[name], "all_reduce"
    except KeyError:
        raise ValueError(f"unknown collective algorithm {name!r}; expected one of {', '.join(ALGORITHMS)}") from None


def algorithm_for(kind: str, all_reduce_algorithm: str) -> str:
    """The user-facing name a job's collective of ``kind`` runs as when its all-reduce algorithm
    is ``all_reduce_algorithm``: that algorithm for all-reduces, the ring half otherwise."""
    return all_reduce_algorithm if kind == "all_reduce" else kind


def make_kernel(algorithm: str, fabric: Fabric, size: float, model: str = "alpha-beta") -> Kernel:
    """Plan the collective ``algorithm`` (a name of :data:`ALGORITHMS`) of ``size`` bytes on
    ``fabric`` under cost ``model`` (module docstring)."""
    check_model(model)
    alg, kind = selection(algorithm)
    check_kind(alg.name, kind, alg.kinds)
    priced = fabric.at_size(size)
    if model != "alpha-beta":
        return NcclKernel(model, alg.name, kind, priced, size)
    return alg.plan(kind, priced, size)


def collective_time(algorithm: str, fabric: Fabric, size: float, model: str = "alpha-beta") -> float:
    """Seconds for one collective when all ranks launch together, under ``model``."""
    return make_kernel(algorithm, fabric, size, model).uniform_time()


def resolve(algorithm: str, fabric: Fabric, size: float) -> str:
    """The algorithm that actually runs under the alpha-beta model: ``auto`` becomes its choice."""
    return make_kernel(algorithm, fabric, size).chosen


def algorithms_for(model: str = "alpha-beta") -> tuple:
    """User-facing names a cost model covers, in display order (``--algorithm all``)."""
    if model == "alpha-beta":
        return ALGORITHMS
    return tuple(name for name in ALGORITHMS if selection(name)[0].name in NCCL_ALGORITHMS)


def check_model(model: str) -> None:
    """ValueError unless ``model`` is one of :data:`COST_MODELS`."""
    if model not in COST_MODELS:
        raise ValueError(f"collective model must be one of {', '.join(COST_MODELS)}, got {model!r}")


__all__ = ["ALGORITHMS", "ALL_REDUCE", "COST_MODELS", "HALVES", "REGISTRY", "algorithm_for", "algorithms_for",
           "check_model", "collective_time", "make_kernel", "resolve", "selection"]
