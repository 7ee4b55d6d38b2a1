"""NCCL's own a-priori estimate: a port of tuning.cc (NVIDIA/nccl src/graph/tuning.cc
``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``) with its constants
(:data:`~commsim.collectives.nccl_constants.NCCL_TABLES`).

NCCL picks the (algorithm, protocol) with the smallest estimate (src/enqueue.cc
``topoGetAlgoInfo``), so :func:`nccl_estimate_us` decides *what runs*, never how long it takes
(:mod:`commsim.collectives.nccl.physical` prices that). NCCL's estimate does not reduce the
channels at small sizes as the physical model does, which is one reason it is too fast at mid
sizes across nodes.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from commsim.collectives.nccl.graph import nccl_channels, ring_graph, topo_speeds
from commsim.collectives.nccl.nvls import NvlsGraph, nvls_graph
from commsim.collectives.nccl.scale import (
    LL, LL128, NET_OVERHEAD_US, PROTOCOLS, SIMPLE, Scale, log2i, nccl_table, ring_ll_factor, version_tuple,
)
from commsim.network.system import System


def intra_hw_of(system: System) -> str:
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
        bw, nvls_ratio = _nvls_channel_bw(kind, a, g, t, ci, idx2, D, ppn, version_tuple(system.nccl_version))
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
    intra_hw = intra_hw_of(system)
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
        lat += 2 * ((L - 1) * intra_lat + log2i(D) * inter_lat)
    elif a == "collnet_direct":
        lat += 2 * (min(1, L - 1) * intra_lat + (L - 1) * 0.4) + inter_lat
    elif a == "collnet_chain":
        lat += 2 * (L - 1) * intra_lat + inter_lat
    elif a == "nvls":
        lat = intra_lat + (inter_lat if D > 1 else 0.0)
    elif a == "nvls_tree":
        lat += intra_lat + 2 * log2i(D) * inter_lat
    elif a == "pat":
        lat += log2i(D) * (inter_lat / 3.5) + n * 2.8
    bw_s = np.full_like(S, bus)
    if a == "tree" and kind == "all_reduce":
        bw_s = bw_s * tree_correction(t, protocol, S)
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


def tree_correction(t: dict, protocol: str, S: np.ndarray) -> np.ndarray:
    """treeCorrectionFactor[protocol][log2(nBytes/64)], 1 outside the table (tuning.cc)."""
    corr = np.asarray(t["tree_corr"][protocol], dtype=float)
    with np.errstate(divide="ignore"):
        log_size = np.floor(np.log2(np.maximum(S, 1.0) / 64.0)).astype(int)
    ok = (log_size >= 0) & (log_size < min(23, len(corr)))
    return np.where(ok, corr[np.clip(log_size, 0, len(corr) - 1)], 1.0)
