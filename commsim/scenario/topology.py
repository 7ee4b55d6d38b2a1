"""Cluster topology: GPUs per node, the intra-node link, NICs per node, the fabric, presets.

A real cluster is two-level: NVLink/NVSwitch or PCIe inside a node, one or more NICs per node
into a network fabric. NCCL runs one ring (channel) per NIC, rail-aligned (GPU j of every node
talks through NIC j), so a node's network bandwidth is the sum over its NICs; a fabric that
is oversubscribed by a factor f (f:1 between leaf and spine) gives each node 1/f of that when
every node sends at once, as an all-reduce does.

:func:`resolve_preset` turns a preset name into the scenario's ``cluster`` keys (base units:
bytes/s, seconds), and :func:`expand_cluster` merges a scenario's ``cluster`` mapping with the
preset it names, so that ``cluster: {preset: dgx-h100, nodes: 32}`` works and any key the user
writes wins over the preset's.

Latencies in the presets are NCCL's own a-priori per-hop latencies for the Simple protocol
(src/graph/tuning.cc v2.19.3, hwLat[hw][Ring][Simple]: NVLINK 3.4 us, PCI 5.7 us, NET 14 us;
see NCCL src/graph/tuning.cc v2.19.3); they are priors, to be replaced by a calibration.
Bandwidths are the vendors' nominal figures, per direction.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from commsim.errors import ScenarioError
from commsim.network.fabric import Fabric, LevelPricing
from commsim.network.system import DGX1V_NVLINKS, ring_links
from commsim.scenario.spec import Cluster
from commsim.units import parse_count, parse_number, parse_rate

GBIT = 1e9 / 8  # bytes/s in one Gb/s
GBYTE = 1e9     # bytes/s in one GB/s

INTRA_KINDS = ("nvswitch", "nvlink", "pcie", "pcie-nop2p")

# NCCL v2.19.3 tuning.cc hwLat[...][Ring][Simple] (us): per-hop latencies used as the presets' alpha.
NCCL_NVLINK_HOP = 3.4e-6
NCCL_PCI_HOP = 5.7e-6
NCCL_NET_HOP = 14.0e-6


@dataclass(frozen=True)
class Topology:
    """One node type and the fabric between nodes. Bandwidths per direction, in bytes/s."""

    gpus_per_node: int
    intra_kind: str
    intra_bandwidth: float   # per GPU, to its node peers
    intra_latency: float     # per hop, seconds
    nics_per_node: int
    nic_bandwidth: float     # per NIC
    inter_latency: float     # per network hop, seconds
    oversubscription: float = 1.0
    source: str = ""
    # NVLinks per GPU pair where GPUs are joined directly and not every pair alike (hybrid
    # cube-mesh); None for NVSwitch/PCIe. A job on fewer GPUs gets only the links among them.
    nvlink_mesh: Optional[Tuple[Tuple[int, ...], ...]] = None
    gpu_arch: str = "hopper"  # the GPUs' generation: NCCL's tables (spec.GpuArch)

    def job_intra_bandwidth(self, gpus: int) -> Optional[float]:
        """Per-GPU intra-node bandwidth of a job on GPUs 0..gpus-1: ``intra_bandwidth`` scaled
        by the links its rings can drive over a GPU's links (:func:`ring_links`); 0 where no
        NVLink ring closes over those GPUs; None for a node without a mesh or a full node."""
        if self.nvlink_mesh is None or not 2 <= gpus < self.gpus_per_node:
            return None
        return self.intra_bandwidth * ring_links(self.nvlink_mesh, gpus) / sum(self.nvlink_mesh[0])

    @property
    def node_bandwidth(self) -> float:
        """What one node can push into the fabric while every node does: NICs x NIC / oversubscription."""
        return self.nics_per_node * self.nic_bandwidth / self.oversubscription

    def cluster_keys(self) -> dict:
        """The scenario ``cluster`` keys (without ``nodes``) in base units."""
        return {
            "gpus_per_node": self.gpus_per_node,
            "intra_node": {"bandwidth": self.intra_bandwidth, "latency": self.intra_latency},
            "inter_node": {"bandwidth": self.node_bandwidth, "latency": self.inter_latency},
            "intra_kind": self.intra_kind,
            "nics_per_node": self.nics_per_node,
            "nic_bandwidth": self.nic_bandwidth,
            "oversubscription": self.oversubscription,
            "gpu_arch": self.gpu_arch,
        }


PRESETS: dict[str, Topology] = {
    # NVIDIA DGX A100 datasheet and DGX A100 User Guide ("Hardware Overview"):
    "dgx-a100": Topology(
        gpus_per_node=8,                   # 8x A100 SXM4
        intra_kind="nvswitch",             # 6x NVSwitch, every GPU pair at full NVLink speed
        intra_bandwidth=300 * GBYTE,       # 3rd-gen NVLink: 600 GB/s per GPU bidirectional = 300 GB/s each way
        intra_latency=NCCL_NVLINK_HOP,     # NCCL tuning.cc hwLat[NVLINK][Ring][Simple]
        nics_per_node=8,                   # 8x single-port ConnectX-6 for the compute fabric
        nic_bandwidth=200 * GBIT,          # HDR InfiniBand 200 Gb/s per port
        inter_latency=NCCL_NET_HOP,        # NCCL tuning.cc hwLat[NET][Ring][Simple]
        oversubscription=1.0,              # DGX SuperPOD reference architecture: non-blocking fat tree
        source="NVIDIA DGX A100 datasheet; DGX A100 User Guide",
        gpu_arch="ampere",
    ),
    # NVIDIA DGX H100 datasheet and DGX H100/H200 User Guide ("Hardware Overview", "Network Ports"):
    "dgx-h100": Topology(
        gpus_per_node=8,                   # 8x H100 SXM5
        intra_kind="nvswitch",             # 4x third-gen NVSwitch
        intra_bandwidth=450 * GBYTE,       # 4th-gen NVLink: 900 GB/s per GPU bidirectional = 450 GB/s each way
        intra_latency=NCCL_NVLINK_HOP,     # NCCL tuning.cc hwLat[NVLINK][Ring][Simple]
        nics_per_node=8,                   # 8x ConnectX-7 (four dual-port OSFP cages) for the compute fabric
        nic_bandwidth=400 * GBIT,          # 400 Gb/s NDR InfiniBand / Ethernet per NIC
        inter_latency=NCCL_NET_HOP,        # NCCL tuning.cc hwLat[NET][Ring][Simple]
        oversubscription=1.0,              # DGX SuperPOD (H100) reference architecture: rail-optimized, non-blocking
        source="NVIDIA DGX H100 datasheet; DGX H100/H200 User Guide",
    ),
    # NVIDIA DGX B200 datasheet and DGX B200 User Guide ("Hardware Overview", "Network Ports"):
    "dgx-b200": Topology(
        gpus_per_node=8,                   # 8x B200
        intra_kind="nvswitch",             # 2x NVLink5 switch chips (NVLS capable)
        intra_bandwidth=900 * GBYTE,       # 5th-gen NVLink: 1.8 TB/s per GPU bidirectional = 900 GB/s each way
        intra_latency=NCCL_NVLINK_HOP,     # NCCL tuning.cc hwLat[NVLINK][Ring][Simple]
        nics_per_node=8,                   # 8x single-port ConnectX-7 for the compute fabric (BlueField-3 DPUs: storage)
        nic_bandwidth=400 * GBIT,          # 400 Gb/s InfiniBand / Ethernet per NIC
        inter_latency=NCCL_NET_HOP,        # NCCL tuning.cc hwLat[NET][Ring][Simple]
        oversubscription=1.0,              # DGX SuperPOD (B200) reference architecture: rail-optimized, non-blocking
        source="NVIDIA DGX B200 datasheet; DGX B200 User Guide",
        gpu_arch="blackwell",
    ),
    # NVIDIA HGX H100 datasheet (8-GPU board) + one 400G NIC per GPU, as in cloud instances such as
    # Azure ND H100 v5 ("8x 400 Gb/s NVIDIA Quantum-2 CX7 InfiniBand, 3.2 Tb/s per VM"):
    "hgx-h100-8x400g": Topology(
        gpus_per_node=8,                   # HGX H100 8-GPU baseboard
        intra_kind="nvswitch",             # NVSwitch on the baseboard
        intra_bandwidth=450 * GBYTE,       # HGX H100 datasheet: 900 GB/s NVLink per GPU bidirectional
        intra_latency=NCCL_NVLINK_HOP,     # NCCL tuning.cc hwLat[NVLINK][Ring][Simple]
        nics_per_node=8,                   # one NIC per GPU (rail-aligned)
        nic_bandwidth=400 * GBIT,          # 400 Gb/s per NIC (3.2 Tb/s per node)
        inter_latency=NCCL_NET_HOP,        # NCCL tuning.cc hwLat[NET][Ring][Simple]
        oversubscription=1.0,              # assume a non-blocking fabric; set oversubscription for others
        source="NVIDIA HGX H100 datasheet; Microsoft Azure ND H100 v5 documentation",
    ),
    # NVIDIA DGX-1 with Tesla V100 (DGX-1 datasheet; "NVIDIA DGX-1 With Tesla V100 System
    # Architecture" white paper, Fig. 4): NVLink2 hybrid cube-mesh, not a switch.
    "dgx1-v100": Topology(
        gpus_per_node=8,                   # 8x V100 SXM2
        intra_kind="nvlink",               # direct NVLinks; GPU pairs without one go through PCIe/QPI
        intra_bandwidth=150 * GBYTE,       # 6 NVLink2 links x 25 GB/s each way per GPU (a full node's rings drive all 6)
        intra_latency=NCCL_NVLINK_HOP,     # NCCL tuning.cc hwLat[NVLINK][Ring][Simple]
        nics_per_node=4,                   # 4x ConnectX-4/5 single-port for the compute fabric
        nic_bandwidth=100 * GBIT,          # EDR InfiniBand 100 Gb/s per port
        inter_latency=NCCL_NET_HOP,        # NCCL tuning.cc hwLat[NET][Ring][Simple]
        oversubscription=1.0,
        source="NVIDIA DGX-1 datasheet; NVIDIA DGX-1 With Tesla V100 System Architecture white paper",
        nvlink_mesh=DGX1V_NVLINKS,         # links per GPU pair (white paper Fig. 4)
        gpu_arch="volta",
    ),
    # AWS EC2 g4dn.metal (instance-type documentation): 8x NVIDIA T4 on PCIe, no NVLink, 100 Gb/s
    # networking with EFA. T4 is a PCIe Gen3 x16 card (NVIDIA T4 datasheet).
    "pcie-8gpu": Topology(
        gpus_per_node=8,                   # 8x T4
        intra_kind="pcie",                 # peer-to-peer over PCIe switches
        intra_bandwidth=15.75 * GBYTE,     # PCIe Gen3 x16: 8 GT/s x 16 lanes x 128b/130b = 15.75 GB/s each way
        intra_latency=NCCL_PCI_HOP,        # NCCL tuning.cc hwLat[PCI][Ring][Simple]
        nics_per_node=1,                   # one ENA/EFA interface
        nic_bandwidth=100 * GBIT,          # 100 Gb/s
        inter_latency=NCCL_NET_HOP,        # NCCL tuning.cc hwLat[NET][Ring][Simple]
        oversubscription=1.0,
        source="AWS EC2 g4dn instance types; NVIDIA T4 datasheet; PCI-SIG PCIe 3.0",
        gpu_arch="volta",                  # T4 is Turing (sm_75): NCCL's tables give it the Volta row
    ),
    # Commodity hosts, one GPU each, on Ethernet (IEEE 802.3by 25GBASE-R line rate):
    "ethernet-25g": Topology(
        gpus_per_node=1,                   # one worker per host
        intra_kind="pcie",                 # unused with one GPU per node
        intra_bandwidth=15.75 * GBYTE,     # PCIe Gen3 x16 (unused with one GPU per node)
        intra_latency=NCCL_PCI_HOP,        # NCCL tuning.cc hwLat[PCI][Ring][Simple] (unused)
        nics_per_node=1,
        nic_bandwidth=25 * GBIT,           # 25 Gb/s Ethernet
        inter_latency=NCCL_NET_HOP,        # NCCL tuning.cc hwLat[NET][Ring][Simple]; TCP sockets are slower: calibrate
        oversubscription=1.0,
        source="IEEE 802.3by (25 Gb/s Ethernet)",
    ),
    # Same with 100 Gb/s Ethernet (IEEE 802.3ba/802.3bj 100GBASE-R line rate):
    "ethernet-100g": Topology(
        gpus_per_node=1,
        intra_kind="pcie",
        intra_bandwidth=15.75 * GBYTE,     # PCIe Gen3 x16 (unused with one GPU per node)
        intra_latency=NCCL_PCI_HOP,        # (unused)
        nics_per_node=1,
        nic_bandwidth=100 * GBIT,          # 100 Gb/s Ethernet
        inter_latency=NCCL_NET_HOP,        # NCCL tuning.cc hwLat[NET][Ring][Simple]; calibrate for TCP
        oversubscription=1.0,
        source="IEEE 802.3ba (100 Gb/s Ethernet)",
    ),
}

OVERSUBSCRIPTION_EXPECTED = "expected a factor >= 1 (1 = non-blocking, 2 = 2:1), got {:g}"


class TopologyError(ScenarioError):
    """A bad preset name or topology key: ``SOURCE: PATH: MESSAGE`` like every scenario error
    (an :class:`commsim.errors.InputError`, built through its ``__init__``)."""


def resolve_preset(name: str, source: str = "cluster", path: str = "cluster.preset") -> dict:
    """The scenario ``cluster`` keys of preset ``name`` (everything but ``nodes``), base units."""
    if not isinstance(name, str) or name not in PRESETS:
        raise TopologyError(source, path, f"expected one of {', '.join(PRESETS)}, got {name!r}")
    return PRESETS[name].cluster_keys()


def expand_cluster(cluster: dict, source: str = "scenario", path: str = "cluster") -> dict:
    """Merge a scenario's ``cluster`` mapping over the preset it names (if any).

    Keys the user writes win, one level deep for ``intra_node``/``inter_node``. If the user
    writes ``nics_per_node``, ``nic_bandwidth`` or ``oversubscription`` but not
    ``inter_node.bandwidth``, the node bandwidth is derived as nics x NIC bandwidth /
    oversubscription (with or without a preset, once both NIC keys are known; units as in the
    scenario: ``nic_bandwidth: 200 Gbps``). Other values stay as written, for the loader to
    parse. Returns a new mapping. Errors name ``source`` (the file) and the key path under
    ``path``.
    """
    if not isinstance(cluster, dict):
        raise TopologyError(source, path, f"expected a mapping, got {type(cluster).__name__}")
    user = copy.deepcopy(cluster)
    base = resolve_preset(user.pop("preset"), source, f"{path}.preset") if "preset" in user else {}
    merged = dict(base)
    if "preset" in cluster and "gpus_per_node" in user:
        _mesh_bandwidth(PRESETS[cluster["preset"]], user, merged, source, path)
    for key, value in user.items():
        if key in ("intra_node", "inter_node") and isinstance(value, dict) and key in base:
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    user_inter = user.get("inter_node") if isinstance(user.get("inter_node"), dict) else {}
    nic_keys = ("nics_per_node", "nic_bandwidth", "oversubscription")
    derive = "bandwidth" not in user_inter and any(k in user for k in nic_keys)
    if derive and all(k in merged for k in ("nics_per_node", "nic_bandwidth")):
        inter = merged.get("inter_node", {})
        if not isinstance(inter, dict):
            return merged  # the loader reports cluster.inter_node: expected a mapping
        nics = _parsed(parse_count, merged["nics_per_node"], source, f"{path}.nics_per_node")
        nic = _parsed(parse_rate, merged["nic_bandwidth"], source, f"{path}.nic_bandwidth")
        over = _parsed(parse_number, merged.get("oversubscription", 1.0), source, f"{path}.oversubscription")
        if over < 1:
            raise TopologyError(source, f"{path}.oversubscription", OVERSUBSCRIPTION_EXPECTED.format(over))
        merged["inter_node"] = {**inter, "bandwidth": nics * nic / over}
    return merged


def _mesh_bandwidth(preset: Topology, user: dict, merged: dict, source: str, path: str) -> None:
    """On a preset with an NVLink mesh, a job on fewer GPUs than the node's gets the links among
    its GPUs only: ``intra_node.bandwidth`` from them unless the user writes one."""
    user_intra = user.get("intra_node") if isinstance(user.get("intra_node"), dict) else {}
    if preset.nvlink_mesh is None or "bandwidth" in user_intra:
        return
    gpus = _parsed(parse_count, user["gpus_per_node"], source, f"{path}.gpus_per_node")
    bandwidth = preset.job_intra_bandwidth(gpus)
    if bandwidth is None:
        return
    if bandwidth == 0:
        raise TopologyError(source, f"{path}.gpus_per_node",
                            f"expected a GPU count whose GPUs 0..{gpus - 1} close an NVLink ring on this preset, "
                            f"got {gpus} (a GPU has a single NVLink into the set; rings through PCIe/QPI are not "
                            "modelled: set intra_node.bandwidth)")
    merged["intra_node"] = {**merged["intra_node"], "bandwidth": bandwidth}


def _parsed(parse, value, source, path):
    try:
        return parse(value)
    except ValueError as exc:
        raise TopologyError(source, path, str(exc)) from None


def fabric(preset: str, nodes: int) -> Fabric:
    """The :class:`commsim.network.fabric.Fabric` of ``nodes`` nodes of preset ``preset``."""
    t = PRESETS.get(preset)
    if t is None:
        resolve_preset(preset)  # raises with the list of names
    return Fabric(nodes=nodes, gpus_per_node=t.gpus_per_node, intra_latency=t.intra_latency,
                  intra_bandwidth=t.intra_bandwidth, inter_latency=t.inter_latency,
                  inter_bandwidth=t.node_bandwidth, nics_per_node=t.nics_per_node, intra_kind=t.intra_kind,
                  gpu_arch=t.gpu_arch)


def cluster_fabric(cluster: Cluster, pricing: Optional[LevelPricing] = None) -> Fabric:
    """A scenario's cluster as a :class:`commsim.network.fabric.Fabric`: ``inter_node.bandwidth``
    is the node's aggregate network bandwidth (see :func:`resolve_preset`); ``pricing`` (a
    calibration) replaces the levels' constants per collective size."""
    return Fabric(
        nodes=cluster.nodes,
        gpus_per_node=cluster.gpus_per_node,
        intra_latency=cluster.intra_node.latency,
        intra_bandwidth=cluster.intra_node.bandwidth,
        inter_latency=cluster.inter_node.latency,
        inter_bandwidth=cluster.inter_node.bandwidth,
        nics_per_node=cluster.nics_per_node,
        intra_kind=cluster.intra_kind,
        gpu_arch=cluster.gpu_arch,
        pricing=pricing,
    )


def ring_crossings(cluster: Cluster) -> np.ndarray:
    """Whether the ring hop into rank i crosses the network (:meth:`Fabric.ring_crossings`)."""
    return cluster_fabric(cluster).ring_crossings()


def ring_hop_links(cluster: Cluster) -> Tuple[np.ndarray, np.ndarray]:
    """Per-hop (latency, bandwidth) of the cluster's node-major ring, indexed by receiving rank
    (:meth:`Fabric.ring_links`; nominal links, no stragglers)."""
    return cluster_fabric(cluster).ring_links()
