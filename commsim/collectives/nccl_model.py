"""NCCL's own tuning model as an optional cost model (``collective.model: nccl-2.19`` etc.).

NCCL picks an algorithm and a protocol per call from a-priori estimates (src/graph/tuning.cc,
ncclTopoTuneModel and ncclTopoGetAlgoTime; constants in :mod:`.nccl_constants`, composition
paraphrased in NCCL src/graph/tuning.cc v2.19.3):

    time [us] = latency + nBytes / (1000 * algbw [GB/s])

- latency, Ring: base[Ring][p] + (nsteps - nInterSteps) intraLat + nInterSteps interLat with
  nsteps = 2(n-1), nInterSteps = 2(nodes-1) for all-reduce (n-1 and nodes-1 for reduce-scatter
  and all-gather); 2.19+: across nodes intraLat >= the network overhead (x3 for Simple);
  2.7: intraLat x 1.8 for LL across nodes. Ring/Simple all-reduce across nodes: x1.9 (2.7,
  and 2.19+ before Ampere) or x1.4 (Ampere and later) past the "plateau" size.
- latency, Tree: base[Tree][p] + 2((n/nodes - 1) intraLat + log2(nodes) interLat).
- bandwidth: busBw = channels x per-channel speed (here: the fabric's bandwidth, NVLink in one
  node, the node's network across nodes, capped by NVLink), times protocol factors and caps
  (LL 1/4 or 1/2, LL128 0.92, Tree 0.92, Tree/LL 1/3.8, per-channel maxima by architecture),
  algbw = busBw x n/nsteps for Ring, x 0.5 for Tree; Tree bandwidth x treeCorrectionFactor.
- LL128 only on NVLink with Volta/Ampere/Hopper (NCCL enables it by default only there).

What NCCL learns from its topology search and this model takes as parameters: the
architecture (``arch``), the CPU vendor (network overhead, LL caps across nodes) and the
number of channels (only the per-channel caps depend on it). Omitted on purpose: CollNet,
NVLS, PAT (need switch or single-GPU-node features), graph latencyInter (0 without a net
plugin that sets it) and Tree's ``pattern == TREE`` x0.85 (balanced-tree pattern assumed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from commsim.collectives import nccl_constants as K
from commsim.errors import InputError
from commsim.network.fabric import Fabric

ARCHS = ("Volta", "Ampere", "Hopper")


def tables_arch(model: str, gpu_arch: str) -> str:
    """The row of cost model ``model``'s tables for GPUs of generation ``gpu_arch`` (a scenario's
    ``cluster.gpu_arch``: volta, ampere, hopper, blackwell), as NCCL names it ("Hopper"). NCCL's
    tables have no Blackwell row, so such GPUs raise ValueError saying what the tables cover,
    rather than take another generation's price; callers name the key and say what prices it."""
    arch = gpu_arch.capitalize()
    if arch not in ARCHS:
        raise ValueError(f"the {model} cost model has tables for {', '.join(a.lower() for a in ARCHS)} "
                         f"GPUs, got {gpu_arch}")
    return arch
COMPUTE_CAPABILITY = {"Volta": 70, "Ampere": 80, "Hopper": 90}
MODELS = {"nccl-2.7": "2.7", "nccl-2.19": "2.19", "nccl-2.30": "2.30"}


def log2i(x: int) -> int:
    """NCCL's integer log2: floor(log2(x)) for x >= 1, 0 for 0."""
    x, out = int(x), 0
    while x > 1:
        x >>= 1
        out += 1
    return out


