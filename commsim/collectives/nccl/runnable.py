"""Which (algorithm, protocol) pairs NCCL can run for a collective on a system at a scale.

:func:`runnable` applies tuning.cc's per-function algorithm lists and enable rules (enqueue.cc
updateCollCostTable), among them LL128's rule on the GPU-NIC path, which NCCL's internal TCP
socket transport diverts through the CPU (:func:`net_path_seen`); :func:`parse_selection` reads
an NCCL_ALGO / NCCL_PROTO style selection.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

from commsim.collectives.nccl.scale import LL128, SIMPLE, Scale, nccl_table, release, version_tuple
from commsim.errors import InputError
from commsim.network.system import System


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
        major, minor, patch = release(system.nccl_version)
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
        if not nccl_table(system.nccl_version)["pat"] or version_tuple(system.nccl_version) < (2, 23):
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
    body = s[1:] if negate else s
    if body.startswith("^"):  # "^^ring" read as "^ring": a typo, not a double negation
        raise InputError(source, key, f"expected one '^' at most, before the whole list, got {s!r}")
    items = [t.strip() for t in body.split(",")]
    if not all(items):  # "ring," or "ring,,tree": a typo, as the command-line lists treat it
        raise InputError(source, key, f"expected a comma-separated list without empty items, got {s!r}")
    # NCCL's own spellings are accepted too: NCCL_ALGO=NVLSTree, CollnetDirect (no underscore)
    lower = {n.lower().replace("_", ""): n for n in names}
    chosen = []
    for it in items:
        if it.lower().replace("_", "") not in lower:
            raise InputError(source, key, f"unknown name {it!r} (expected {', '.join(names)}, comma-separated, optionally after ^)")
        chosen.append(lower[it.lower().replace("_", "")])
    if negate:
        return tuple(n for n in names if n not in chosen)
    return tuple(n for n in names if n in chosen)
