"""NCCL's collectives as NCCL runs them, priced from a physical :class:`System`.

Two models share one structure (NVIDIA/nccl src/graph/tuning.cc ``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime``, src/enqueue.cc ``topoGetAlgoInfo``):

- :func:`nccl_estimate_us`: NCCL's own a-priori estimate, a port of tuning.cc with its
  constants (:data:`NCCL_TABLES`). NCCL picks the (algorithm, protocol) with the smallest
  estimate, so this decides *what runs*, never how long it takes.
- :func:`physical_time_us`: the time of a given (algorithm, protocol), from the system's
  physical constants (link bandwidths and hop latencies per level, NICs, tiers, protocol
  efficiencies and per-channel ceilings). These are what a calibration fits and what
  transfers across scale.

Algorithms (AllReduce unless noted):

- ``ring`` (also AllGather/ReduceScatter): 2(n-1) steps (n-1 for AG/RS), of which 2(D-1)
  (D-1) cross the network, D network nodes. Bus bandwidth = the slowest level: the GPU's
  intra-node bandwidth, or the node's NICs in use (one NIC per searched channel, at most the
  NICs near the GPUs the job uses; the duplicated channels share them, :func:`nics_driven`).
- ``tree``: NCCL's double binary tree across nodes with an intra-node chain. Each GPU moves
  2S through its node links; a node moves S through its NICs when D = 2 (each node's data
  crosses the network once, which is why 2-node busbw exceeds the NIC rate) and 2S when
  D > 2. Latency 2((L-1) h_intra + h h_net), h the height of the btree NCCL connects
  (:func:`nvls_tree_height`; NCCL's estimate, the pick, uses log2i(D)).
- ``nvls``: NVSwitch multicast/in-switch reduction (Hopper+ with NVSwitch); one node, or
  several with CollNet. ``nvls_tree``: NVLS inside the node, tree across nodes, its chunks
  pipelined through the tree NCCL connects (:func:`nvls_tree_pipeline_us`).
- ``collnet_direct`` / ``collnet_chain``: in-network reduction (SHARP): a node's data
  crosses the network once per direction at any node count.
- ``pat`` (AllGather/ReduceScatter, one GPU per node, NCCL >= 2.23): Bruck-like
  log-latency algorithm.

Protocols: ``LL`` (8-byte lines with a 4-byte flag: half the bandwidth, lowest latency),
``LL128`` (128-byte lines with an 8-byte flag: 120/128), ``Simple`` (full bandwidth,
fences and flags per chunk: highest per-hop latency).

Small sizes use fewer channels (enqueue.cc ``topoGetAlgoInfo``: while nBytes < nc * nThreads
* threadThreshold, nc--): the physical model applies that reduction to the per-channel
ceilings and to the NICs in use (a channel drives one NIC); NCCL's own estimate does not,
which is one reason it is too fast at mid sizes across nodes.

Where the network plugin sends long messages by rendezvous (:attr:`System.net_rdzv_threshold_bytes`,
libfabric CXI), a Simple ring step across nodes lasts at least its slices' rendezvous costs, which
the other slice's transfer overlaps (:func:`net_rendezvous_step_us`), and a Simple tree pays one per
chunk; NCCL's estimate knows nothing of it.

Sizes are nccl-tests ``size`` bytes (AG/RS: the whole gathered buffer). Times in us.
:func:`plan` builds the per-(kind, system, scale) table once; :class:`Plan` evaluates many
sizes at once with numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from commsim.collectives.contract import KINDS as CONTRACT_KINDS, Algorithm
from commsim.collectives.nccl_constants import (
    BLACKWELL_RELEASES, MAXCHANNELS, NCCL_TABLES, NET_OVERHEAD_BY_CPU, PCI_BW_PER_LINE, SM90_SPEED_ARRAY_INTER,
    SM90_SPEED_ARRAY_INTER_2_18, SM90_SPEED_ARRAY_INTRA, SM100_SPEED_ARRAY_INTER, SM100_SPEED_ARRAY_INTRA,
    SM_NVLINK_BW, SPEED_ARRAY_INTER, SPEED_ARRAY_INTRA,
)
from commsim.collectives.nccl_constants import (
    NVLS_CHUNK_BYTES, NVLS_NCHANNELS_SM90, NVLS_NCHANNELS_SM100, NVLS_NCHANNELS_SM100_NVL, NVLS_TREE_MAX_CHUNK_BYTES,
    NVLS_TREE_SMALL_CHUNK_NODES,
)
from commsim.errors import InputError
from commsim.network.system import NVLINK_MESHES, System, ring_links, system_of_fabric

KINDS = ("all_reduce", "all_gather", "reduce_scatter")
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("LL", "LL128", "Simple")  # as in nccl_constants (NCCL's protocol order)
LL, LL128, SIMPLE = PROTOCOLS

# Payload fraction of each protocol's line format (src/device/prims_ll.h, prims_ll128.h):
# LL stores 4 data bytes + 4 flag bytes per 8; LL128 120 data bytes per 128-byte line.
PROTO_EFFICIENCY = {LL: 0.5, LL128: 120.0 / 128.0, SIMPLE: 1.0}

# Threads per channel and bytes per thread before another channel is worth it
# (tuning.cc maxThreads / NCCL_*_THREAD_THRESHOLD in src/include/comm.h and device.h:
# NCCL_SIMPLE_MAX_NTHREADS 512, NCCL_LL_MAX_NTHREADS 512, NCCL_LL128_MAX_NTHREADS 640;
# thresholds LL 8 (x nRanks for rings), LL128 8, Simple 64).
MAX_THREADS = {LL: 512, LL128: 640, SIMPLE: 512}
THREAD_THRESHOLD = {LL: 8, LL128: 8, SIMPLE: 64}

_HW = ("NVLINK", "PCI", "NET")


# getNetOverhead (tuning.cc): per network step, us, by CPU; x3 for Simple.
NET_OVERHEAD_US = NET_OVERHEAD_BY_CPU
PCI_BW = 12.0  # topo.h PCI_BW (GB/s): rings at or below it get 256 Simple threads


def nccl_table(version: str) -> dict:
    """The constants of the NCCL release line a version string belongs to: "2.18" for 2.18.3
    and later 2.18 releases (and "2.18" without a patch level: 2.18.1-2.18.2 had 2.19's Tree
    latencies), "2.19" for other releases before 2.20 (the 2.19 tables), "2.20" for 2.20-2.22
    (the later tables with the Tree/Simple latencies 2.23 lowered), and from 2.23 on the "2.30"
    tables (moved into the tuner constants struct) with the Blackwell row of the release
    ("2.23", "2.25", "2.28", "2.28.7", "2.28.9", "2.29", "2.29.7", "2.30": its LL128, tree and
    NVLS-tree ceilings changed where Hopper's did not)."""
    try:
        parts = [int(x) for x in str(version).split(".")[:3]]
        major, minor = parts[0], parts[1]
    except (ValueError, IndexError):
        raise InputError("system", "nccl_version", f"expected a version like 2.21, got {version!r}") from None
    if (major, minor) == (2, 18) and (len(parts) < 3 or parts[2] >= 3):
        return NCCL_TABLES["2.18"]
    if (2, 20) <= (major, minor) < (2, 23):
        return NCCL_TABLES["2.20"]
    if (major, minor) < (2, 20):
        return NCCL_TABLES["2.19"]
    # 2.23 on: the same tables but for the Blackwell row, which changed release by release
    # (nccl_constants.BLACKWELL_RELEASES; a version without a patch level is the line's first)
    at = (major, minor, parts[2] if len(parts) > 2 else 0)
    return NCCL_TABLES[next(key for key, first in BLACKWELL_RELEASES if at >= first)]


def _physical_table(version: str) -> dict:
    """The table whose latency ratios price a hop in :func:`physical_time_us`. The Tree/Simple
    latencies of 2.18 and of 2.20-2.22 (see :func:`nccl_table`) change what NCCL picks, not how
    long a hop takes on the hardware, so those hops are priced with the ratios of the table
    they were priced with before (2.19's, the later one's)."""
    t = nccl_table(version)
    return {id(NCCL_TABLES["2.18"]): NCCL_TABLES["2.19"], id(NCCL_TABLES["2.20"]): NCCL_TABLES["2.30"]}.get(id(t), t)


def _version_tuple(version: str) -> Tuple[int, int]:
    major, minor = (int(x) for x in str(version).split(".")[:2])
    return major, minor


def ring_ll_factor(version: str, kind: str, network_nodes: int) -> float:
    """NCCL's Ring/LL bus-bandwidth factor, which changed in 2.21 (not at the 2.20 table split):
    v2.18.5-1..v2.20.5-1 tuning.cc ``busBw * ((nNodes > 1 || coll == ncclFuncAllReduce ||
    coll == ncclFuncReduce) ? 1.0/4.0 : 1.0/3.0)``; v2.21.5-1 on ``busBw * .5``."""
    if _version_tuple(version) >= (2, 21):
        return 0.5
    return 0.25 if (network_nodes > 1 or kind == "all_reduce") else 1.0 / 3.0


# --- the scale ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    """A job's shape on a system: `nodes` hosts with `gpus_per_node` ranks each.

    ``domains`` (D) are the network's nodes: hosts, or NVLink domains of several hosts;
    ``local`` (L) ranks share one domain; ``nics`` is the NICs one domain drives.
    """

    nodes: int
    gpus_per_node: int
    ranks: int
    domains: int
    local: int
    nics: int

    @staticmethod
    def of(system: System, nodes: int, gpus_per_node: int) -> "Scale":
        system.check_scale(nodes, gpus_per_node)
        d = system.domains(nodes)
        hosts_per_domain = -(-nodes // d)
        return Scale(nodes, gpus_per_node, nodes * gpus_per_node, d,
                     nodes * gpus_per_node // d, system.nics_used(gpus_per_node) * hosts_per_domain)


def bus_factor(kind: str, ranks: int) -> float:
    """nccl-tests busbw / algbw (doc/PERFORMANCE.md): 2(n-1)/n for all-reduce, (n-1)/n for
    all-gather and reduce-scatter."""
    return 2.0 * (ranks - 1) / ranks if kind == "all_reduce" else (ranks - 1) / ranks


def _log2i(x: int) -> int:
    return int(math.floor(math.log2(x))) if x >= 1 else 0


# --- which (algorithm, protocol) pairs can run ---------------------------------------------------


def runnable(kind: str, algorithm: str, protocol: str, system: System, scale: Scale) -> Optional[str]:
    """None when NCCL can run (algorithm, protocol) for `kind` here, else why not
    (tuning.cc per-function algorithm lists and its enable rules; enqueue.cc updateCollCostTable)."""
    if kind == "all_reduce" and algorithm == "pat":
        return "PAT runs all_gather and reduce_scatter only"
    if kind != "all_reduce" and algorithm not in ("ring", "pat", "nvls", "collnet_direct"):
        return f"{algorithm} does not run {kind} (NCCL runs ring, pat, nvls, collnet_direct there)"
    if algorithm in ("nvls", "nvls_tree"):
        if not system.nvls:
            return f"NVLS needs NVSwitch multicast (system {system.name!r}: intra_kind {system.intra_kind}, nvls false)"
        if protocol != SIMPLE:
            return "NVLS runs the Simple protocol only"
        if scale.local < 2:
            return "NVLS needs at least 2 GPUs per NVLink domain"
        major, minor, patch = _release(system.nccl_version)
        if scale.local < 3 and (major, minor, patch or 0) < (2, 28, 9):
            # nvls.cc ncclNvlsInit: ``gpuCount <= 2`` turns NVLS off (v2.18.5-1 .. v2.28.7-1;
            # ``gpuCount < 2`` from v2.28.9-1)
            return f"NVLS needs more than 2 GPUs per NVLink domain before NCCL 2.28.9 (release {system.nccl_version})"
        if algorithm == "nvls_tree" and scale.domains == 1:
            return "NVLS tree needs more than one node"
        if algorithm == "nvls" and scale.domains > 1 and not system.collnet:
            return "NVLS across nodes needs CollNet (SHARP) on the fabric"
        if algorithm == "nvls" and kind != "all_reduce" and scale.domains > 1:
            return "NVLS all_gather/reduce_scatter across nodes needs CollNet one GPU per NIC"
    if algorithm in ("collnet_direct", "collnet_chain"):
        if not system.collnet:
            return f"CollNet needs in-network reduction (SHARP) on the fabric (system {system.name!r}: collnet false)"
        if protocol != SIMPLE:
            return "CollNet runs the Simple protocol only"
        if scale.domains < 2:
            return "CollNet needs more than one node"
        if algorithm == "collnet_direct" and system.intra_kind != "nvswitch":
            return "CollNet Direct needs NVSwitch"
        if scale.local > 8:
            return "CollNet needs at most 8 GPUs per node"
        if kind != "all_reduce":
            return "CollNet all_gather/reduce_scatter is not modelled"
    if algorithm == "pat":
        if not nccl_table(system.nccl_version)["pat"] or _version_tuple(system.nccl_version) < (2, 23):
            return "PAT needs NCCL 2.23 or later"
        if scale.local != 1 or scale.domains < 2:
            return "PAT needs one GPU per node"
        if protocol != SIMPLE:
            return "PAT runs the Simple protocol only"
    if protocol == LL128:
        # tuning.cc: LL128 on by default only with NVLink inside the node (typeIntra <= NVB) and,
        # before Hopper, network paths up to PXB; not on PCIe-only nodes.
        if system.intra_kind not in ("nvswitch", "nvlink") and scale.local > 1:
            return "LL128 is enabled only over NVLink"
        if system.intra_kind not in ("nvswitch", "nvlink") and scale.local == 1 and system.compcap_index < 2:
            return "LL128 is enabled only over NVLink"
        why = _ll128_net_path(system, scale)
        if why:
            return why
    return None


# NCCL's PATH_* order (src/graph/topo.h, unchanged 2.18-2.30) for the GPU-NIC path.
_PATH_RANK = {"pix": 3, "pxb": 4, "pxn": 5, "phb": 6, "sys": 7}


def _ll128_net_path(system: System, scale: Scale) -> Optional[str]:
    """Why LL128 is off across nodes for this GPU-NIC path, or None. tuning.cc (v2.18.5-1 line
    285, v2.21.5-1 line 308, same through 2.30): ``pEnable &= (graphs[a]->typeInter <= PATH_PXB
    || (minCompCap >= 90 && graphs[a]->typeInter <= PATH_PXN))``; an inter-node graph's
    typeInter is the GPU-NIC path it had to relax to (search.cc ncclTopoCompute), a 1-node
    graph keeps PATH_PIX."""
    if scale.domains < 2:
        return None
    path = net_path_seen(system)
    rank = _PATH_RANK[path]
    if rank <= _PATH_RANK["pxb"] or (system.compcap_index >= 2 and rank <= _PATH_RANK["pxn"]):
        return None
    why = " (the socket transport has no GPUDirect RDMA: its path runs through the CPU)" if path != system.nic_path else ""
    return f"LL128 across nodes needs a GPU-NIC path up to PXB (PXN on Hopper+); {system.name} has {path.upper()}{why}"


# --- NCCL's internal TCP socket transport (src/transport/net_socket.cc) -------------------------

# ncclNetSocketGetProperties (v2.18.5-1 .. v2.30.7-1): ``props->latency = 0; // Not set``
SOCKET_REPORTED_LATENCY_US = 0.0


def net_path_seen(system: System) -> str:
    """The GPU-NIC path NCCL's graphs see (their typeInter). NCCL's socket transport reports
    ``ptrSupport = NCCL_PTR_HOST`` (no GPUDirect RDMA), and paths.cc then diverts every
    GPU-NIC path through the GPU's local CPU (v2.18.5-1 .. v2.30: ``// We cannot use GPU Direct
    RDMA, divert all traffic through the CPU local to the GPU``, addInterStep, whose type is at
    least the GPU-CPU path's PATH_PHB); RDMA transports keep the board's path (System.nic_path)."""
    if system.transport == "socket" and _PATH_RANK[system.nic_path] < _PATH_RANK["phb"]:
        return "phb"
    return system.nic_path


def parse_selection(text: Optional[str], names: Sequence[str], key: str, source: str) -> Tuple[str, ...]:
    """NCCL_ALGO / NCCL_PROTO style selection: "ring,tree" keeps those, "^ll128" drops those,
    None or "" keeps all. Case-insensitive; an unknown name is an InputError naming `key`."""
    if text is None or str(text).strip() == "":
        return tuple(names)
    s = str(text).strip()
    negate = s.startswith("^")
    items = [t.strip() for t in s.lstrip("^").split(",")]
    if not all(items):  # "ring," or "ring,,tree": a typo, as the command-line lists treat it
        raise InputError(source, key, f"expected a comma-separated list without empty items, got {s!r}")
    lower = {n.lower(): n for n in names}
    chosen = []
    for it in items:
        if it.lower() not in lower:
            raise InputError(source, key, f"unknown name {it!r} (expected {', '.join(names)}, comma-separated, optionally after ^)")
        chosen.append(lower[it.lower()])
    if negate:
        return tuple(n for n in names if n not in chosen)
    return tuple(n for n in names if n in chosen)


# --- NCCL's a-priori estimate (port of tuning.cc) -----------------------------------------------


def nccl_channels(system: System, scale: Scale) -> int:
    """The channels a ring or tree collective runs on (comm->nChannels): the ring search's channels
    (:func:`ring_graph`) doubled by connect.cc ncclTopoPostset, ``nChannels = comm->nChannels =
    std::min(MAXCHANNELS,nChannels*2)`` (v2.21.5-1 line 443, v2.30.4-1 line 453; the tree graph is
    searched for exactly the ring's count, init.cc ``treeGraph->minChannels = treeGraph->maxChannels
    = ringGraph->nChannels``, so min(tree, ring) is the ring's), then doubled again on Hopper+
    across nodes when the ring's channels are fast and few: ``if (comm->minCompCap >= 90 &&
    comm->nNodes > 1 && graphs[NCCL_ALGO_RING]->bwIntra > 45.0 && nChannels < 16)`` (v2.25.1-1 line
    466 .. v2.30.4-1 line 474; ``== 90`` before 2.25, ``2*nChannels <= MAXCHANNELS`` in place of
    ``< 16`` in 2.18-2.19). Measured: 24 on one H100 4-GPU NVLink node, 8 on two of them with 4
    NDR200 NICs each (the Snellius logs' "24 coll channels" / "8 coll channels")."""
    g = ring_graph(system, scale)
    cmax = max_channels(system.nccl_version)
    n = min(cmax, 2 * g.channels)
    major, minor = _version_tuple(system.nccl_version)
    hopper_plus = system.compcap_index >= 2 if (major, minor) >= (2, 25) else system.compcap_index == 2
    room = (2 * n <= cmax) if (major, minor) < (2, 20) else (n < 16)
    if hopper_plus and scale.domains > 1 and g.bw_intra > 45.0 and room:
        n = min(cmax, 2 * n)  # copyChannels(comm, nChannels, 2*nChannels, ...)
    return n


def nics_driven(system: System, scale: Scale) -> int:
    """Distinct NICs a domain's ring/tree channels drive: one per channel the ring search found
    (each graph channel enters and leaves through its own NIC, ``graph->inter[c*2]``), at most the
    NICs in use; the channels ncclTopoDupChannels and ncclTopoPostset add are copies
    (``memcpy(graph->inter+graph->nChannels*2, graph->inter, ...)``) on the same NICs."""
    if scale.domains < 2:
        return scale.nics
    return max(1, min(scale.nics, ring_graph(system, scale).searched))


def max_channels(version: str) -> int:
    """MAXCHANNELS of the release (src/include/device.h): 32 before 2.25, 64 from v2.25.1-1."""
    return MAXCHANNELS["2.25" if _version_tuple(version) >= (2, 25) else "2.18"]


def search_speeds_intra(compcap_index: int, version: str) -> Tuple[float, ...]:
    """The speed array ncclTopoCompute searches a one-node graph with (src/graph/search.cc, see
    :data:`~commsim.collectives.nccl_constants.SM90_SPEED_ARRAY_INTRA`): speedArrayIntra before
    Hopper, sm90SpeedArrayIntra by release on Hopper (and Blackwell before 2.25),
    sm100SpeedArrayIntra by release on Blackwell from 2.25."""
    major, minor = _version_tuple(version)
    if compcap_index < 2:
        return SPEED_ARRAY_INTRA
    if compcap_index >= 3 and (major, minor) >= (2, 25):
        return SM100_SPEED_ARRAY_INTRA["2.29" if (major, minor) >= (2, 29) else "2.27" if (major, minor) >= (2, 27) else "2.25"]
    return SM90_SPEED_ARRAY_INTRA["2.18" if (major, minor) < (2, 19) else "2.19" if (major, minor) < (2, 21) else "2.21"]


@dataclass(frozen=True)
class RingGraph:
    """The ring graph ncclTopoCompute returns (graphs[NCCL_ALGO_RING]): ``channels`` at
    ``bw_intra`` / ``bw_inter`` GB/s each (after ncclTopoDupChannels); ``searched`` the channels
    the speed search found before duplication, ``duplicated`` whether DupChannels doubled them."""

    channels: int
    bw_intra: float
    bw_inter: float
    searched: int
    duplicated: bool


def _ring_capacity(system: System, scale: Scale, speeds: TopoSpeeds, speed: float, most: int) -> int:
    """Ring channels of `speed` GB/s the links NCCL's topology sees can hold (the channel count
    ncclTopoSearchRec reaches: each channel takes `speed` from every link it crosses, each
    direction on its own, src/graph/search.cc followPath):

    - across nodes one NIC carries floor(NIC / speed) channels (a ring enters and leaves the node
      through the same NIC, crossNic off), the NICs the job's GPUs use;
    - NVSwitch (and a PCIe switch): a GPU's link carries floor(link / speed) channels on one node;
      across nodes a channel crosses L-1 of the node's L GPU links, so L/(L-1) times that;
    - direct NVLink meshes: one GPU pair's links carry floor(pair / speed) channels, a job of L
      GPUs drives L-1 pairs of each GPU (one for L = 2); the DGX-1 cube mesh drives the links
      :func:`~commsim.network.system.ring_links` finds.

    At most `most` (``ringGraph->maxChannels = MAXCHANNELS/2``)."""
    L, D = scale.local, scale.domains
    eps = 1e-9  # 8 x 48 = 384 must hold 8 channels of 48, not 7.99
    cap = most
    if D > 1:
        cap = min(cap, scale.nics * int(math.floor(speeds.nic_GBps / speed + eps)))
    if L > 1:
        total = speeds.intra_GBps
        mesh = NVLINK_MESHES.get(system.name)
        if system.intra_kind == "nvlink" and mesh is not None:
            links = ring_links(mesh, L) if L < system.gpus_per_node else sum(mesh[0])
            intra = int(math.floor(links * total / sum(mesh[0]) / speed + eps))
        elif system.intra_kind == "nvlink" and system.gpus_per_node > 2:
            pair = total / (system.gpus_per_node - 1)
            intra = (L - 1 if L > 2 else 1) * int(math.floor(pair / speed + eps))
        else:
            share = total * (L / (L - 1) if D > 1 else 1.0)
            intra = int(math.floor(share / speed + eps))
        cap = min(cap, intra)
    return max(0, cap)


def ring_graph(system: System, scale: Scale) -> RingGraph:
    """The ring graph of ncclTopoCompute (src/graph/search.cc, v2.21.5-1 lines 860-1030, the same
    structure 2.18-2.30) on the link speeds NCCL's topology gives (:func:`topo_speeds`):

    - pass 1 starts at the first speed of the array (:func:`search_speeds_intra` on one node,
      :func:`search_speeds_inter` across nodes) not above the best path (``while
      (speedArray[speedIndex] > maxBw || speedArray[speedIndex]*graph->minChannels > totalBw)``:
      maxBw the GPU-GPU path on one node, the NIC across nodes; totalBw a GPU's NVLinks or PCIe
      link) and walks down while ``speedArray[speedIndex+1]/graph->bwInter > .49``, keeping the
      most channels x speed (ncclTopoCompareGraphs; a tie keeps the faster, fewer-hop graph) and
      stopping at maxChannels ("PERFECT") or at ``nChannels*bwInter >= totalBw``;
    - ncclTopoDupChannels (v2.21.5-1 lines 835-848, unchanged 2.18-2.30) doubles the channels and
      halves their speed, except ``if (graph->bwIntra < 25.0) return`` and ``if (ccMin > 80 &&
      graph->bwIntra < 50.0 && graph->nChannels > 4) return``: 8 H100 channels of 48 GB/s (one
      per 400 Gb/s NIC) stay 8;
    - pass 2 (``increase bw for Ring``) tries each faster speed with at least those channels.
    """
    speeds = topo_speeds(system)
    most = max_channels(system.nccl_version) // 2
    D = scale.domains
    ci, version = system.compcap_index, system.nccl_version
    array = search_speeds_inter(ci, version) if D > 1 else search_speeds_intra(ci, version)
    total_bw = speeds.intra_GBps
    if D > 1:
        max_bw = speeds.nic_GBps
    elif system.intra_kind == "nvlink" and system.gpus_per_node > 2 and NVLINK_MESHES.get(system.name) is None:
        max_bw = speeds.intra_GBps / (system.gpus_per_node - 1)  # one GPU pair's links
    elif system.intra_kind == "nvlink" and NVLINK_MESHES.get(system.name) is not None:
        mesh = NVLINK_MESHES[system.name]
        max_bw = max(max(r) for r in mesh) * speeds.intra_GBps / sum(mesh[0])
    else:
        max_bw = speeds.intra_GBps
    idx = 0
    while (array[idx] > max_bw or array[idx] > total_bw) and idx < len(array) - 1:
        idx += 1
    best_c, best_s = 0, 0.0
    while True:
        s = array[idx]
        c = _ring_capacity(system, scale, speeds, s, most)
        if c > 0 and c * s > best_c * best_s:
            best_c, best_s = c, s
        if c == most or (best_c and best_c * best_s >= total_bw):
            break
        if idx < len(array) - 1 and (best_c == 0 or array[idx + 1] / best_s > 0.49):
            idx += 1
            continue
        break
    if best_c == 0:  # "Could not find a path ... falling back to simple order"
        return RingGraph(1, 0.1, 0.1, 1, False)
    searched, channels, bw = best_c, best_c, best_s
    dup = not (bw < 25.0 or (ci >= 2 and bw < 50.0 and channels > 4))
    if dup:
        doubled = min(2 * channels, most)
        bw /= -(-doubled // channels)
        channels = doubled
    for s in sorted((x for x in array if x > bw), reverse=False):
        c = _ring_capacity(system, scale, speeds, s, most)
        if c >= channels and c * s > channels * bw:
            channels, bw = c, s
    return RingGraph(channels, bw, bw, searched, dup)


# src/include/device.h NCCL_MAX_NVLS_ARITY: at most this many NVLS heads (graph channels).
NVLS_MAX_ARITY = 32


def _release(version: str) -> Tuple[int, int, Optional[int]]:
    """(major, minor, patch) of a version string; patch None when the string has none."""
    parts = [int(x) for x in str(version).split(".")[:3]]
    return parts[0], parts[1], (parts[2] if len(parts) > 2 else None)


def search_speeds_inter(compcap_index: int, version: str) -> Tuple[float, ...]:
    """The speed array ncclTopoCompute searches inter-node graphs with (src/graph/search.cc, see
    :mod:`commsim.collectives.nccl_constants`): speedArrayInter before Hopper, sm90SpeedArrayInter
    on Hopper (and Blackwell before 2.27), sm100SpeedArrayInter by release on Blackwell from 2.27.
    A version without a patch level is the line's latest release."""
    major, minor, patch = _release(version)
    if compcap_index < 2:
        return SPEED_ARRAY_INTER
    if compcap_index >= 3 and (major, minor) >= (2, 27):
        if (major, minor) >= (2, 30):
            return SM100_SPEED_ARRAY_INTER["2.30"]
        if (major, minor) == (2, 27) and patch is not None and patch < 6:
            return SM100_SPEED_ARRAY_INTER["2.27.3" if patch < 5 else "2.27.5"]
        return SM100_SPEED_ARRAY_INTER["2.27.6"]
    return SM90_SPEED_ARRAY_INTER_2_18 if (major, minor) < (2, 19) else SM90_SPEED_ARRAY_INTER


def search_speed(compcap_index: int, version: str, available_GBps: float) -> float:
    """The speed an inter-node graph channel gets through a NIC path of `available_GBps`: the
    first entry of the search's speed array not above it (search.cc ncclTopoCompute, v2.29.2-1
    line 1101: ``while ((speedArray[speedIndex] > maxBw || ...) && speedIndex < nspeeds-1)
    speedIndex++``; the last entry when every one is above). 50 GB/s (400 Gb/s) -> 48 on Hopper."""
    speeds = search_speeds_inter(compcap_index, version)
    return next((s for s in speeds if s <= available_GBps), speeds[-1])


def search_top_speed(compcap_index: int, version: str, inter: bool) -> float:
    """The first (fastest) entry of the speed array ncclTopoCompute searches with (src/graph/search.cc
    sm90SpeedArrayIntra/Inter, sm100SpeedArrayIntra/Inter): no graph channel runs faster. Hopper
    60 (one node) / 48 (across nodes); Blackwell 90 one node from 2.25 (sm100SpeedArrayIntra,
    v2.25.1-1 line 940; before, the SM90 array's 60), across nodes the
    release's sm100SpeedArrayInter (:func:`search_speeds_inter`: 47.9 in 2.27.3, 96 from 2.27.6)."""
    if inter:
        return search_speeds_inter(compcap_index, version)[0]
    return search_speeds_intra(compcap_index, version)[0]


def nccl_nvlink_bw(compcap_index: int, version: str) -> float:
    """One NVLink's speed as NCCL's topology sets it (src/graph/topo.h ncclTopoNVLinkBw,
    SM70/SM80/SM90/SM100_NVLINK_BW): Volta (and Turing) 20, Ampere 20, Hopper 20.0 before 2.20 and
    20.6 from v2.20.3-1, Blackwell 40.0 from v2.25.1-1 and 40.1 from v2.27.5-1 (the Hopper value
    before 2.25). A version without a patch level is the line's latest release."""
    major, minor, patch = _release(version)
    if compcap_index >= 3 and (major, minor) >= (2, 25):
        older = (major, minor) < (2, 27) or ((major, minor) == (2, 27) and patch is not None and patch < 5)
        return 40.0 if older else 40.1
    if compcap_index >= 2:
        return 20.6 if (major, minor) >= (2, 20) else 20.0
    return SM_NVLINK_BW["sm80" if compcap_index == 1 else "sm70"]


@dataclass(frozen=True)
class TopoSpeeds:
    """The link speeds NCCL's topology gives (GB/s per direction): ``intra_GBps`` one GPU's
    NVLinks (or its PCIe link), ``nic_GBps`` one NIC; ``line_rates`` False where the system's
    description has no line rate and its achievable figures stand in."""

    intra_GBps: float
    nic_GBps: float
    line_rates: bool


def topo_speeds(system: System) -> TopoSpeeds:
    """What NCCL's topology code reads from the hardware (not what a collective achieves):

    - NVLink: ``count * nvlBw`` per GPU (src/graph/topo.cc ncclTopoAddNvLinks, v2.30.4-1 lines
      700-703), count = the GPU's NVLinks (:meth:`System.nvlinks_per_gpu`), nvlBw =
      :func:`nccl_nvlink_bw`: 18 x 20.6 = 370.8 GB/s on H100, 12 x 20 = 240 on A100;
    - PCIe: ``width * speed / 80`` (topo.cc ncclTopoAddPci; PCI_BW 12 for Gen3 x16): the line rate
      times :data:`~commsim.collectives.nccl_constants.PCI_BW_PER_LINE`;
    - NIC: ``mbps / 8000`` (topo.cc ncclTopoAddNet, v2.30.4-1 line 403): the line rate, 50 GB/s
      for 400 Gb/s.

    NCCL sees no switch tier or oversubscription. A description without line rates (a system
    built from a scenario's links) keeps its achievable figures."""
    intra, nic, exact = system.intra_bw_GBps, system.nic_bw_GBps, True
    links = system.nvlinks_per_gpu()
    if links is not None:
        intra = links * nccl_nvlink_bw(system.compcap_index, system.nccl_version)
    elif system.intra_kind in ("pcie_p2p", "pcie_host") and system.intra_line_GBps is not None:
        intra = round(system.intra_line_GBps * PCI_BW_PER_LINE, 1)  # 15.75 GB/s Gen3 x16 -> 12.0
    else:
        exact = False
    if system.nic_line_GBps is not None:
        nic = system.nic_line_GBps
    else:
        exact = False
    return TopoSpeeds(float(intra), float(nic), exact)


@dataclass(frozen=True)
class NvlsGraph:
    """The NVLS graph NCCL's topology search builds (its own, not the ring's): ``channels`` heads,
    ``bw_intra`` / ``bw_inter`` GB/s per channel (graphs[NCCL_ALGO_NVLS]: the NVLS and NVLS-tree
    rows of ncclTopoTuneModel both read it, init.cc ``graphs[] = {..., nvlsGraph, nvlsGraph, ...}``)."""

    channels: int
    bw_intra: float
    bw_inter: float


def nvls_graph(system: System, scale: Scale) -> NvlsGraph:
    """The NVLS graph of ncclTopoCompute (src/graph/search.cc), with the link speeds NCCL's topology
    gives as its path bandwidths (:func:`topo_speeds`; the NIC at the search's speed for it,
    :func:`search_speed`; NVLink shares not rounded to the array, like :func:`nccl_channels`):

    - heads: ``maxChannels = min(NCCL_MAX_NVLS_ARITY, GPUs)``; on one node ``minChannels =
      maxChannels`` ("pull evenly from all GPUs"), so one head per GPU; across nodes the search
      starts from the NICs and takes one head per NIC with a distinct local GPU
      (ncclTopoSearchRecNet: "NVLS search only tries to find NIC:GPU combinations"), so
      min(GPUs, NICs);
    - bwIntra: every channel pulls from every GPU through the NVSwitch and the head's paths
      count twice (ncclTopoSearchTryNvls: ``d0 == g ? 2 : 1``), so a head GPU's NVLink carries
      (channels + 1) x bwIntra; across nodes pass 1 searches with bwIntra = bwInter, so a channel
      also stops at its head's NIC (``net->net.bw < bw``); never above the search's fastest speed
      (:func:`search_top_speed`);
    - bwInter: pass 2 raises it alone with the channels fixed, while ``bwInter < 2 * bwIntra``
      ("graph->pattern == NCCL_TOPO_PATTERN_NVLS && tmpGraph.bwInter < tmpGraph.bwIntra * 2"),
      up to the head's NIC and the fastest speed; on one node no NIC checks it, so it ends at
      min(fastest speed, 2 x bwIntra) (tuning.cc reads it there too: ``min(intraBw, interBw)``).
    """
    L, D = scale.local, scale.domains
    speeds = topo_speeds(system)
    nvl = speeds.intra_GBps
    top = search_top_speed(system.compcap_index, system.nccl_version, inter=D > 1)
    if D == 1:
        heads = min(NVLS_MAX_ARITY, L)
        bw_intra = min(nvl / (heads + 1), top)
        return NvlsGraph(heads, bw_intra, min(top, 2.0 * bw_intra))
    heads = max(1, min(NVLS_MAX_ARITY, L, scale.nics))
    nic = min(search_speed(system.compcap_index, system.nccl_version, speeds.nic_GBps), top)
    bw_intra = min(nvl / (heads + 1), nic)
    return NvlsGraph(heads, bw_intra, min(nic, 2.0 * bw_intra))


def clique_splits(nodes: int, domain_nodes: int) -> List[Tuple[int, ...]]:
    """Every way `nodes` hosts can sit in the fewest NVLink domains (racks) of `domain_nodes`
    hosts each: the tray counts per MNNVL clique, largest first. A job log does not say how its
    hosts were placed (16+16 or 18+14 for 32 trays on NVL72 racks), so a prediction that depends
    on the placement is reported over all of them.

    NCCL forms one clique per fabric cluster UUID and clique id (src/mnnvl.cc ncclMnnvlCheck,
    v2.27.3-1: ranks whose ``fabricInfo.clusterUuid`` and ``cliqueId`` match), fuses the clique's
    topologies into one NCCL node (src/graph/topo.cc ncclTopoGetSystem, "MNNVL clique support"),
    and numbers nodes by their rings' first rank (init.cc "Determine nNodes"), so comm->nNodes is
    the number of cliques, uneven ones included."""
    if nodes < 1 or domain_nodes < 1:
        raise ValueError("nodes and domain_nodes must be >= 1")
    parts = -(-nodes // domain_nodes)
    out: List[Tuple[int, ...]] = []

    def rec(left: int, k: int, most: int, acc: Tuple[int, ...]) -> None:
        if k == 0:
            if left == 0:
                out.append(acc)
            return
        for first in range(min(most, left - (k - 1)), 0, -1):
            if first * k < left:
                break
            rec(left - first, k - 1, first, acc + (first,))

    rec(nodes, parts, domain_nodes, ())
    return out


def nvls_heads(system: System, split: Sequence[int], gpus_per_node: int) -> int:
    """NVLS heads (NVLS graph channels) of a job whose cliques hold `split` hosts each: every
    clique's NVLS search takes one head per NIC with a distinct local GPU, at most
    NCCL_MAX_NVLS_ARITY (:func:`nvls_graph`), and init.cc aligns every rank on the smallest
    (``graphs[a]->nChannels = std::min(allGather3Data[i].graphInfo[a].nChannels, ...)``)."""
    nics = system.nics_used(gpus_per_node)
    heads = [max(1, min(NVLS_MAX_ARITY, h * gpus_per_node, h * nics)) for h in split]
    return min(heads)


def nvls_tree_nics(system: System, scale: Scale) -> int:
    """NICs an NVLS tree crosses the network through, per NVLink domain: one per NVLS head. Each
    head rank sends and receives its share through its own NIC (src/graph/search.cc
    getNvlsNetDev, v2.27.3-1: the NIC of the NVLS graph channel whose first GPU is the rank), and
    connect.cc connectNvls gives every head its tree up/down peers, the same head index on the
    other nodes. Not the ring graph's NICs (:func:`nics_driven`): on an NVL72 clique of 16 hosts
    that is 32 heads against 16 ring channels."""
    if scale.domains < 2:
        return scale.nics
    return max(1, min(scale.nics, nvls_graph(system, scale).channels))


def nvls_channels(system: System, scale: Scale) -> int:
    """CTAs an NVLS or NVLS-tree collective launches (comm->nvlsChannels, src/transport/nvls.cc
    ncclNvlsInit; enqueue.cc topoGetAlgoInfo takes all of them at every size): 16 on Hopper; on
    Blackwell 32, or 24 on one node / one MNNVL clique from v2.27.3-1 (NVLS_NCHANNELS_SM100_NVL)."""
    if system.compcap_index < 3:
        return NVLS_NCHANNELS_SM90
    if scale.domains == 1 and _version_tuple(system.nccl_version) >= (2, 27):
        return NVLS_NCHANNELS_SM100_NVL
    return NVLS_NCHANNELS_SM100


def nvls_tree_chunk_bytes(sizes, version: str, nodes: int, concurrent_ops: int) -> np.ndarray:
    """NVLS tree's chunk (bytes) per size: src/enqueue.cc calcCollChunking (v2.21.5-1 .. v2.29.2-1,
    the same text): start from NCCL_NVLS_CHUNKSIZE (128 KiB; v2.19/2.20 the 512 KiB Simple step),
    cap it at 64 KiB once ``comm->nNodes >= 4`` (NCCL_NVLSTREE_MAX_CHUNKSIZE's default), then
    shrink while ``nBytes < X * concurrentOps * chunkSize`` (X = 32, 16, 4, 1 down to 256, 128, 64,
    32 KiB), concurrentOps = nChannels x nvls.nHeads. `nodes` is comm->nNodes (NVLink domains)."""
    S = np.asarray(sizes, dtype=float)
    if _version_tuple(version) >= (2, 21):
        start = NVLS_CHUNK_BYTES
        if nodes >= NVLS_TREE_SMALL_CHUNK_NODES:
            start = min(start, NVLS_TREE_MAX_CHUNK_BYTES)
    else:
        start = NVLS_TREE_MAX_CHUNK_BYTES if nodes >= NVLS_TREE_SMALL_CHUNK_NODES else SIMPLE_STEP_BYTES
    c = np.full(S.shape, float(start))
    for times, cap in ((32, 262144.0), (16, 131072.0), (4, 65536.0), (1, 32768.0)):
        c = np.where((S < times * concurrent_ops * c) & (c > cap), cap, c)
    return c


def _btree_parent(nranks: int, rank: int) -> int:
    """The parent of `rank` in NCCL's binary tree (src/graph/trees.cc ncclGetBtree), -1 at the root."""
    if rank == 0:
        return -1
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    up = (rank ^ bit) | (bit << 1)
    return up if up < nranks else rank ^ bit


@lru_cache(maxsize=None)  # called per price; the walk is O(nodes log nodes)
def nvls_tree_height(nodes: int) -> int:
    """Network hops from the deepest node to the root of the tree an NVLS tree runs across nodes:
    connect.cc connectNvls takes ncclGetDtree over comm->nNodes, whose second tree mirrors (even
    count) or shifts (odd) the first, ncclGetBtree, so both have its height. Not tuning.cc's
    log2i(nNodes): the btree's root has one child, so 10 nodes are 4 hops deep (0-8-4-2-1), not 3.
    The double binary tree of Tree (connect.cc connectTrees, ncclGetDtree) has the same height."""
    best = 0
    for r in range(nodes):
        h = 0
        while r > 0:
            r = _btree_parent(nodes, r)
            h += 1
        best = max(best, h)
    return best


def nvls_tree_pipeline_us(system: System, scale: Scale, sizes, intra_GBps: float, alg_bw) -> np.ndarray:
    """Time (us) an NVLS-tree all-reduce spends filling and draining its chunk pipeline across
    nodes, beyond its bandwidth term S / alg_bw, per size.

    The kernel (src/device/all_reduce.h, RunWorkColl NVLS_TREE/Simple, v2.27.3-1 .. v2.29.2-1)
    walks each channel's share in loops of nvls.nHeads chunks (:func:`nvls_tree_chunk_bytes`), one
    per head, through warp groups of their own, each a Simple step (ProtoSimple<1, 1>) stored and
    forwarded whole: the consumer of a step starts on it once its producer has posted all of it.
    Per loop, in order:

    - scatter: every rank writes the whole loop into the heads' NVLS buffers, one step
      (``prims.scatter(offset, nelem = loopCount, ...)``);
    - reduce up: at each of the h + 1 levels of the tree (h = :func:`nvls_tree_height`) a head
      reduces its chunk (multimem load-reduce over the node, plus its children's) and sends it
      up; the root's "Reduce and Broadcast" warps also start it down;
    - broadcast down: each of the h levels below the root receives it and multicasts it;
    - gather: every rank reads the whole loop back from all heads, one step.

    With k loops in flight the collective takes (k - 1) bottleneck periods plus one loop's path
    (the standard pipeline makespan). The path: scatter and gather a loop each (loop bytes /
    `intra_GBps`), 2h + 1 chunk stages at the heads (each head's chunk over all channels, loop /
    nHeads, at `intra_GBps`), and 2h network hops, each moving one tree's half of a head's
    channels (connect.cc alternates the two trees by channel) through the head's NIC. Every
    in-node stage runs at `intra_GBps`, the one in-node rate the description gives. The bandwidth
    term already holds k periods, so what is added is path - period, at least 0. A partial loop
    moves what is left (the size itself below one loop)."""
    S = np.asarray(sizes, dtype=float)
    D = scale.domains
    if D < 2:
        return np.zeros(S.shape)
    heads = nvls_graph(system, scale).channels
    ops = nvls_channels(system, scale) * heads
    loop = np.minimum(S, ops * nvls_tree_chunk_bytes(S, system.nccl_version, D, ops))
    nic = system.nic_bw_GBps * system.fabric_factor(D) * system.tree_efficiency
    hop = loop / (2.0 * heads) / (1000.0 * nic)
    h = nvls_tree_height(D)
    node = (2.0 + (2 * h + 1) / heads) * loop / (1000.0 * intra_GBps)  # scatter, gather, head chunks
    path = 2 * h * hop + node
    period = loop / (1000.0 * np.asarray(alg_bw, dtype=float))
    return np.maximum(0.0, path - period)


def nvls_chunk_bytes(sizes, concurrent_ops: int) -> np.ndarray:
    """Single-node NVLS chunk (bytes) per all-reduce size: src/enqueue.cc calcCollChunking, the
    NCCL_ALGO_NVLS branch (v2.18.5-1 .. v2.29.2-1, the same rule): start from NCCL_NVLS_CHUNKSIZE
    (128 KiB; a fixed 131072 before 2.21), then 64 KiB while ``nBytes < 64 * concurrentOps *
    chunkSize``, 32 KiB while ``< 8 * ...``, 16 KiB while ``< 2 * ...``, each test on the chunk the
    previous one left. concurrentOps = nChannels x nvls.nHeads. From 2.22 NCCL calls it per channel
    (scheduleCollTasksToPlan: nChannels = 1 on the channel's even share), which is the same test.
    (The 32 KiB cap across nodes applies to CollNet NVLS only, not here.)"""
    S = np.asarray(sizes, dtype=float)
    c = np.full(S.shape, float(NVLS_CHUNK_BYTES))
    for times, cap in ((64, 65536.0), (8, 32768.0), (2, 16384.0)):
        c = np.where((S < times * concurrent_ops * c) & (c > cap), cap, c)
    return c


def nvls_pipeline_us(system: System, scale: Scale, sizes, intra_GBps: float, alg_bw) -> np.ndarray:
    """Time (us) a single-node NVLS all-reduce spends filling and draining its chunk pipeline,
    beyond its bandwidth term S / alg_bw, per size (0 across nodes: NVLS tree has its own,
    :func:`nvls_tree_pipeline_us`, and NVLS over CollNet is not modelled here).

    The kernel (src/device/all_reduce.h, RunWorkColl NVLS/Simple, ``work->oneNode``, v2.27.3-1 and
    v2.29.2-1 the same text) walks each channel's share in loops of nvls.nHeads chunks
    (:func:`nvls_chunk_bytes`), through three warp groups of its own, each a Simple step
    (ProtoSimple<1, 1>) stored and forwarded whole. Per loop, in order:

    - scatter: every rank writes the whole loop, one chunk per head, into its NVLS buffers
      (``prims.scatter(offset, nelem = loopCount, ...)``);
    - reduce-broadcast: each head reduces its chunk over the node and multicasts the sum
      (``prims.directRecvDirectSend``, multimem load-reduce and store);
    - gather: every rank reads the whole loop back from all heads' chunks (``prims.gather``).

    Every channel runs its own pipeline at 1/nChannels of the rate, so a loop over all channels is
    nChannels x nHeads x chunk bytes. Each stage runs at `intra_GBps`, the one in-node rate the
    description gives (as :func:`nvls_tree_pipeline_us` does); the path is then (2 + 1/nHeads)
    loops, the period one loop at `alg_bw`, and what is added is path - period, at least 0. A
    partial loop moves what is left (the size itself below one loop)."""
    S = np.asarray(sizes, dtype=float)
    if scale.domains > 1:
        return np.zeros(S.shape)
    heads = nvls_graph(system, scale).channels
    ops = nvls_channels(system, scale) * heads
    loop = np.minimum(S, ops * nvls_chunk_bytes(S, ops))
    path = (2.0 + 1.0 / heads) * loop / (1000.0 * intra_GBps)  # scatter, a head's chunk, gather
    period = loop / (1000.0 * np.asarray(alg_bw, dtype=float))
    return np.maximum(0.0, path - period)


def _intra_hw(system: System) -> str:
    return "NVLINK" if system.intra_kind in ("nvswitch", "nvlink") else "PCI"


def nccl_estimate_us(kind: str, algorithm: str, protocol: str, sizes, system: System, scale: Scale) -> np.ndarray:
    """NCCL's own time estimate (us) for `sizes` (bytes): tuning.cc ncclTopoTuneModel's
    bandwidth/latency for (kind, algorithm, protocol) and ncclTopoGetAlgoTime's
    lat + nBytes / (1000 * bw) with the tree correction and the ring plateau factor.
    NCCL's graph bandwidths come from the link speeds its topology gives (:func:`topo_speeds`:
    NVLink count x SMxx_NVLINK_BW, the NIC's line rate), not the achievable rates the physical
    model prices with: bwIntra x nChannels = the GPU's NVLink speed, bwInter x nChannels = the
    NICs in use at the search's speed for one NIC (:func:`search_speed`: 50 -> 48 GB/s)."""
    t = nccl_table(system.nccl_version)
    S = np.asarray(sizes, dtype=float)
    p = PROTOCOLS.index(protocol)
    a = algorithm
    n, D, L = scale.ranks, scale.domains, scale.local
    ci = system.compcap_index
    idx2 = min(D, 3) - 1
    graph = ring_graph(system, scale)
    # graphs[a]->nChannels: the ring search's channels (the tree's and CollNet's graphs are searched
    # for exactly as many, init.cc), not the doubled comm->nChannels a collective runs on, which
    # only the plateau below reads
    C = graph.channels
    n_ch = C
    # Graph speeds per channel (search.cc ncclTopoCompute): a ring's search raises bwIntra and
    # bwInter together (across nodes both stop at the NICs); a tree's (and CollNet's) bwIntra may
    # grow to twice bwInter ("increase bwIntra for trees (2 nodes or collnet)").
    speeds = topo_speeds(system)
    node_intra = speeds.intra_GBps if L > 1 else math.inf
    if D == 1:
        bw_intra = bw_inter = graph.bw_intra
    else:
        bw_inter = graph.bw_inter
        bw_intra = bw_inter if a in ("ring", "pat") else min(node_intra / C, 2 * bw_inter)
    nsteps = 2 * (n - 1) if kind == "all_reduce" else n - 1
    ppn = n / D
    collnet = a in ("collnet_direct", "collnet_chain")
    bw = bw_intra if (D <= 2 or collnet) else bw_inter
    ll_row = ci if D == 1 else (1 if system.cpu_vendor == "amd" else 0)
    ll_max = t["ll_max"][ll_row][idx2]
    nvls_ratio = None
    if a in ("nvls", "nvls_tree"):
        # tuning.cc: the NVLS graph's own channels and bandwidths, not the ring's
        g = nvls_graph(system, scale)
        n_ch = g.channels
        bw, nvls_ratio = _nvls_channel_bw(kind, a, g, t, ci, idx2, D, ppn, _version_tuple(system.nccl_version))
        if bw is None:
            return np.full(S.shape, np.inf)
    bus = n_ch * bw
    if a == "ring" and protocol == LL:
        bus = min(ll_max, bus * ring_ll_factor(system.nccl_version, kind, D))
    if a == "ring" and protocol == LL128:
        bus = min(bus * 0.92, C * t["ring_ll128"][ci][idx2])
    if a == "tree" and kind == "all_reduce":
        bus = min(bus * 0.92, C * t["tree"][ci][idx2])
    if a == "tree" and protocol == LL:
        bus = min(bus / 3.8, ll_max)
    if a == "tree" and protocol == LL128:
        bus = min(bus * (7.0 / 9.0 if D == 1 else 120.0 / 128.0), C * t["tree_ll128"][ci][idx2])
    if a == "pat":
        bus *= 0.75
    if a == "collnet_direct":
        factor = ppn / C
        factor -= (factor - 1) / 2
        bus /= max(factor, 1e-9)
        if ci >= 2:
            bus *= 0.85
    if nvls_ratio is not None:
        bus *= nvls_ratio
    elif not (a != "ring" and kind != "all_reduce"):
        bus *= (n / nsteps) if a in ("ring", "nvls", "nvls_tree") else 0.5
    intra_hw = _intra_hw(system)
    lat = t["base"][a][p]
    intra_lat = t["hw"][intra_hw][a][p]
    inter_lat = t["hw"]["NET"]["tree" if ppn == 1 else a][p]
    # tuning.cc (v2.18.5-1 .. v2.30): ``interLat += graphs[a]->latencyInter; // Also add the flush
    # extra latency: if (p == NCCL_PROTO_SIMPLE) interLat += graphs[a]->latencyInter``, latencyInter
    # being the NIC's reported latency (search.cc ``graph->latencyInter = net->net.latency``)
    inter_lat += system.nic_reported_latency_us * (2 if protocol == SIMPLE else 1)
    if a == "ring":
        net_over = 0.0
        if D > 1:
            net_over = NET_OVERHEAD_US[system.cpu_vendor] * (3 if protocol == SIMPLE else 1)
        n_inter = 0 if D == 1 else (2 * (D - 1) if kind == "all_reduce" else D - 1)
        lat += (nsteps - n_inter) * max(intra_lat, net_over) + n_inter * inter_lat
    elif a == "tree":
        lat += 2 * ((L - 1) * intra_lat + _log2i(D) * inter_lat)
    elif a == "collnet_direct":
        lat += 2 * (min(1, L - 1) * intra_lat + (L - 1) * 0.4) + inter_lat
    elif a == "collnet_chain":
        lat += 2 * (L - 1) * intra_lat + inter_lat
    elif a == "nvls":
        lat = intra_lat + (inter_lat if D > 1 else 0.0)
    elif a == "nvls_tree":
        lat += intra_lat + 2 * _log2i(D) * inter_lat
    elif a == "pat":
        lat += _log2i(D) * (inter_lat / 3.5) + n * 2.8
    bw_s = np.full_like(S, bus)
    if a == "tree" and kind == "all_reduce":
        bw_s = bw_s * _tree_correction(t, protocol, S)
    lat_s = np.full_like(S, lat)
    if a == "ring" and protocol == SIMPLE and D > 1 and kind == "all_reduce":
        # enqueue.cc: ``info->nBytes/(info->comm->nChannels*info->comm->nRanks) >= 64``
        plateau = S / (nccl_channels(system, scale) * n) >= 64
        lat_s = np.where(plateau, lat * (1.9 if ci < 1 else 1.4), lat)
    with np.errstate(divide="ignore"):
        return np.where(bw_s > 0, lat_s + S / (1000.0 * bw_s), np.inf)


def _nvls_channel_bw(kind: str, a: str, g: NvlsGraph, t: dict, ci: int, idx2: int, D: int, ppn: float,
                     version: Tuple[int, int]) -> Tuple[Optional[float], float]:
    """NVLS / NVLS-tree bandwidth per channel and the bus-to-algorithm ratio, as ncclTopoTuneModel
    computes them from the NVLS graph (None: NCCL drops the algorithm). The formula changed twice:

    - 2.28 and later: intraBw = bwIntra x nvlsEfficiency x (nCh-1)/nCh, x2 for AllReduce ("pipelines
      two operations"), else x(ppn-1)/ppn; interBw = bwInter (x2 for NVLS-tree on 2 nodes);
      bw = min(intraBw, interBw, perChMaxNVLSTreeBw for NVLS-tree); fewer than 2 channels: dropped
      ("NVLS/NVLStree needs at least 2 channels"); ratio nRanks/nsteps (AllReduce only);
    - before (v2.19.3-1 .. v2.27.7-1): NVLS bw = min(bwIntra, bwInter) (2.27 AllGather/ReduceScatter:
      min(bwIntra (ppn-1)/ppn, 0.9 bwInter)); NVLS-tree bw = min(bwIntra, bwInter, /2 beyond 2 nodes);
      ratio 5/6, applied to AllGather/ReduceScatter too before 2.23 (v2.23.4-1 added the
      "a != RING && (AllGather || ReduceScatter)" guard).
    """
    ar = kind == "all_reduce"
    if version >= (2, 28):
        if g.channels < 2:
            return None, 1.0
        intra = g.bw_intra * t["nvls_eff"][ci] * (g.channels - 1) / g.channels
        intra *= 2.0 if ar else (ppn - 1) / ppn
        inter = g.bw_inter * (2 if (D <= 2 and a == "nvls_tree") else 1)
        ratio = (ppn * D) / (2 * (ppn * D - 1)) if ar else 1.0  # nRanks / nsteps, nsteps = 2(n-1)
        return min(intra, inter, t["nvls_tree"][ci][idx2] if a == "nvls_tree" else math.inf), ratio
    if a == "nvls":
        if not ar and version >= (2, 27):
            bw = min(g.bw_intra * (ppn - 1) / ppn, 0.9 * g.bw_inter)
        else:
            bw = min(g.bw_intra, g.bw_inter)
    else:
        bw = min(g.bw_intra, g.bw_inter if D <= 2 else g.bw_inter / 2)
    return bw, (5.0 / 6.0 if (ar or version < (2, 23)) else 1.0)


def _tree_correction(t: dict, protocol: str, S: np.ndarray) -> np.ndarray:
    """treeCorrectionFactor[protocol][log2(nBytes/64)], 1 outside the table (tuning.cc)."""
    corr = np.asarray(t["tree_corr"][protocol], dtype=float)
    with np.errstate(divide="ignore"):
        log_size = np.floor(np.log2(np.maximum(S, 1.0) / 64.0)).astype(int)
    ok = (log_size >= 0) & (log_size < min(23, len(corr)))
    return np.where(ok, corr[np.clip(log_size, 0, len(corr) - 1)], 1.0)


# --- the physical time ---------------------------------------------------------------------------


# Simple's step: the default buffer (NCCL_BUFFSIZE 4 MiB, src/init.cc DEFAULT_BUFFSIZE) over
# NCCL_STEPS = 8 slots (src/include/device.h): a tree's chunk before enqueue.cc shrinks it.
SIMPLE_STEP_BYTES = (4 << 20) // 8


def tree_depth(scale: Scale) -> int:
    """NCCL's tree depth (src/graph/connect.cc connectTrees, 2.18-2.29: ``nRanks/nNodes - 1 +
    log2i(nNodes)``, "not an exact value but a good approximation"): the intra-node chain plus
    the network levels of the double binary tree."""
    return scale.local - 1 + _log2i(scale.domains)


def tree_simple_chunks(sizes, channels_launched, depth: int) -> np.ndarray:
    """Chunks each channel's Tree/Simple all-reduce moves (src/enqueue.cc, 2.18-2.29, "Optimize
    chunkSize / nSteps"): the 512 KiB step halves while a channel has fewer than depth*8 chunks
    (down to 128 KiB), depth*4 (down to 64 KiB) and depth (down to 32 KiB). A deeper tree gets
    smaller chunks, so more of them for the same bytes. :func:`physical_time_us` prices them only
    where the network plugin has a rendezvous threshold (one rendezvous per chunk): a per-chunk
    proxy cost on it for every system trades rows across systems (see the calibration notes)."""
    S = np.asarray(sizes, dtype=float)
    nc = np.broadcast_to(np.asarray(channels_launched, dtype=float), S.shape)
    out = np.empty(S.shape)
    for i, (b, c) in enumerate(zip(S.ravel(), nc.ravel())):
        chunk = SIMPLE_STEP_BYTES
        for need, floor in ((8, 131072), (4, 65536), (1, 32768)):
            while b // (c * chunk) < depth * need and chunk > floor:
                chunk //= 2
        out.ravel()[i] = max(1.0, math.ceil(b / (c * chunk)))
    return out


# A Simple ring step's chunk per channel (src/collectives/device/all_gather.h, all_reduce.h,
# reduce_scatter.h runRing, v2.18.3-1; the same sizes from the host-side split in 2.21): at most
# stepSize x CHUNKSTEPS (ALLGATHER/ALLREDUCE/REDUCESCATTER_CHUNKSTEPS = NCCL_STEPS/2 = 4 steps,
# 2 MiB), else the channel's share of a rank's bytes rounded up to (nthreads - WARP_SIZE) x 8 bytes
# (enqueue.cc getAlgoInfo: 512 Simple threads plus the ring's sync warp -> 4096 B). The primitives
# (prims_simple.h) cut the chunk into SlicePerChunk = CHUNKSTEPS/SLICESTEPS = 2 slices of
# max(chunk/2, stepSize x StepPerSlice / 32 = 32 KiB), and the network proxy posts one message
# per slice (src/transport/net.cc sendProxyProgress, one isend per sliceSteps).
SIMPLE_RING_CHUNK_BYTES = 4 * SIMPLE_STEP_BYTES
SIMPLE_RING_GRAIN_BYTES = MAX_THREADS[SIMPLE] * 8  # (512 + the sync warp - WARP_SIZE) threads x 8 B
SIMPLE_RING_MIN_SLICE_BYTES = 2 * SIMPLE_STEP_BYTES // 32


def simple_ring_slices(sizes, ranks: int, channels_launched) -> np.ndarray:
    """Bytes of the two slices (messages) a Simple ring channel posts per step, per size: shape
    ``sizes.shape + (2,)``, a slice NCCL leaves empty being 0 (its proxy still posts a 0-byte
    message, which any plugin sends eagerly). The channel is the first one, the fullest."""
    S = np.asarray(sizes, dtype=float)
    nc = np.broadcast_to(np.asarray(channels_launched, dtype=float), S.shape)
    share = np.ceil(S / ranks / nc)
    chunk = np.minimum(SIMPLE_RING_CHUNK_BYTES, np.ceil(share / SIMPLE_RING_GRAIN_BYTES) * SIMPLE_RING_GRAIN_BYTES)
    chunk = np.minimum(chunk, np.ceil(S / ranks))  # the last (only) channel's chunk holds what is left
    # divUp(nelem, 16 x SlicePerChunk) x 16 in elements: nccl-tests' float (4 bytes)
    first = np.minimum(chunk, np.maximum(np.ceil(chunk / 128.0) * 64.0, SIMPLE_RING_MIN_SLICE_BYTES))
    return np.stack([first, chunk - first], axis=-1)


def rendezvous_work_us(system: System, slices) -> np.ndarray:
    """The proxy's rendezvous work (us) on each of a Simple ring step's slices (`slices`, bytes, as
    :func:`simple_ring_slices` gives them): the plugin's per-message rendezvous cost
    (:attr:`System.net_rdzv_us`) for a slice longer than the largest message it sends eagerly
    (:attr:`System.net_rdzv_threshold_bytes`), else 0; 0 everywhere where the system has no
    threshold. The work alone, without the transfer it overlaps: :func:`net_rendezvous_step_us`
    prices the step. Polaris (libfabric CXI, software receive matching) measures ~25-27 us per
    step with one such message (32 KiB chunks) and ~44-52 us with two (64 KiB and up) at 8x4 and
    128x4, all_gather and all_reduce alike; 38 and 62 at 2x4."""
    b = np.asarray(slices, dtype=float)
    thr = system.net_rdzv_threshold_bytes
    if thr is None:
        return np.zeros(b.shape)
    return np.where(b > thr, system.net_rdzv_us, 0.0)


def net_rendezvous_step_us(system: System, sizes, ranks: int, channels_launched, floor_us, transfer_us) -> np.ndarray:
    """A Simple ring step's duration (us) across nodes where the plugin sends long messages by
    rendezvous, less its transfer `transfer_us` (the step's chunk at the channel's rate), per size:
    what the step adds to the ring's bandwidth term. `floor_us` is the step's latency otherwise
    (the hop or the proxy's per-step floor).

    Each of the step's two slices (:func:`simple_ring_slices`) is one message. The rank's one proxy
    thread handles a channel's messages one after the other, each for at least the per-step floor
    (on such a plugin the per-message CPU work, :attr:`System.net_step_per_channel`) and, for a
    rendezvous message, for :attr:`System.net_rdzv_us` (libfabric CXI with software receive
    matching: the receiver's progress call matches the header and issues the GET):
    w_k = max(floor, c_k). The GET's payload then moves in the NIC while the proxy handles the
    next posted message: a Simple connection keeps NCCL_STEPS = 8 slots (4 two-step slices) in
    flight (src/include/device.h; src/transport/net.cc sendProxyProgress/recvProxyProgress post
    every slot that is ready), so the data of one slice overlaps the proxy work of the next. In
    steady state a step lasts the longest of its resources and of each slice's own chain (exact
    against a per-message event simulation of the ring, tests/unit/collectives):

        max(w_k + t_k for each slice k,  w_1 + w_2 (proxy),  t_1 + t_2 (link))

    With one message a step (chunks up to 32 KiB) that is max(floor, c_1) + t_1, the unpipelined
    price; with two (64 KiB and up) the proxy work hides behind the transfer once t_1 + t_2
    exceeds w_1 + w_2. Polaris 8x4 measures ~49-55 us per ring step at 64-256 KiB chunks
    (t = 7-29 us), ~66 at 512 KiB and ~118 at 1 MiB (t = 58, 115): the transfer plus 3-8 us, where
    a rendezvous floor in series with the transfer charged ~46 us more. Returns ``floor_us``
    where the system has no rendezvous threshold."""
    S = np.asarray(sizes, dtype=float)
    floor = np.broadcast_to(np.asarray(floor_us, dtype=float), S.shape)
    thr = system.net_rdzv_threshold_bytes
    if thr is None:
        return np.array(floor, dtype=float)
    T = np.broadcast_to(np.asarray(transfer_us, dtype=float), S.shape)
    b = simple_ring_slices(S, ranks, channels_launched)
    total = np.maximum(np.sum(b, axis=-1), 1.0)
    t = T[..., None] * b / total[..., None]              # each slice's share of the step's transfer
    c = rendezvous_work_us(system, b)                    # its rendezvous work
    w = np.where(b > 0, np.maximum(floor[..., None], c), 0.0)  # the proxy's time on it (0: no message)
    chain = np.max(np.where(b > 0, w + t, 0.0), axis=-1)
    step = np.maximum(np.maximum(chain, np.sum(w, axis=-1)), T)
    return step - T


def simple_ring_loops(sizes, ranks: int, channels_launched) -> np.ndarray:
    """Loop iterations of a Simple ring kernel, per size: each channel's block walks its share of
    the buffer ``nranks * chunkSize`` elements at a time (src/device/all_reduce.h runRing,
    ``for (elemOffset = 0; elemOffset < channelCount; elemOffset += loopCount)``, ``loopCount =
    nranks * chunkCount``, the same in v2.17.1-1's collectives/device/all_reduce.h with ``loopSize
    = nChannels*nranks*chunkSize``; all_gather.h and reduce_scatter.h alike), chunkSize =
    ALLREDUCE_CHUNKSTEPS x stepSize (2 MiB at the default 4 MiB buffer, enqueue.cc
    calcCollChunking). `sizes` are the collective's full buffer (all_gather's output)."""
    S = np.asarray(sizes, dtype=float)
    nc = np.broadcast_to(np.asarray(channels_launched, dtype=float), S.shape)
    return np.maximum(1.0, np.ceil(S / (nc * ranks * SIMPLE_RING_CHUNK_BYTES)))


def ring_loop_bubble_us(system: System, sizes, ranks: int, channels_launched) -> np.ndarray:
    """Time (us) a Simple ring across nodes leaves its NICs idle at its loop boundaries, per size.

    A channel's block runs its loop's steps one after the other (send, recvReduceSend ...,
    recv: src/device/all_reduce.h runRing) and starts the next loop's send only when its last
    recv is done (:func:`simple_ring_loops`). Across the network a slice is stored and
    forwarded: the proxy hands a received slice to the GPU only once it has arrived whole, and
    posts a send only once the block has written the whole slice into the send FIFO
    (prims_simple.h ``postPeer`` once per slice). Within a loop those copies overlap other
    slices' transfers; at each loop boundary they do not: the NIC waits while the block copies
    the loop's last received slice out and writes the next loop's first slice in, two slices at
    one channel's Simple copy rate (:attr:`System.simple_ch_GBps`), the wire's one-way latency
    overlapping the peer's last slice. Channels run the same partition in step, so their gaps
    coincide.

    A loop holds 2(n-1) sends of all_reduce and n-1 of all_gather/reduce_scatter, so the idle
    share falls as 1/n: at 2 ranks (one GPU per node on 2 nodes) it is about a quarter of
    all_reduce's transfer and half of all_gather's. That is the Azure NDmv4 2x1 pair (NCCL
    2.17.1: 18.65 and 15.84 GB/s per NIC where 2x8 drives each NIC at ~23 GB/s and MSCCL++
    drives the same 2x1 at 23.3); at 2x8 it is 1-3%. On NVLink the sender's copy is the
    transfer (direct writes into the peer's buffer), so rings inside a node have no such gap."""
    loops = simple_ring_loops(sizes, ranks, channels_launched)
    first_slice = simple_ring_slices(sizes, ranks, channels_launched)[..., 0]
    return (loops - 1.0) * 2.0 * first_slice / (1000.0 * system.simple_ch_GBps)


def channels_used(algorithm: str, protocol: str, sizes, channels: int, ranks: int) -> np.ndarray:
    """Channels NCCL launches for each size (enqueue.cc topoGetAlgoInfo): while nBytes <
    nc * nThreads * threadThreshold, nc-- (ring LL's threshold is per rank). NVLS/CollNet
    keep theirs."""
    S = np.asarray(sizes, dtype=float)
    if algorithm not in ("ring", "tree"):
        return np.full(S.shape, float(channels))
    thr = THREAD_THRESHOLD[protocol] * (ranks if (algorithm == "ring" and protocol == LL) else 1)
    per_channel = MAX_THREADS[protocol] * thr
    return np.clip(np.floor(S / per_channel), 1.0, float(channels))


def protocol_ceiling_GBps(algorithm: str, protocol: str, system: System, scale: Scale, channels_launched,
                          channels: int) -> np.ndarray:
    """The protocol's bus-bandwidth ceiling (GB/s) with `channels_launched` of the `channels`
    (comm->nChannels, :func:`nccl_channels`) running, as ncclTopoTuneModel applies NCCL's
    ceilings (src/graph/tuning.cc, the same rules v2.18.5-1 .. v2.29.2-1):

    - LL: ``busBw = std::min(llMaxBw, busBw * ...)`` (Ring) and ``std::min(busBw*1.0/3.8,
      llMaxBw)`` (Tree): a *total* ceiling, whatever the channel count
      (:attr:`System.ll_ch_GBps` holds it);
    - LL128 (``graphs[a]->nChannels*perChMaxRingLL128Bw``, ``...*perChMaxTreeLL128Bw``) and
      Tree/Simple (``graphs[a]->nChannels*perChMaxTreeBw``): *per channel* of the graph, times
      ``graphs[a]->nChannels``, the ring search's channels (:func:`ring_graph`; the tree graph is
      searched for as many), not the comm->nChannels ncclTopoPostset doubles them into.

    A launch on fewer channels (small sizes, :func:`channels_used`) scales those figures by the
    fraction launched, as ncclTopoGetAlgoTime does: ``bw = bw / comm->nChannels *
    info->nChannels``. NCCL caps Ring/Simple (and PAT) with nothing; the model keeps its own
    per-launched-channel Simple throughput there (:attr:`System.simple_ch_GBps` x channels
    launched: one channel's threads move at most that), which binds only on few channels."""
    nc = np.asarray(channels_launched, dtype=float)
    frac = nc / float(channels)
    if protocol == LL:
        return system.ll_ch_GBps * frac
    if protocol == SIMPLE and algorithm != "tree":
        return system.simple_ch_GBps * nc
    per_channel = system.ll128_ch_GBps if protocol == LL128 else system.simple_ch_GBps
    return per_channel * ring_graph(system, scale).channels * frac


def net_ll_GBps(system: System, channels_launched) -> np.ndarray:
    """LL's payload rate (GB/s) across the network with `channels_launched` channels running:
    :attr:`System.net_ll_ch_GBps` per channel. NCCL's network transport puts LL buffers in host
    memory (src/transport/net.cc, v2.18.5-1 line 620) and its send proxy polls both flags of
    every 16-byte line of a step before posting it (line 978-986), so each channel's LL stream
    across nodes moves at a rate of its own, whatever the NIC or the total llMaxBw allow. Only
    LL hops across nodes: inside a node LL runs GPU to GPU, and LL128/Simple use GPU memory
    with GDR."""
    return system.net_ll_ch_GBps * np.asarray(channels_launched, dtype=float)


def net_step_floor_us(system: System, protocol: str, channels_launched) -> np.ndarray:
    """Per-step floor (us) of a ring or tree across nodes, per size: NCCL's getNetOverhead
    (tuning.cc; :attr:`System.net_step_us`, x3 for Simple) as its estimate applies it, once per
    step whatever the channel count. Where the network plugin's step cost is a per-message CPU
    cost (:attr:`System.net_step_per_channel`), LL pays it once per launched channel: the rank's
    one proxy thread (src/proxy.cc progressOps) posts and tests every channel's LL step in turn,
    so the step takes channels x the per-message cost (Polaris: at 8x4 and 128x4 an LL step
    across nodes costs ~25-30 us per launched channel at every size from 512 B to 16 KB per
    channel, and 2, 4 channels take 2x, 4x as long)."""
    nc = np.asarray(channels_launched, dtype=float)
    base = system.net_step_us * (3.0 if protocol == SIMPLE else 1.0)
    if protocol == LL and system.net_step_per_channel:
        return base * nc
    return np.full(nc.shape, base)


def _hop_us(system: System, hw: str, algorithm: str, protocol: str, table: dict, nominal_ring_simple: float,
            physical_simple: float) -> float:
    """A hop's latency for (algorithm, protocol): the level's physical Simple-ring hop latency
    scaled by NCCL's ratio hwLat[hw][algorithm][protocol] / hwLat[hw][Ring][Simple]."""
    ratio = table["hw"][hw][algorithm][PROTOCOLS.index(protocol)] / nominal_ring_simple
    return physical_simple * ratio


def physical_time_us(kind: str, algorithm: str, protocol: str, sizes, system: System, scale: Scale) -> np.ndarray:
    """Time (us) of one collective of `sizes` bytes run with (algorithm, protocol), from the
    system's physical constants (see the module docstring for each algorithm's traffic).

    latency = baseLat[algorithm][protocol] + launch_us + hops, each hop's latency the level's
    physical Simple-ring latency times NCCL's ratio for (algorithm, protocol), plus a Simple
    ring's idle time at its loop boundaries across nodes (:func:`ring_loop_bubble_us`), plus
    :attr:`System.net_simple_base_us` once where Simple traffic crosses the network;
    bandwidth = the slowest level for the algorithm's traffic, times the protocol's payload
    fraction, at most the protocol's ceiling (:func:`protocol_ceiling_GBps`: LL's total, the
    per-graph-channel LL128/Simple ones, scaled by the channels launched); network levels
    drive min(channels used, the NICs the ring search put channels on: :func:`nics_driven`) NICs,
    shared by the fabric's oversubscription; channels are the ones that run (:func:`nccl_channels`).
    """
    t = _physical_table(system.nccl_version)
    S = np.asarray(sizes, dtype=float)
    p = PROTOCOLS.index(protocol)
    a = algorithm
    n, D, L = scale.ranks, scale.domains, scale.local
    C = nccl_channels(system, scale)
    nc = channels_used(a, protocol, S, C, n)
    eff = PROTO_EFFICIENCY[protocol]
    ceiling = protocol_ceiling_GBps(a, protocol, system, scale, nc, C)
    nic = system.nic_bw_GBps * system.fabric_factor(D)
    # a channel drives the NIC its graph channel was searched on; ncclTopoDupChannels and the
    # postset doubling copy channels onto the same NICs, so the distinct NICs are the searched ones
    nics = np.minimum(nc, float(nics_driven(system, scale)))
    net_bw = nics * nic  # GB/s the domain's NICs in use can carry each way
    inf = np.full(S.shape, np.inf)
    factor = bus_factor(kind, n)

    intra_hw = _intra_hw(system)
    intra_nominal = t["hw"][intra_hw]["ring"][2]
    net_nominal = t["hw"]["NET"]["ring"][2]
    net_hop_physical = system.net_hop_latency_us(D)
    lat_alg = a if t["hw"][intra_hw][a][p] > 0 else "ring"
    h_intra = _hop_us(system, intra_hw, lat_alg, protocol, t, intra_nominal, system.intra_hop_us)
    net_alg = "tree" if (L == 1 and a in ("ring", "tree")) else a
    if t["hw"]["NET"][net_alg][p] <= 0:
        net_alg = "ring"
    h_net = _hop_us(system, "NET", net_alg, protocol, t, net_nominal, net_hop_physical)
    lat = t["base"][a][p] + system.launch_us

    if a == "ring":
        link = inf.copy()
        if L > 1:
            link = np.minimum(link, system.intra_bw_GBps)
        if D > 1:
            link = np.minimum(link, net_bw)
        bus = np.minimum(link * eff, ceiling)
        if D > 1 and protocol == LL:
            # every launched channel's ring crosses the network through host-memory LL buffers
            bus = np.minimum(bus, net_ll_GBps(system, nc))
        alg_bw = bus / factor
        nsteps = 2 * (n - 1) if kind == "all_reduce" else n - 1
        n_inter = 0 if D == 1 else (2 * (D - 1) if kind == "all_reduce" else D - 1)
        if D > 1:
            h_intra = np.maximum(h_intra, net_step_floor_us(system, protocol, nc))
            if protocol == SIMPLE and system.net_rdzv_threshold_bytes is not None:
                # a step across nodes lasts at least its messages' rendezvous work (the network
                # step that sends them, and every NVLink step of the ring waiting on it), which
                # the next slice's transfer overlaps (net_rendezvous_step_us)
                loops = simple_ring_loops(S, n, nc)
                T = S / (1000.0 * alg_bw) / (nsteps * loops)
                h_intra = loops * net_rendezvous_step_us(system, S, n, nc, h_intra, T)
                h_net = loops * net_rendezvous_step_us(system, S, n, nc, h_net, T)
        lat_s = lat + (nsteps - n_inter) * h_intra + n_inter * h_net
        if D > 1 and protocol == SIMPLE:
            # the block's loops run one after the other: every loop boundary idles the NICs
            lat_s = lat_s + ring_loop_bubble_us(system, S, n, nc)
    elif a == "tree":
        eta = system.tree_efficiency
        alg_link = inf.copy()
        if L > 1:
            alg_link = np.minimum(alg_link, system.intra_bw_GBps * eta / 2.0)
        if D > 1:
            alg_link = np.minimum(alg_link, net_bw * eta / (1.0 if D == 2 else 2.0))
        # tuning.cc ``busBw = std::min(busBw*.92, nChannels*perChMaxTreeBw)``: the .92 is the
        # links' share, the ceiling is not scaled by it; bus -> algorithm bandwidth x .5
        if D > 1 and protocol == LL:
            # a node's tree traffic across the network (S at D = 2, 2S beyond) through host-memory
            # LL buffers, one FIFO per launched channel
            alg_link = np.minimum(alg_link, net_ll_GBps(system, nc) / eff / (1.0 if D == 2 else 2.0))
        alg_bw = np.minimum(alg_link * eff, ceiling / 2.0) * _tree_correction(t, protocol, S)
        # a tree's network hop is one proxy step too: at least the per-step floor of a ring
        h_tree_net = np.maximum(h_net, net_step_floor_us(system, protocol, nc)) if D > 1 else h_net
        lat_s = lat + 2 * ((L - 1) * h_intra + nvls_tree_height(D) * h_tree_net)
        if D > 1 and protocol == SIMPLE and system.net_rdzv_threshold_bytes is not None:
            # a tree's Simple chunk is one message of at least 32 KiB (ProtoSimple<1, 1>, enqueue.cc's
            # chunk floor), above any eager limit: each chunk crossing a network hop pays one
            # rendezvous, one after the other on a channel, as a ring step's slices do
            lat_s = lat_s + tree_simple_chunks(S, nc, tree_depth(scale)) * system.net_rdzv_us
    elif a in ("nvls", "nvls_tree"):
        intra = system.intra_bw_GBps * system.nvls_efficiency
        if kind != "all_reduce":
            intra = intra / factor  # AG/RS: the ring's traffic through the switch
        alg_bw = np.full(S.shape, intra)
        if D > 1:
            # each NVLS head drives its own NIC (nvls_tree_nics): a multi-host NVLink domain
            # (GB200 NVL72: 64 NICs on 16 hosts) crosses the network through its 32 heads' NICs
            net = nvls_tree_nics(system, scale) * nic * system.tree_efficiency / (1.0 if (D == 2 or a == "nvls") else 2.0)
            alg_bw = np.minimum(alg_bw, net)
        h_nvls = system.intra_hop_us * t["hw"]["NVLINK"][a][2] / intra_nominal
        if a == "nvls":
            lat_s = system.launch_us + h_nvls + (h_net if D > 1 else 0.0)
            if kind == "all_reduce":
                # its chunks pipeline through the kernel's scatter, head and gather stages
                lat_s = lat_s + nvls_pipeline_us(system, scale, S, intra, alg_bw)
        else:
            # the tree NCCL connects is nvls_tree_height deep, and its chunks pipeline through it
            lat_s = lat + h_nvls + 2 * nvls_tree_height(D) * h_net
            lat_s = lat_s + nvls_tree_pipeline_us(system, scale, S, intra, alg_bw)
    elif a in ("collnet_direct", "collnet_chain"):
        intra_share = system.intra_bw_GBps * (1.0 if a == "collnet_direct" else 0.5)
        alg_bw = np.minimum(np.full(S.shape, intra_share), scale.nics * nic * 0.9)
        if a == "collnet_direct":
            lat_s = lat + 2 * (min(1, L - 1) * h_intra + (L - 1) * 0.4) + h_net
        else:
            lat_s = lat + 2 * (L - 1) * h_intra + h_net
    elif a == "pat":
        link = net_bw if L == 1 else np.minimum(net_bw, system.intra_bw_GBps)
        alg_bw = np.minimum(link * eff, ceiling) * 0.75 / factor
        lat_s = lat + _log2i(D) * (h_net / 3.5) + n * 2.8
    else:  # pragma: no cover - guarded by ALGORITHMS
        raise ValueError(a)
    if D > 1 and protocol == SIMPLE:
        # once per collective whose Simple traffic crosses the network, whatever its steps
        lat_s = lat_s + system.net_simple_base_us
    lat_arr = np.broadcast_to(np.asarray(lat_s, dtype=float), S.shape)
    return lat_arr + S / (1000.0 * alg_bw)


def priced_by(algorithm: str, protocol: str, scale: Scale, system: Optional[System] = None) -> Tuple[str, ...]:
    """The physical constants (:attr:`System.FIT_NAMES`) that :func:`physical_time_us` reads for
    (algorithm, protocol) at `scale`: what a prediction hinges on, so that one priced with a
    constant the logs did not determine can say so (NVLS on a system calibrated from ring-only
    logs rests on the nominal ``nvls_efficiency``). ``net_rdzv_us`` only with a `system` that
    has a rendezvous threshold."""
    a, L, D = algorithm, scale.local, scale.domains
    ch = {LL: "ll_ch_GBps", LL128: "ll128_ch_GBps", SIMPLE: "simple_ch_GBps"}[protocol]
    names = {"launch_us"}
    if a in ("ring", "tree"):
        names.add(ch)
        if L > 1:
            names.update(("intra_bw_GBps", "intra_hop_us"))
        if D > 1:
            names.update(("nic_bw_GBps", "net_hop_us", "net_step_us"))
            if protocol == LL:
                names.add("net_ll_ch_GBps")
            if protocol == SIMPLE and system is not None and system.net_rdzv_threshold_bytes is not None:
                names.add("net_rdzv_us")
        if a == "tree":
            names.add("tree_efficiency")
    elif a in ("nvls", "nvls_tree"):
        names.update(("intra_bw_GBps", "intra_hop_us", "nvls_efficiency"))
        if D > 1:
            names.update(("nic_bw_GBps", "net_hop_us", "tree_efficiency"))
    elif a in ("collnet_direct", "collnet_chain"):
        names.update(("intra_bw_GBps", "nic_bw_GBps", "net_hop_us"))
        if L > 1:
            names.add("intra_hop_us")
    elif a == "pat":
        names.update((ch, "nic_bw_GBps", "net_hop_us"))
        if L > 1:
            names.add("intra_bw_GBps")
    if D > 1 and protocol == SIMPLE:
        names.add("net_simple_base_us")
    return tuple(n for n in System.FIT_NAMES if n in names)


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
