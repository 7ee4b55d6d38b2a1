"""The engine's hook: one kernel object per (algorithm, model, bucket size).

The engine (commsim/sim/engine.py) builds one kernel per distinct bucket size and calls
``kernel.finish_times(launch)`` for every collective. :func:`make_kernel` returns such an
object for any algorithm of this package under either cost model:

- ``alpha-beta`` (default): the algorithm's max-plus kernel, with its dependency structure
  (a late rank delays exactly the ranks that depend on it). A ring (or ``auto`` choosing the
  ring for this size) uses the lead's O(n) closed-form evaluation :class:`commsim.collectives.ring_closed_form.RingAllReduce`;
  ``reduce_scatter`` and ``all_gather`` (half a ring, :mod:`.halves`) use its n-1-step
  counterpart :class:`commsim.collectives.ring_closed_form.RingHalf` (the same finish times as ``halves.finish_times``).
- ``nccl-2.7`` / ``nccl-2.19`` / ``nccl-2.30``: NCCL's tuning model gives one time per call
  (fastest protocol for the size); every rank finishes at max(launch) + that time.
"""

from __future__ import annotations

import numpy as np

from commsim.collectives import ALGORITHMS, auto, get
from commsim.collectives import ring as ring_module
from commsim.network.fabric import Fabric
from commsim.collectives.nccl_model import MODELS, UniformKernel
from commsim.collectives.nccl_model import collective_time as nccl_time

COST_MODELS = ("alpha-beta",) + tuple(MODELS)


class AlgorithmKernel:
    """finish_times(launch) of one algorithm for one fabric and size."""

    def __init__(self, algorithm: str, fabric: Fabric, size: float):
        self.algorithm = algorithm
        self.fabric = fabric
        self.size = float(size)
        self._module = get(algorithm)
        planned = getattr(self._module, "Kernel", None)  # precomputed structure, when the module has one
        self._planned = planned(fabric, size) if planned is not None else None

    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        if self._planned is not None:
            return self._planned.finish_times(launch)
        return self._module.finish_times(self.fabric, np.asarray(launch, dtype=float), self.size)


def resolve(algorithm: str, fabric: Fabric, size: float) -> str:
    """The algorithm that actually runs: ``auto`` becomes its choice for this size."""
    get(algorithm)
    return auto.choose(fabric, size)[0] if algorithm == "auto" else algorithm


def collective_time(algorithm: str, fabric: Fabric, size: float, model: str = "alpha-beta") -> float:
    """Seconds for one collective when all ranks launch together, under ``model``."""
    _check_model(model)
    if model == "alpha-beta":
        return get(algorithm).time(fabric, size)
    return nccl_time(model, algorithm, fabric, size)


def make_kernel(algorithm: str, fabric: Fabric, size: float, model: str = "alpha-beta"):
    """An object with ``finish_times(launch) -> per-rank finish times`` (see module docstring)."""
    _check_model(model)
    if model != "alpha-beta":
        return UniformKernel(nccl_time(model, algorithm, fabric, size))
    chosen = resolve(algorithm, fabric, size)
    if chosen == "ring":
        from commsim.collectives.ring_closed_form import RingAllReduce  # numpy only

        return RingAllReduce(ring_module.hop_times(fabric, size))
    if chosen in ("reduce_scatter", "all_gather"):
        from commsim.collectives.ring_closed_form import RingHalf  # numpy only

        return RingHalf(ring_module.hop_times(fabric, size))
    return AlgorithmKernel(chosen, fabric, size)


def _check_model(model: str) -> None:
    if model not in COST_MODELS:
        raise ValueError(f"collective model must be one of {', '.join(COST_MODELS)}, got {model!r}")


__all__ = ["ALGORITHMS", "COST_MODELS", "AlgorithmKernel", "collective_time", "make_kernel", "resolve"]
