"""The release tables NCCL's tuner reads, the protocols' constants and a job's scale: the lowest
module of :mod:`commsim.collectives.nccl`, which every other one imports.

:func:`nccl_table` picks the constants of a version's release line
(:data:`~commsim.collectives.nccl_constants.NCCL_TABLES`); :class:`Scale` is a job's shape on a
:class:`~commsim.network.system.System` (D network nodes, L ranks per node, the NICs a node
drives); :func:`bus_factor` is nccl-tests' busbw / algbw.

Protocols: ``LL`` (8-byte lines with a 4-byte flag: half the bandwidth, lowest latency),
``LL128`` (128-byte lines with an 8-byte flag: 120/128), ``Simple`` (full bandwidth,
fences and flags per chunk: highest per-hop latency).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

from commsim.collectives.nccl_constants import BLACKWELL_RELEASES, NCCL_TABLES, NET_OVERHEAD_BY_CPU
from commsim.errors import InputError
from commsim.network.system import System


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


def version_tuple(version: str) -> Tuple[int, int]:
    major, minor = (int(x) for x in str(version).split(".")[:2])
    return major, minor


def release(version: str) -> Tuple[int, int, Optional[int]]:
    """(major, minor, patch) of a version string; patch None when the string has none."""
    parts = [int(x) for x in str(version).split(".")[:3]]
    return parts[0], parts[1], (parts[2] if len(parts) > 2 else None)


def ring_ll_factor(version: str, kind: str, network_nodes: int) -> float:
    """NCCL's Ring/LL bus-bandwidth factor, which changed in 2.21 (not at the 2.20 table split):
    v2.18.5-1..v2.20.5-1 tuning.cc ``busBw * ((nNodes > 1 || coll == ncclFuncAllReduce ||
    coll == ncclFuncReduce) ? 1.0/4.0 : 1.0/3.0)``; v2.21.5-1 on ``busBw * .5``."""
    if version_tuple(version) >= (2, 21):
        return 0.5
    return 0.25 if (network_nodes > 1 or kind == "all_reduce") else 1.0 / 3.0


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


def log2i(x: int) -> int:
    return int(math.floor(math.log2(x))) if x >= 1 else 0