@dataclass(frozen=True)
class NcclModel:
    """NCCL's cost model of one version for one kind of system."""

    version: str = "2.19"
    arch: str = "Hopper"
    cpu: str = "Intel"
    channels: Optional[int] = None

    def __post_init__(self):
        if self.version not in K.VERSIONS:
            raise ValueError(f"NCCL model version must be one of {', '.join(K.VERSIONS)}, got {self.version!r}")
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {', '.join(ARCHS)}, got {self.arch!r}")
        if self.cpu not in K.NET_OVERHEAD_US:
            raise ValueError(f"cpu must be one of {', '.join(K.NET_OVERHEAD_US)}, got {self.cpu!r}")

    @classmethod
    def named(cls, model: str, **kw) -> "NcclModel":
        """``nccl-2.7`` / ``nccl-2.19`` / ``nccl-2.30``."""
        try:
            return cls(version=MODELS[model], **kw)
        except KeyError:
            raise ValueError(f"collective model must be alpha-beta or one of {', '.join(MODELS)}, got {model!r}") from None

    # -- inputs derived from the fabric ----------------------------------------------------
    def n_channels(self, fabric: Fabric) -> int:
        """Channels NCCL would open: the given number, else 2 per NIC across nodes when the NIC
        count is known, else 16 on NVLink/NVSwitch and 2 on PCIe (typical NCCL_DEBUG=INFO
        counts; an assumption)."""
        if self.channels:
            return int(self.channels)
        if fabric.nodes > 1 and fabric.nics_per_node:
            return max(2, 2 * fabric.nics_per_node)
        return 16 if _intra_hw(fabric) == "NVLINK" else 2

    # -- the model ---------------------------------------------------------------------------
    def latency_us(self, fabric: Fabric, algorithm: str, protocol: str, collective: str, size: float) -> float:
        """NCCL's latency estimate (us) of one (algorithm, protocol)."""
        c = K.VERSIONS[self.version]
        p = K.PROTOCOLS.index(protocol)
        n, nodes = fabric.world_size, fabric.nodes
        intra = c["hw_lat"][_intra_hw(fabric)][algorithm][p]
        inter = c["hw_lat"]["NET"][algorithm][p]
        base = c["base_lat"][algorithm][p]
        if self.version == "2.7" and nodes > 1 and protocol == "LL":
            intra *= 1.8
        if algorithm == "Tree":
            return base + 2 * ((n // nodes - 1) * intra + log2i(nodes) * inter)
        if self.version == "2.30" and fabric.gpus_per_node == 1:
            inter = c["hw_lat"]["NET"]["Tree"][p]  # ppn == 1: "latencies are fully exposed"
        if self.version != "2.7" and nodes > 1:
            overhead = K.NET_OVERHEAD_US[self.cpu] * (3 if protocol == "Simple" else 1)
            intra = max(intra, overhead)
        steps, inter_steps = _steps(collective, n, nodes)
        lat = base + (steps - inter_steps) * intra + inter_steps * inter
        if protocol == "Simple" and collective == "all_reduce" and nodes > 1:
            if self.version == "2.7":
                if size >= n / 16 * 65536:
                    lat *= 1.9
            elif size / (self.n_channels(fabric) * n) >= 64:
                lat *= 1.9 if COMPUTE_CAPABILITY[self.arch] < 80 else 1.4
        return lat

    def bus_bandwidth_gbs(self, fabric: Fabric, algorithm: str, protocol: str, collective: str) -> float:
        """NCCL's bus bandwidth estimate (GB/s) before the tree correction factor."""
        c = K.VERSIONS[self.version]
        nodes, ppn, ch = fabric.nodes, fabric.gpus_per_node, self.n_channels(fabric)
        if protocol == "LL128" and not (_intra_hw(fabric) == "NVLINK"):
            return 0.0  # NCCL enables LL128 by default only on NVLink
        slow_intra, slow_inter = fabric.min_scales()  # a ring or tree runs at its slowest link
        intra, inter = fabric.intra_bandwidth * slow_intra, fabric.inter_bandwidth * slow_inter
        bw = (intra if nodes == 1 else min(intra, inter)) / 1e9
        a = ARCHS.index(self.arch)
        col = 0 if nodes == 1 else 1 if nodes == 2 else 2
        if self.version == "2.7":
            if self.arch == "Ampere":
                bw = min(bw, 235.0)
            ll128_cap = c["ll128_max_bw_per_ch"][collective] * ch
            if algorithm == "Ring":
                if protocol == "LL":
                    bw *= 1 / 4 if (nodes > 1 or collective == "all_reduce") else 1 / 3
                elif protocol == "LL128":
                    bw = min(bw * (0.7 if ppn < 2 else 0.92), ll128_cap)
                return bw
            sm80_ll128 = self.arch == "Ampere" and protocol == "LL128"
            max_tree = (105.0 if sm80_ll128 else 80.0) if nodes > 2 else (130.0 if sm80_ll128 else 110.0)
            bw = min(bw * 0.9, max_tree)
            if protocol == "LL":
                bw *= 1 / 3.8
            elif protocol == "LL128":
                bw = min(bw * (7 / 9 if nodes == 1 else 0.915), ll128_cap * 7 / 9)
            return bw
        ll_row = a if nodes == 1 else (1 if self.cpu == "AMD" else 0)
        ll_max = c["ll_max_bws"][ll_row][col]
        if algorithm == "Ring":
            if protocol == "LL":
                factor = 0.5 if self.version == "2.30" else (1 / 4 if (nodes > 1 or collective == "all_reduce") else 1 / 3)
                bw = min(ll_max, bw * factor)
            elif protocol == "LL128":
                factor = 0.92 if (self.version == "2.30" or ppn >= 2) else 0.7
                bw = min(bw * factor, ch * c["per_ch_max_ring_ll128"][a][col])
            return bw
        bw = min(bw * 0.92, ch * c["per_ch_max_tree"][a][col])
        if protocol == "LL":
            bw = min(bw / 3.8, ll_max)
        elif protocol == "LL128":
            bw = min(bw * (7 / 9 if nodes == 1 else 120 / 128), ch * c["per_ch_max_tree_ll128"][a][col])
        return bw

    def algo_bandwidth_gbs(self, fabric: Fabric, algorithm: str, protocol: str, collective: str, size: float) -> float:
        """algbw (GB/s) NCCL assumes for this size: busBw x ratio (x tree correction)."""
        bw = self.bus_bandwidth_gbs(fabric, algorithm, protocol, collective)
        n = fabric.world_size
        if algorithm == "Ring":
            steps, _ = _steps(collective, n, fabric.nodes)
            return bw * n / steps
        bw *= 0.5
        table = K.VERSIONS[self.version]["tree_correction"][protocol]
        log_size = log2i(int(size) >> 6)
        if 0 <= log_size < len(table):
            bw *= table[log_size]
        return bw

    def estimate(self, fabric: Fabric, algorithm: str, protocol: str, size: float,
                 collective: str = "all_reduce") -> float:
        """Seconds NCCL expects (algorithm, protocol) to take; inf where it is not available."""
        if fabric.world_size == 1:
            return 0.0
        if algorithm == "Tree" and collective != "all_reduce":
            return math.inf
        bw = self.algo_bandwidth_gbs(fabric, algorithm, protocol, collective, size)
        if bw <= 0:
            return math.inf
        us = self.latency_us(fabric, algorithm, protocol, collective, size) + size / (1000.0 * bw)
        return us * 1e-6

    def estimates(self, fabric: Fabric, size: float, collective: str = "all_reduce") -> dict:
        """{(algorithm, protocol): seconds} for every pair."""
        return {(a, p): self.estimate(fabric, a, p, size, collective) for a in K.ALGORITHMS for p in K.PROTOCOLS}

    def choose(self, fabric: Fabric, size: float, collective: str = "all_reduce",
               algorithm: Optional[str] = None) -> tuple[str, str, float]:
        """(algorithm, protocol, seconds) of the fastest pair, optionally for one algorithm only."""
        best = None
        for (a, p), t in self.estimates(fabric, size, collective).items():
            if algorithm is not None and a != algorithm:
                continue
            if best is None or t < best[2]:
                best = (a, p, t)
        return best


def _intra_hw(fabric: Fabric) -> str:
    return "NVLINK" if fabric.intra_kind in ("nvswitch", "nvlink") else "PCI"


def _steps(collective: str, n: int, nodes: int) -> tuple[int, int]:
    if collective == "all_reduce":
        return 2 * (n - 1), 2 * (nodes - 1)
    if collective in ("reduce_scatter", "all_gather"):
        return n - 1, nodes - 1
    raise ValueError(f"NCCL model covers all_reduce, reduce_scatter and all_gather, not {collective!r}")


# algorithms of this package NCCL's model covers -> NCCL's algorithm (None: the fastest, NCCL's own choice)
NCCL_ALGORITHMS = {"ring": "Ring", "tree": "Tree", "auto": None}


def nccl_algorithm(model: str, algorithm: str, kind: str) -> Optional[str]:
    """NCCL's algorithm for this package's ``algorithm`` and collective ``kind``; ValueError
    for what the model does not cover (NCCL runs reduce-scatter and all-gather as rings)."""
    if algorithm not in NCCL_ALGORITHMS:
        raise ValueError(f"collective model {model} covers algorithms {', '.join(NCCL_ALGORITHMS)}; "
                         f"got {algorithm!r} (use model alpha-beta)")
    nccl = NCCL_ALGORITHMS[algorithm]
    if kind != "all_reduce" and nccl == "Tree":
        raise ValueError(f"collective model {model}: NCCL's Tree implements all_reduce only, not {kind}")
    return nccl


class NcclKernel:
    """A collective under NCCL model ``model`` (nccl-2.7 / nccl-2.19 / nccl-2.30): the fastest
    protocol (and, for ``auto``, algorithm) for the size gives one time T per call, not a
    dependency structure, so every rank finishes at max(launch) + T: a late rank delays
    everyone by its lateness. ``chosen`` is NCCL's ``Algorithm/Protocol``."""

    def __init__(self, model: str, algorithm: str, kind: str, fabric: Fabric, size: float, **kw):
        algo = nccl_algorithm(model, algorithm, kind)
        if "arch" not in kw:  # the fabric's GPUs (a scenario's cluster.gpu_arch) pick the tables
            try:
                kw["arch"] = tables_arch(model, fabric.gpu_arch)
            except ValueError as err:
                raise InputError("scenario", "cluster.gpu_arch",
                                 f"{err} (collective.algorithm: nccl prices it)") from None
        a, p, seconds = NcclModel.named(model, **kw).choose(fabric, size, kind, algo)
        self.kind, self.size, self.world_size = kind, float(size), fabric.world_size
        self.chosen = f"{a}/{p}"
        self.seconds = float(seconds)

    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        launch = np.asarray(launch, dtype=float)
        return np.full(launch.shape, launch.max() + self.seconds)

    def uniform_time(self) -> float:
        return self.seconds
