"""NCCL's topology search (src/graph/search.cc ncclTopoCompute): the link speeds NCCL's topology
sees, the speed arrays it searches with, and the ring graph with the channels it gives.

:func:`topo_speeds` is what NCCL reads from the hardware (not what a collective achieves);
:func:`ring_graph` is the ring graph searched on those speeds; :func:`nccl_channels` the
channels a ring or tree collective runs on; :func:`nics_driven` the distinct NICs its channels
drive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Tuple

from commsim.collectives.nccl.scale import Scale, release, version_tuple
from commsim.collectives.nccl_constants import (
    MAXCHANNELS, PCI_BW_PER_LINE, SM90_SPEED_ARRAY_INTER, SM90_SPEED_ARRAY_INTER_2_18, SM90_SPEED_ARRAY_INTRA,
    SM100_SPEED_ARRAY_INTER, SM100_SPEED_ARRAY_INTRA, SM_NVLINK_BW, SPEED_ARRAY_INTER, SPEED_ARRAY_INTRA,
)
from commsim.network.system import NVLINK_MESHES, System, ring_links


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
    major, minor = version_tuple(system.nccl_version)
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
    return MAXCHANNELS["2.25" if version_tuple(version) >= (2, 25) else "2.18"]


def search_speeds_intra(compcap_index: int, version: str) -> Tuple[float, ...]:
    """The speed array ncclTopoCompute searches a one-node graph with (src/graph/search.cc, see
    :data:`~commsim.collectives.nccl_constants.SM90_SPEED_ARRAY_INTRA`): speedArrayIntra before
    Hopper, sm90SpeedArrayIntra by release on Hopper (and Blackwell before 2.25),
    sm100SpeedArrayIntra by release on Blackwell from 2.25."""
    major, minor = version_tuple(version)
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


def search_speeds_inter(compcap_index: int, version: str) -> Tuple[float, ...]:
    """The speed array ncclTopoCompute searches inter-node graphs with (src/graph/search.cc, see
    :mod:`commsim.collectives.nccl_constants`): speedArrayInter before Hopper, sm90SpeedArrayInter
    on Hopper (and Blackwell before 2.27), sm100SpeedArrayInter by release on Blackwell from 2.27.
    A version without a patch level is the line's latest release."""
    major, minor, patch = release(version)
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
    major, minor, patch = release(version)
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
