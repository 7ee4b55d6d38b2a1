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

An algorithm's module is imported the first time its record is asked for (``REGISTRY[name]``,
:func:`selection`, :func:`make_kernel`), not with this module: a ring run needs the ring, not
the tree, auto's candidates or NCCL's tuner with its hardware presets. The names, their kinds and
the cost models are therefore written here as constants (:data:`TABLE`, :data:`COST_MODELS`);
the tests check them against what the modules declare, so they cannot drift.
"""

from __future__ import annotations

import importlib
from typing import Dict, Iterator, Mapping, Tuple

import numpy as np

from commsim.collectives.busbw import algbw, busbw
from commsim.collectives.contract import KINDS, Algorithm, Kernel, check_kind
from commsim.network.fabric import Fabric

# name -> (its module under commsim.collectives, the kinds its ALGORITHM implements), in display
# order; tests/unit/collectives/test_kernels.py checks each against the module's own record
TABLE: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "ring": ("ring", KINDS),
    "tree": ("tree", ("all_reduce",)),
    "hierarchical": ("hierarchical", ("all_reduce",)),
    "halving_doubling": ("halving_doubling", ("all_reduce",)),
    "reduce_broadcast": ("reduce_broadcast", ("all_reduce",)),
    "auto": ("auto", ("all_reduce",)),
    "nccl": ("nccl_tuner", KINDS),
}

# "alpha-beta" and the NCCL tuning models (commsim.collectives.nccl_model.MODELS, checked by the
# tests), written out so that validating a scenario's collective.model imports no NCCL model
COST_MODELS: Tuple[str, ...] = ("alpha-beta", "nccl-2.7", "nccl-2.19", "nccl-2.30")


class _Registry(Mapping):
    """``name -> Algorithm`` over :data:`TABLE`, importing an algorithm's module on first access."""

    def __init__(self, table: Dict[str, Tuple[str, Tuple[str, ...]]]) -> None:
        self._table = table
        self._loaded: Dict[str, Algorithm] = {}

    def __getitem__(self, name: str) -> Algorithm:
        alg = self._loaded.get(name)
        if alg is None:
            module, _ = self._table[name]  # KeyError for a name that is not registered
            alg = importlib.import_module(f"commsim.collectives.{module}").ALGORITHM
            self._loaded[name] = alg
        return alg

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return f"REGISTRY({', '.join(self._table)})"


REGISTRY: Mapping[str, Algorithm] = _Registry(TABLE)

HALVES = ("reduce_scatter", "all_gather")
# NCCL's own choice priced by the physical model: a user can name it, but it is no alpha-beta
# all-reduce algorithm of its own (auto does not pick among it)
PHYSICAL: Tuple[str, ...] = ("nccl",)
ALL_REDUCE: Tuple[str, ...] = tuple(name for name, (_, kinds) in TABLE.items()
                                    if "all_reduce" in kinds and name not in PHYSICAL)
ALGORITHMS: Tuple[str, ...] = ALL_REDUCE + PHYSICAL + HALVES  # what a user can name, in display order
_RING = "ring"


def _registered(name: str) -> Tuple[str, str]:
    """(registry name, kind) that a user-facing name runs, without importing anything."""
    if name in HALVES:
        return _RING, name
    if name in TABLE:
        return name, "all_reduce"
    raise ValueError(f"unknown collective algorithm {name!r}; expected one of {', '.join(ALGORITHMS)}")


def selection(name: str) -> Tuple[Algorithm, str]:
    """(algorithm, kind) that a user-facing name runs: an all-reduce algorithm, or a
    reduce-scatter / all-gather on the ring. ValueError naming the choices otherwise."""
    registered, kind = _registered(name)
    return REGISTRY[registered], kind


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
        from commsim.collectives.nccl_model import NcclKernel  # only an NCCL cost model needs it

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
    from commsim.collectives.nccl_model import NCCL_ALGORITHMS  # only an NCCL cost model needs it

    return tuple(name for name in ALGORITHMS if _registered(name)[0] in NCCL_ALGORITHMS)


def check_model(model: str) -> None:
    """ValueError unless ``model`` is one of :data:`COST_MODELS`."""
    if model not in COST_MODELS:
        raise ValueError(f"collective model must be one of {', '.join(COST_MODELS)}, got {model!r}")


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


__all__ = ["ALGORITHMS", "ALL_REDUCE", "COST_MODELS", "HALVES", "PHYSICAL", "REGISTRY", "TABLE", "algorithm_for",
           "algorithms_for", "check_model", "collective_time", "finish_times", "get", "make_kernel", "resolve",
           "selection", "table", "uniform_time"]
