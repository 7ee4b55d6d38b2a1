"""The physical time of a given (algorithm, protocol) (:func:`physical_time_us`), from the
system's physical constants (link bandwidths and hop latencies per level, NICs, tiers, protocol
efficiencies and per-channel ceilings). These are what a calibration fits and what transfers
across scale; :func:`priced_by` names the ones a price reads.

Algorithms (AllReduce unless noted):

- ``ring`` (also AllGather/ReduceScatter): 2(n-1) steps (n-1 for AG/RS), of which 2(D-1)
  (D-1) cross the network, D network nodes. Bus bandwidth = the slowest level: the GPU's
  intra-node bandwidth, or the node's NICs in use (one NIC per searched channel, at most the
  NICs near the GPUs the job uses; the duplicated channels share them,
  :func:`~commsim.collectives.nccl.graph.nics_driven`).
- ``tree``: NCCL's double binary tree across nodes with an intra-node chain. Each GPU moves
  2S through its node links; a node moves S through its NICs when D = 2 (each node's data
  crosses the network once, which is why 2-node busbw exceeds the NIC rate) and 2S when
  D > 2. Latency 2((L-1) h_intra + h h_net), h the height of the btree NCCL connects
  (:func:`~commsim.collectives.nccl.nvls.nvls_tree_height`; NCCL's estimate, the pick, uses
  log2i(D)).
- ``nvls``: NVSwitch multicast/in-switch reduction (Hopper+ with NVSwitch); one node, or
  several with CollNet. ``nvls_tree``: NVLS inside the node, tree across nodes, its chunks
  pipelined through the tree NCCL connects
  (:func:`~commsim.collectives.nccl.nvls.nvls_tree_pipeline_us`).
- ``collnet_direct`` / ``collnet_chain``: in-network reduction (SHARP): a node's data
  crosses the network once per direction at any node count.
- ``pat`` (AllGather/ReduceScatter, one GPU per node, NCCL >= 2.23): Bruck-like
  log-latency algorithm.

Small sizes use fewer channels (enqueue.cc ``topoGetAlgoInfo``: while nBytes < nc * nThreads
* threadThreshold, nc--): the physical model applies that reduction to the per-channel
ceilings and to the NICs in use (a channel drives one NIC, :func:`channels_used`).

Where the network plugin sends long messages by rendezvous, a Simple step across nodes pays
its rendezvous costs (:mod:`commsim.collectives.nccl.simple`). Sizes are nccl-tests ``size``
bytes (AG/RS: the whole gathered buffer). Times in us.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from commsim.collectives.nccl.estimate import intra_hw_of, tree_correction
from commsim.collectives.nccl.graph import nccl_channels, nics_driven, ring_graph
from commsim.collectives.nccl.nvls import nvls_pipeline_us, nvls_tree_height, nvls_tree_nics, nvls_tree_pipeline_us
from commsim.collectives.nccl.scale import (
    LL, LL128, MAX_THREADS, PROTO_EFFICIENCY, PROTOCOLS, SIMPLE, THREAD_THRESHOLD, Scale, bus_factor, log2i,
    nccl_table,
)
from commsim.collectives.nccl.simple import (
    net_rendezvous_step_us, ring_loop_bubble_us, simple_ring_loops, tree_depth, tree_simple_chunks,
)
from commsim.collectives.nccl_constants import NCCL_TABLES
from commsim.network.system import System


def _physical_table(version: str) -> dict:
    """The table whose latency ratios price a hop in :func:`physical_time_us`. The Tree/Simple
    latencies of 2.18 and of 2.20-2.22 (see :func:`nccl_table`) change what NCCL picks, not how
    long a hop takes on the hardware, so those hops are priced with the ratios of the table
    they were priced with before (2.19's, the later one's)."""
    t = nccl_table(version)
    return {id(NCCL_TABLES["2.18"]): NCCL_TABLES["2.19"], id(NCCL_TABLES["2.20"]): NCCL_TABLES["2.30"]}.get(id(t), t)


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

    intra_hw = intra_hw_of(system)
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
        alg_bw = np.minimum(alg_link * eff, ceiling / 2.0) * tree_correction(t, protocol, S)
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
        lat_s = lat + log2i(D) * (h_net / 3.5) + n * 2.8
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
