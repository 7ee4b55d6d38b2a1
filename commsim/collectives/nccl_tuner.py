"""NCCL's collectives as NCCL runs them, priced from a physical :class:`System`: the plan and the
kernel.

Two models share one structure (NVIDIA/nccl src/graph/tuning.cc ``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime``, src/enqueue.cc ``topoGetAlgoInfo``):

- :func:`~commsim.collectives.nccl.estimate.nccl_estimate_us`: NCCL's own a-priori estimate, a
  port of tuning.cc with its constants (:data:`~commsim.collectives.nccl_constants.NCCL_TABLES`).
  NCCL picks the (algorithm, protocol) with the smallest estimate, so this decides *what runs*,
  never how long it takes.
- :func:`~commsim.collectives.nccl.physical.physical_time_us`: the time of a given (algorithm,
  protocol), from the system's physical constants (link bandwidths and hop latencies per level,
  NICs, tiers, protocol efficiencies and per-channel ceilings). These are what a calibration fits
  and what transfers across scale.

:func:`plan` builds the per-(kind, system, scale) table once, of the pairs NCCL can run
(:func:`~commsim.collectives.nccl.runnable.runnable`) that an NCCL_ALGO / NCCL_PROTO style
selection keeps; :class:`Plan` evaluates many sizes at once with numpy. :class:`PhysicalKernel`
(the registry's ``nccl``) is one collective of a fabric priced by that plan. Sizes are nccl-tests
``size`` bytes (AG/RS: the whole gathered buffer). Times in us.

The models are in :mod:`commsim.collectives.nccl`, each module importing only those above it:
:mod:`~commsim.collectives.nccl.scale` (release tables, protocol constants, :class:`Scale`),
:mod:`~commsim.collectives.nccl.runnable` (which pairs can run),
:mod:`~commsim.collectives.nccl.graph` (NCCL's topology search: speeds, ring graph, channels),
:mod:`~commsim.collectives.nccl.simple` (the Simple protocol's steps, slices, rendezvous, loops),
:mod:`~commsim.collectives.nccl.nvls` (the NVLS graph, heads, trees and pipelines),
:mod:`~commsim.collectives.nccl.estimate` (NCCL's estimate) and
:mod:`~commsim.collectives.nccl.physical` (the physical time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from commsim.collectives.contract import KINDS as CONTRACT_KINDS, Algorithm
from commsim.collectives.nccl.estimate import nccl_estimate_us
from commsim.collectives.nccl.physical import physical_time_us
from commsim.collectives.nccl.runnable import parse_selection, runnable
from commsim.collectives.nccl.scale import ALGORITHMS, KINDS, PROTOCOLS, SIMPLE, Scale, bus_factor
from commsim.errors import InputError
from commsim.network.system import System, system_of_fabric


# --- the plan ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """The (algorithm, protocol) table of one (kind, system, scale), evaluated per size.

    ``choice_system`` is the system as NCCL sees it (nominal links): it picks what runs.
    ``system`` (possibly calibrated) prices it. A kernel calls :meth:`time_us` for its
    sizes; :meth:`finish_times` gives per-rank finish times of a launch vector.
    """

    kind: str
    system: System
    choice_system: System
    scale: Scale
    candidates: Tuple[Tuple[str, str], ...]
    pick: str = "nccl"

    def choose(self, sizes) -> List[Tuple[str, str]]:
        """The (algorithm, protocol) that runs at each size."""
        idx = self._choice_index(np.asarray(sizes, dtype=float))
        return [self.candidates[i] for i in idx]

    def _choice_index(self, S: np.ndarray) -> np.ndarray:
        model = nccl_estimate_us if self.pick == "nccl" else physical_time_us
        est_sys = self.choice_system if self.pick == "nccl" else self.system
        table = np.vstack([model(self.kind, a, p, S, est_sys, self.scale) for a, p in self.candidates])
        return np.argmin(table, axis=0)

    def time_us(self, sizes) -> np.ndarray:
        """Predicted time (us) of each size, with the (algorithm, protocol) NCCL would pick."""
        S = np.atleast_1d(np.asarray(sizes, dtype=float))
        idx = self._choice_index(S)
        table = np.vstack([physical_time_us(self.kind, a, p, S, self.system, self.scale) for a, p in self.candidates])
        return table[idx, np.arange(S.size)]

    def busbw_GBps(self, sizes) -> np.ndarray:
        """nccl-tests bus bandwidth of the prediction."""
        S = np.atleast_1d(np.asarray(sizes, dtype=float))
        return S / (self.time_us(S) * 1e3) * bus_factor(self.kind, self.scale.ranks)

    def finish_times(self, launch_s: Sequence[float], size_bytes: float) -> np.ndarray:
        """Per-rank finish times (s) for per-rank launch times: a collective is a barrier, so
        every rank finishes at max(launch) + T (uniform links; per-rank skew is the engine's)."""
        launch = np.asarray(launch_s, dtype=float)
        t = float(self.time_us([size_bytes])[0]) * 1e-6
        return np.full(launch.shape, launch.max() + t)


def plan(
    kind: str,
    system: System,
    nodes: int,
    gpus_per_node: int,
    *,
    choice_system: Optional[System] = None,
    algorithm: Optional[str] = None,
    protocol: Optional[str] = None,
    pick: str = "nccl",
    source: str = "collective",
) -> Plan:
    """Build the :class:`Plan` for `kind` on `nodes` x `gpus_per_node` ranks of `system`.

    `algorithm` / `protocol` restrict the choice like NCCL_ALGO / NCCL_PROTO ("ring",
    "ring,tree", "^nvls"; "LL,LL128", "^LL128"). An algorithm the topology cannot run when
    asked for by name, or a selection that leaves nothing runnable, is an InputError naming
    the key. `choice_system` is NCCL's view of the hardware (default: `system`); `pick`
    "nccl" picks by NCCL's estimate, "fastest" by the physical time.
    """
    if kind not in KINDS:
        raise InputError(source, "kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")
    if pick not in ("nccl", "fastest"):
        raise InputError(source, "pick", f"expected nccl or fastest, got {pick!r}")
    scale = Scale.of(system, nodes, gpus_per_node)
    algos = parse_selection(algorithm, ALGORITHMS, "algorithm", source)
    protos = parse_selection(protocol, PROTOCOLS, "protocol", source)
    named = algorithm is not None and str(algorithm).strip() and not str(algorithm).strip().startswith("^")
    cands = []
    reasons: Dict[str, str] = {}
    for a in algos:
        for p in protos:
            why = runnable(kind, a, p, system, scale)
            if why is None:
                cands.append((a, p))
            elif p == SIMPLE:
                reasons[a] = why  # what stops the algorithm itself, not one of its protocols
            else:
                reasons.setdefault(a, why)
    if named:
        for a in algos:
            if not any(c[0] == a for c in cands):
                raise InputError(source, "algorithm", f"{a} cannot run {kind} on {nodes} x {gpus_per_node} of {system.name}: {reasons.get(a, 'no protocol left')}")
    if not cands:
        raise InputError(source, "protocol" if protocol else "algorithm",
                         f"no algorithm/protocol left to run {kind} on {nodes} x {gpus_per_node} of {system.name}")
    return Plan(kind, system, choice_system or system, scale, tuple(cands), pick)


def predict_busbw(kind: str, system: System, nodes: int, gpus_per_node: int, sizes: Iterable[float], **kw) -> np.ndarray:
    """Shorthand: bus bandwidth (GB/s) per size."""
    return plan(kind, system, nodes, gpus_per_node, **kw).busbw_GBps(np.asarray(list(sizes), dtype=float))


# --- the kernel: NCCL's collectives priced by the physical model ------------------------------


class PhysicalKernel:
    """One collective as NCCL runs it (its (algorithm, protocol) choice per size), priced by
    :func:`physical_time_us` on the fabric's physical system
    (:func:`commsim.network.system.system_of_fabric`): a barrier, every rank finishes at
    max(launch) + T. Degraded links (``slow_link``) scale the system's bandwidths by the
    fabric's slowest port of each level, since a ring or tree runs at its slowest link.
    ``chosen`` is ``nccl:algorithm/protocol``."""

    def __init__(self, kind: str, fabric, size: float):
        self.kind, self.size, self.world_size = kind, float(size), fabric.world_size
        if fabric.world_size < 2:  # nothing to exchange, as every other kernel
            self.chosen, self.seconds = "nccl:none", 0.0
            return
        system = system_of_fabric(fabric)
        slow_intra, slow_inter = fabric.min_scales()
        if slow_intra < 1 or slow_inter < 1:
            system = system.with_constants({"intra_bw_GBps": system.intra_bw_GBps * slow_intra,
                                            "nic_bw_GBps": system.nic_bw_GBps * slow_inter}, "slow_link")
        choice = getattr(fabric, "choice_system", None) or system
        p = plan(kind, system, fabric.nodes, fabric.gpus_per_node, choice_system=choice,
                 algorithm=getattr(fabric, "nccl_algo", None), protocol=getattr(fabric, "nccl_proto", None),
                 source="collective")
        self.chosen = "nccl:" + "/".join(p.choose([size])[0])
        self.seconds = float(p.time_us([size])[0]) * 1e-6

    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        launch = np.asarray(launch, dtype=float)
        return np.full(launch.shape, launch.max() + self.seconds)

    def uniform_time(self) -> float:
        return self.seconds


def plan_kernel(kind: str, fabric, size: float) -> PhysicalKernel:
    """Planner of the registry entry ``nccl`` (see :class:`PhysicalKernel`)."""
    return PhysicalKernel(kind, fabric, size)


ALGORITHM = Algorithm(
    "nccl", CONTRACT_KINDS, plan_kernel,
    "NCCL's own algorithm/protocol choice (ring, tree, NVLS, CollNet, PAT x LL/LL128/Simple), "
    "priced by the physical model",
)
