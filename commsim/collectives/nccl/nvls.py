"""NVLS, NVSwitch multicast and in-switch reduction (Hopper+ with NVSwitch): the NVLS graph NCCL
searches (:func:`nvls_graph`) and its heads per MNNVL clique (:func:`clique_splits`,
:func:`nvls_heads`), the NICs and CTAs NVLS uses (:func:`nvls_tree_nics`, :func:`nvls_channels`),
its chunks, the tree an NVLS tree runs across nodes (:func:`nvls_tree_height`), and the time its
chunk pipelines add to the bandwidth term (:func:`nvls_pipeline_us`, :func:`nvls_tree_pipeline_us`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import List, Sequence, Tuple

import numpy as np

from commsim.collectives.nccl.graph import search_speed, search_top_speed, topo_speeds
from commsim.collectives.nccl.scale import Scale, version_tuple
from commsim.collectives.nccl.simple import SIMPLE_STEP_BYTES
from commsim.collectives.nccl_constants import (
    NVLS_CHUNK_BYTES, NVLS_NCHANNELS_SM90, NVLS_NCHANNELS_SM100, NVLS_NCHANNELS_SM100_NVL, NVLS_TREE_MAX_CHUNK_BYTES,
    NVLS_TREE_SMALL_CHUNK_NODES,
)
from commsim.network.system import System


# src/include/device.h NCCL_MAX_NVLS_ARITY: at most this many NVLS heads (graph channels).
NVLS_MAX_ARITY = 32


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
    if scale.domains == 1 and version_tuple(system.nccl_version) >= (2, 27):
        return NVLS_NCHANNELS_SM100_NVL
    return NVLS_NCHANNELS_SM100


def nvls_tree_chunk_bytes(sizes, version: str, nodes: int, concurrent_ops: int) -> np.ndarray:
    """NVLS tree's chunk (bytes) per size: src/enqueue.cc calcCollChunking (v2.21.5-1 .. v2.29.2-1,
    the same text): start from NCCL_NVLS_CHUNKSIZE (128 KiB; v2.19/2.20 the 512 KiB Simple step),
    cap it at 64 KiB once ``comm->nNodes >= 4`` (NCCL_NVLSTREE_MAX_CHUNKSIZE's default), then
    shrink while ``nBytes < X * concurrentOps * chunkSize`` (X = 32, 16, 4, 1 down to 256, 128, 64,
    32 KiB), concurrentOps = nChannels x nvls.nHeads. `nodes` is comm->nNodes (NVLink domains)."""
    S = np.asarray(sizes, dtype=float)
    if version_tuple(version) >= (2, 21):
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
