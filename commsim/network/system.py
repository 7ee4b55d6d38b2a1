"""A physical description of a GPU cluster, for NCCL-style cost models that transfer across scale.

A capacity model earns its keep by predicting the cluster you are about to buy from the two
nodes you can measure. Fitted curve constants of one run do not transfer (a per-step alpha
fitted on 2 ranks is a protocol artefact, not a hop latency); physical constants do: each link
level's bandwidth and per-hop latency, NICs per node, rails, switch tiers and
oversubscription, and the few protocol/algorithm efficiencies of the collective library.
:class:`System` holds exactly those, with units in the field names and, per field, where the
nominal value came from (:attr:`System.sources`); a calibration replaces some of them with
fitted values and says so in the same mapping.

Link levels (``intra_kind``):

- ``nvswitch``: every GPU pair at full NVLink speed through NVSwitch (DGX/HGX 8-GPU boards,
  NVL72 racks); NVLS (NVSwitch multicast/reduction) where ``nvls`` is set (Hopper and later).
- ``nvlink``: direct NVLink between GPUs without a switch (4-GPU boards, hybrid cube-mesh).
- ``pcie_p2p``: PCIe with peer-to-peer (GPUDirect P2P) between GPUs.
- ``pcie_host``: PCIe without P2P: every byte is staged through host memory.

Bandwidths are per direction, in GB/s (1e9 bytes/s, the nccl-tests unit), and are what a
collective *achieves* on the link (line rate times an achievable fraction, see
:data:`ACHIEVABLE_FRACTION`), since that is what a measurement determines. Latencies are per
hop, in microseconds, for NCCL's Simple protocol; the other protocols scale from them with
NCCL's own ratios (see :mod:`commsim.collectives.nccl.physical`).

Pure module: numbers and small closed forms only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields, replace
from typing import Dict, Mapping, Optional, Tuple

from commsim.errors import InputError
from commsim.network.fabric import GPU_ARCHS, Fabric

ARCHS = GPU_ARCHS  # NCCL's compute-capability rows (tuning.cc)
INTRA_KINDS = ("nvswitch", "nvlink", "pcie_p2p", "pcie_host")
TRANSPORTS = ("rdma", "socket")  # NCCL's IB/RoCE/EFA/libfabric plugins vs its internal TCP sockets
CPU_VENDORS = ("intel", "amd", "arm")
# NCCL's per-step overhead of a ring that crosses nodes (src/graph/tuning.cc getNetOverhead,
# 2.18-2.30: 1 us on Intel, 2 us on AMD, 1 otherwise; x3 for Simple): every step of such a
# ring, NVLink steps included, waits at least this long (the network proxy's step clock).
NET_STEP_US_BY_CPU = {"intel": 1.0, "amd": 2.0, "arm": 1.0}

# PCIe path from a GPU to its nearest NIC, in NCCL's order (src/graph/topo.h PATH_PIX 3 <
# PATH_PXB 4 < PATH_PXN 5 < PATH_PHB 6 < PATH_SYS 7): "pix" one PCIe switch, "pxb" several
# switches, "pxn" through a peer GPU over NVLink, "phb" through the CPU's host bridge, "sys"
# across CPU sockets. What nvidia-smi topo -m prints between a GPU and its NIC.
NIC_PATHS = ("pix", "pxb", "pxn", "phb", "sys")

# The generations whose NVSwitch does NVLS (multicast and in-switch reduction: NVSwitch 3, Hopper on)
NVLS_ARCHS = ("hopper", "blackwell")

# An NCCL release as its tables are picked by it: 2.MINOR or 2.MINOR.PATCH (ASCII digits)
NCCL_RELEASE = re.compile(r"2\.[0-9]{1,3}(\.[0-9]{1,3})?", re.ASCII)

# Achievable fraction of line rate per link kind, for nominal (uncalibrated) descriptions.
# Measured large-message bus bandwidth over line rate on well-configured systems:
#   NVLink/NVSwitch rings 0.78-0.80 (H100 8-GPU all_gather 362 of 450 GB/s; A100 ~230 of 300),
#   PCIe P2P ~0.8 of the x16 rate (Gen3 x16 15.75 GB/s -> ~12-13 GB/s),
#   PCIe through host memory ~0.5 (two PCIe crossings and a host copy per byte),
#   RDMA networks 0.95-0.98 (NCCL's own NET_BW is 12 GB/s for 12.5 GB/s = 100 Gb/s).
# One global table: never a per-system value.
ACHIEVABLE_FRACTION = {
    "nvswitch": 0.80,
    "nvlink": 0.80,
    "pcie_p2p": 0.80,
    "pcie_host": 0.50,
    "rdma": 0.95,
    # NCCL's internal socket transport copies through host memory and a TCP stack; there is no
    # published achievable fraction, so the nominal value is a guess marked as such in sources.
    "socket": 0.40,
}

# NCCL's a-priori per-hop latencies for the Simple protocol (src/graph/tuning.cc, 2.19-2.30:
# hwLatencies[NVLINK|PCI|NET][Ring][Simple] = 3.4, 5.7, 14.0 us): priors for the hop latencies.
NOMINAL_HOP_US = {"nvswitch": 3.4, "nvlink": 3.4, "pcie_p2p": 5.7, "pcie_host": 5.7, "network": 14.0}


# Line rate of one NVLink, per direction, GB/s, by the GPU generation's NVLink: NVLink2 (V100) and
# NVLink3 (A100) 25 (6 x 25 = 150, 12 x 25 = 300 each way per GPU, DGX-1/DGX A100 datasheets),
# NVLink4 (H100) 25 (18 links, 900 GB/s bidirectional), NVLink5 (B200) 50 (18 links, 1.8 TB/s
# bidirectional; NVIDIA NVLink page). A GPU's link count is its line rate over this.
NVLINK_LINK_LINE_GBps = {"volta": 25.0, "ampere": 25.0, "hopper": 25.0, "blackwell": 50.0}

# The bandwidth constants that a physical line rate bounds, and the field holding that rate.
LINE_RATE_OF = {"intra_bw_GBps": "intra_line_GBps", "nic_bw_GBps": "nic_line_GBps"}


@dataclass(frozen=True)
class SwitchTier:
    """One switch tier above the leaves: how many nodes share one switch of the tier below it,
    the tier's oversubscription (downlink : uplink bandwidth) and the latency one crossing adds."""

    nodes_below: int
    oversubscription: float = 1.0
    latency_us: float = 0.0


@dataclass(frozen=True)
class System:
    """One node type and the fabric between nodes; see the module docstring for units.

    ``nics_per_node`` NICs of ``nic_bw_GBps`` each; with ``rails`` GPU j of every node talks
    through its own nearby NIC (rail-optimised), so a job with G GPUs per node uses the NICs
    near those G GPUs. ``nvlink_domain_nodes`` > 1 is a multi-node NVLink domain (GB200 NVL72:
    18 hosts of 4 GPUs): hosts inside one domain talk over NVLink, domains over the network.
    """

    name: str
    gpu_arch: str
    gpus_per_node: int
    intra_kind: str
    intra_bw_GBps: float
    intra_hop_us: float
    nics_per_node: int
    nic_bw_GBps: float
    net_hop_us: float
    transport: str = "rdma"
    rails: bool = True
    tiers: Tuple[SwitchTier, ...] = ()
    nvls: bool = False
    collnet: bool = False
    nvlink_domain_nodes: int = 1
    cpu_vendor: str = "intel"
    nccl_version: str = "2.30"
    # Not read by the NCCL model any more: the channel count comes from NCCL's ring search on the
    # link speeds (collectives.nccl.graph.ring_graph / nccl_channels). Kept so that the system
    # descriptions calibration files hold (System.describe writes every field) still read back.
    intra_channels: int = 16
    # The best GPU-NIC PCIe path (NIC_PATHS): NCCL's inter-node graphs take it as typeInter,
    # which gates LL128 across nodes (tuning.cc); "pxb" (GPU and NIC under PCIe switches) is
    # what DGX/HGX boards have.
    nic_path: str = "pxb"
    # Per-step floor (us, LL/LL128; x3 for Simple) of a ring across nodes; None: NCCL's
    # getNetOverhead for the CPU vendor (NET_STEP_US_BY_CPU). A calibration fits it.
    net_step_us: Optional[float] = None
    # True where that per-step cost is the network plugin's per-message CPU cost, which the rank's
    # one proxy thread pays for each launched channel's LL step in turn (aws-ofi-nccl over
    # libfabric CXI with software receive matching, NCCL's socket transport); False for NCCL's
    # IB verbs transport, whose posts cost far less than getNetOverhead (one floor per step).
    net_step_per_channel: bool = False
    # The latency (us) the network plugin reports for a NIC (ncclNetProperties_t.latency; NCCL's own
    # IB and socket transports report 0, aws-ofi-nccl its platform's figure, 75 on p5). NCCL adds
    # it to its estimate's network latency (twice for Simple); it picks, it does not price.
    nic_reported_latency_us: float = 0.0
    # Protocol/algorithm efficiencies of the collective library on this hardware (priors from
    # NCCL's tuning.cc where it has one; fitted by a calibration):
    nvls_efficiency: float = 0.85      # nvlsEfficiency[arch] (Hopper .85, Blackwell .74)
    tree_efficiency: float = 0.92      # tree busBw x .92 (tuning.cc "Tree ... busBw * .92")
    launch_us: float = 4.0             # host launch + completion per collective, beyond NCCL's baseLat
    # per graph channel (the ring search's, before ncclTopoPostset doubles them), as tuning.cc
    # applies perChMax*Bws (collectives.nccl.physical.protocol_ceiling_GBps):
    simple_ch_GBps: float = 40.0       # one channel's Simple throughput (perChMaxTreeBws-like)
    ll128_ch_GBps: float = 36.7        # perChMaxRingLL128Bws[arch]
    # LL's whole-GPU ceiling, not per channel despite the name (kept: calibration files hold it):
    # tuning.cc caps LL's total busBw at llMaxBws[arch][N1]
    ll_ch_GBps: float = 141.0
    # One channel's LL rate across nodes (GB/s of payload, per launched channel): the network
    # transport keeps LL's buffers in host memory (src/transport/net.cc v2.18.5-1 line 620,
    # ``NCCL_NET_MAP_ADD_POINTER(map, 0, 0 /*p == NCCL_PROTO_LL*/, ...)``: never device memory,
    # whatever GDR allows), so every LL line crosses PCIe into host memory and the send proxy
    # checks both flags of every line of a step before it posts it (net.cc line 978-986,
    # ``for (int i=0; i<nFifoLines; i++) if (f1[0] != flag || f2[0] != flag)``). That is a rate
    # per channel (one FIFO per channel), which the total llMaxBw does not represent. None: the
    # per-architecture prior (:data:`_NET_LL_CH`); a calibration from a multi-node log fits it.
    net_ll_ch_GBps: Optional[float] = None
    # Line rates (per direction, GB/s) of one GPU's intra-node links and of one NIC, from the
    # datasheet; None where the description does not say. A fitted bandwidth never exceeds them.
    intra_line_GBps: Optional[float] = None
    nic_line_GBps: Optional[float] = None
    # The largest message (bytes) the network plugin sends eagerly; a longer one goes by
    # rendezvous (its payload pulled by the receiver once matched), which costs each such
    # message :attr:`net_rdzv_us` more. None: no rendezvous cost is priced (NCCL's own IB and
    # socket transports write every message eagerly into a posted receive buffer).
    net_rdzv_threshold_bytes: Optional[int] = None
    # Per-message rendezvous cost (us) of a Simple step's message above that threshold; read only
    # where the threshold is set. Prior: one more network hop (NOMINAL_HOP_US["network"]), a guess.
    net_rdzv_us: float = 14.0
    # Base latency (us) of a collective whose Simple traffic crosses the network (ring, tree, NVLS
    # tree, CollNet), once per collective whatever its steps, on top of NCCL's baseLat and launch_us.
    # NCCL's a-priori table has a base latency per (algorithm, protocol) but none for the network
    # path; the Polaris logs measure one (an all_reduce and an all_gather of one size at 2x4 share
    # 86-112 us; the same bytes per rank at 2x4 and 8x4 or 128x4 give 115-205 us, the same at both).
    # Prior: one more network hop (NOMINAL_HOP_US["network"]), a guess.
    net_simple_base_us: float = 14.0
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    # the physical constants a calibration may fit (all positive)
    FIT_NAMES = (
        "net_step_us", "intra_bw_GBps", "intra_hop_us", "nvls_efficiency",
        "nic_bw_GBps", "net_hop_us", "net_simple_base_us", "tree_efficiency",
        "launch_us", "simple_ch_GBps", "ll128_ch_GBps", "ll_ch_GBps", "net_ll_ch_GBps",
        "net_rdzv_us",
    )

    def __post_init__(self) -> None:
        src = f"system {self.name!r}"
        if self.gpu_arch not in ARCHS:
            raise InputError(src, "gpu_arch", f"expected one of {', '.join(ARCHS)}, got {self.gpu_arch!r}")
        if self.intra_kind not in INTRA_KINDS:
            raise InputError(src, "intra_kind", f"expected one of {', '.join(INTRA_KINDS)}, got {self.intra_kind!r}")
        if self.transport not in TRANSPORTS:
            raise InputError(src, "transport", f"expected one of {', '.join(TRANSPORTS)}, got {self.transport!r}")
        if self.nic_path not in NIC_PATHS:
            raise InputError(src, "nic_path", f"expected one of {', '.join(NIC_PATHS)}, got {self.nic_path!r}")
        if self.cpu_vendor not in CPU_VENDORS:
            raise InputError(src, "cpu_vendor", f"expected one of {', '.join(CPU_VENDORS)}, got {self.cpu_vendor!r}")
        if not isinstance(self.nccl_version, str) or not NCCL_RELEASE.fullmatch(self.nccl_version):
            # every table is picked by (major, minor[, patch]): 'abc' or '2' raised from deep inside a price
            raise InputError(src, "nccl_version", f"expected an NCCL release like 2.21 or 2.27.3, "
                                                  f"got {self.nccl_version!r}"[:200])
        if self.net_step_us is None and self.cpu_vendor in CPU_VENDORS:
            object.__setattr__(self, "net_step_us", NET_STEP_US_BY_CPU[self.cpu_vendor])
        if self.net_ll_ch_GBps is None and self.gpu_arch in ARCHS:
            # a description from before the constant existed (an older calibration file) reads it
            # as the nominal prior
            object.__setattr__(self, "net_ll_ch_GBps", _NET_LL_CH[self.gpu_arch])
        for name in ("gpus_per_node", "nics_per_node", "nvlink_domain_nodes", "intra_channels"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(src, name, f"expected an integer >= 1, got {v!r}")
        for name in self.FIT_NAMES:
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InputError(src, name, f"expected a positive number, got {v!r}")
        for name in LINE_RATE_OF.values():
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0):
                raise InputError(src, name, f"expected a positive number or null, got {v!r}")
        v = self.net_rdzv_threshold_bytes
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise InputError(src, "net_rdzv_threshold_bytes", f"expected an integer >= 0 or null, got {v!r}")
        v = self.nic_reported_latency_us
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise InputError(src, "nic_reported_latency_us", f"expected a number >= 0, got {v!r}")
        if self.nvls and self.intra_kind != "nvswitch":
            raise InputError(src, "nvls", f"NVLS needs NVSwitch; intra_kind is {self.intra_kind!r}")
        for i, t in enumerate(self.tiers):
            if not (t.nodes_below >= 1 and 1.0 <= t.oversubscription < math.inf and 0 <= t.latency_us < math.inf):
                raise InputError(src, f"tiers[{i}]", "expected nodes_below >= 1, oversubscription >= 1, latency_us >= 0")

    # --- derived quantities -------------------------------------------------------------------

    @property
    def compcap_index(self) -> int:
        """NCCL's per-architecture row (0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell)."""
        return ARCHS.index(self.gpu_arch)

    def check_scale(self, nodes: int, gpus_per_node: int, source: str = "scale") -> None:
        """InputError unless the system can hold `nodes` x `gpus_per_node` ranks."""
        if not isinstance(nodes, int) or nodes < 1:
            raise InputError(source, "nodes", f"expected an integer >= 1, got {nodes!r}")
        if not isinstance(gpus_per_node, int) or not 1 <= gpus_per_node <= self.gpus_per_node:
            raise InputError(source, "gpus_per_node",
                             f"expected 1..{self.gpus_per_node} ({self.name} has {self.gpus_per_node} GPUs per node), got {gpus_per_node!r}")
        if nodes * gpus_per_node < 2:
            raise InputError(source, "nodes", "a collective needs at least 2 ranks")

    def line_rate_GBps(self, name: str) -> Optional[float]:
        """The physical line rate that bounds the bandwidth constant `name` (None when `name`
        is not a link bandwidth or the description gives no line rate)."""
        field_name = LINE_RATE_OF.get(name)
        return None if field_name is None else getattr(self, field_name)

    def nvlinks_per_gpu(self) -> Optional[int]:
        """NVLinks of one GPU (its intra-node line rate over one link's,
        :data:`NVLINK_LINK_LINE_GBps`): 18 on H100/B200, 12 on A100, 6 on V100. None on PCIe or
        where the description gives no line rate."""
        if self.intra_kind not in ("nvswitch", "nvlink") or self.intra_line_GBps is None:
            return None
        return max(1, int(round(self.intra_line_GBps / NVLINK_LINK_LINE_GBps[self.gpu_arch])))

    def domains(self, nodes: int) -> int:
        """NVLink domains a job of `nodes` nodes spans (the network's 'nodes')."""
        return -(-nodes // self.nvlink_domain_nodes)

    def nics_used(self, gpus_per_node: int) -> int:
        """NICs a job with `gpus_per_node` GPUs per node drives: with rails, the NICs near those
        GPUs (NICs are spread evenly over the node's GPUs); without, all of them."""
        if not self.rails:
            return self.nics_per_node
        return max(1, min(self.nics_per_node, -(-gpus_per_node * self.nics_per_node // self.gpus_per_node)))

    def fabric_factor(self, network_nodes: int) -> float:
        """Share of a node's NIC bandwidth left when every node sends at once: the product of
        the oversubscription of every tier the job spans (a job inside one leaf sees 1)."""
        f = 1.0
        for t in self.tiers:
            if network_nodes > t.nodes_below:
                f /= t.oversubscription
        return f

    def net_hop_latency_us(self, network_nodes: int) -> float:
        """Mean latency of one inter-node hop of a ring over `network_nodes` nodes placed leaf by
        leaf: the base hop latency plus each tier's latency times the fraction of the ring's
        hops that cross that tier (ceil(N/nodes_below) crossings out of N hops)."""
        lat = self.net_hop_us
        for t in self.tiers:
            if network_nodes > t.nodes_below:
                lat += t.latency_us * 2.0 * min(1.0, -(-network_nodes // t.nodes_below) / network_nodes)
        return lat

    def with_constants(self, values: Mapping[str, float], source: str) -> "System":
        """A copy with the named physical constants replaced, each marked with `source`."""
        unknown = [k for k in values if k not in self.FIT_NAMES]
        if unknown:
            raise InputError(source, unknown[0], f"not a physical constant of a system (expected one of {', '.join(self.FIT_NAMES)})")
        srcs = dict(self.sources)
        srcs.update({k: source for k in values})
        return replace(self, sources=srcs, **{k: float(v) for k, v in values.items()})

    def constants(self) -> Dict[str, float]:
        """The physical constants (FIT_NAMES) as a mapping."""
        return {k: float(getattr(self, k)) for k in self.FIT_NAMES}

    def describe(self) -> Dict[str, object]:
        """Plain mapping of every field (for JSON/YAML output)."""
        out: Dict[str, object] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "tiers":
                v = [dict(nodes_below=t.nodes_below, oversubscription=t.oversubscription, latency_us=t.latency_us) for t in v]
            elif f.name == "sources":
                v = dict(v)
            out[f.name] = v
        return out


# --- protocol priors per architecture (NCCL tuning.cc, v2.30 defaults) -------------------------

# perChMaxRingLL128Bws[arch][N1] (GB/s per channel): Volta 20, Ampere 20, Hopper 36.7, Blackwell 40.
_LL128_CH = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 40.0}
# perChMaxTreeBws[arch][N1]: one channel's Simple ceiling, Volta 26.5, Ampere 24, Hopper 38.7, Blackwell 70.
_SIMPLE_CH = {"volta": 26.5, "ampere": 24.0, "hopper": 38.7, "blackwell": 70.0}
# llMaxBws[arch][N1]: LL's whole-GPU bus-bandwidth ceiling (tuning.cc caps Ring/LL and Tree/LL
# busBw at llMaxBw itself, not per channel), Volta 39, Ampere 87.7, Hopper 141, Blackwell 282 GB/s.
_LL_CH = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
# One channel's LL rate across nodes (System.net_ll_ch_GBps): NCCL publishes no figure for it
# (its tuner caps LL's total only). The prior is the per-channel share of llMaxBws[arch][N1] over
# 16 channels (2.4, 5.5, 8.8, 17.6 GB/s), the per-channel LL figure this model used before LL's
# cap became a total: a guess, marked as such in the sources, that a multi-node log replaces.
_NET_LL_CH = {k: v / 16.0 for k, v in _LL_CH.items()}
# nvlsEfficiency[arch] (Volta/Ampere have no NVLS; the value is unused there).
_NVLS_EFF = {"volta": 0.85, "ampere": 0.85, "hopper": 0.85, "blackwell": 0.74}


def nominal_system(
    name: str,
    gpu_arch: str,
    gpus_per_node: int,
    intra_kind: str,
    intra_line_GBps: float,
    nics_per_node: int,
    nic_line_Gbps: float,
    *,
    transport: str = "rdma",
    source: str,
    intra_channels: Optional[int] = None,
    **kw,
) -> System:
    """A System from line rates: bandwidths times :data:`ACHIEVABLE_FRACTION`, hop latencies
    from :data:`NOMINAL_HOP_US`, protocol constants from NCCL's per-architecture priors, every
    field's origin recorded in ``sources``."""
    intra_bw = intra_line_GBps * ACHIEVABLE_FRACTION[intra_kind]
    nic_bw = nic_line_Gbps / 8.0 * ACHIEVABLE_FRACTION[transport]
    if intra_channels is None:
        # a description field only (see System.intra_channels): the NCCL model searches its own
        intra_channels = 16 if intra_kind in ("nvswitch", "nvlink") else 2
    prior = "nominal: NCCL tuning.cc v2.30 prior for " + gpu_arch
    sources = {
        "intra_bw_GBps": f"nominal: {source}; {intra_line_GBps:g} GB/s line x {ACHIEVABLE_FRACTION[intra_kind]:g} achievable ({intra_kind})",
        "intra_hop_us": f"nominal: NCCL tuning.cc hwLatencies[{'NVLINK' if 'nv' in intra_kind else 'PCI'}][Ring][Simple]",
        "nic_bw_GBps": f"nominal: {source}; {nic_line_Gbps:g} Gb/s per NIC x {ACHIEVABLE_FRACTION[transport]:g} achievable ({transport})",
        "net_hop_us": "nominal: NCCL tuning.cc hwLatencies[NET][Ring][Simple]",
        # nvlsEfficiency first appears in NCCL 2.28.3-1 (tuning.cc "// NVLS efficiency factor.", no
        # source or measurement given); NVIDIA publishes no NVLS/SHARP efficiency to check it against.
        "nvls_efficiency": prior + " (nvlsEfficiency, from 2.28) [guess: an unsourced tuner constant, not a measured efficiency]",
        "tree_efficiency": "nominal: NCCL tuning.cc tree busBw x .92",
        "launch_us": "nominal: typical CUDA launch + completion (a few us)",
        "simple_ch_GBps": prior + " (perChMaxTreeBws[N1])",
        "ll128_ch_GBps": prior + " (perChMaxRingLL128Bws)",
        "ll_ch_GBps": prior + " (llMaxBws[N1], a total LL ceiling)",
        "net_ll_ch_GBps": prior + " (llMaxBws[N1] / 16 channels) [guess: NCCL publishes no per-channel LL "
                          "rate across nodes (host-memory LL buffers, src/transport/net.cc)]",
        "net_step_us": f"nominal: NCCL tuning.cc getNetOverhead ({kw.get('cpu_vendor', 'intel')})",
        "net_rdzv_us": "nominal: one network hop (NCCL hwLatencies[NET][Ring][Simple]) [guess: no published "
                       "per-message rendezvous cost; read only where net_rdzv_threshold_bytes is set]",
        "net_simple_base_us": "nominal: one network hop (NCCL hwLatencies[NET][Ring][Simple]) [guess: NCCL's "
                              "baseLat has no network term; read only where Simple crosses nodes]",
    }
    if transport == "socket":
        sources["nic_bw_GBps"] += " [guess: no published achievable fraction for NCCL sockets]"
    defaults = dict(
        nvls_efficiency=_NVLS_EFF[gpu_arch],
        simple_ch_GBps=_SIMPLE_CH[gpu_arch],
        ll128_ch_GBps=_LL128_CH[gpu_arch],
        ll_ch_GBps=_LL_CH[gpu_arch],
        net_ll_ch_GBps=_NET_LL_CH[gpu_arch],
    )
    defaults.update(kw)
    return System(
        name=name, gpu_arch=gpu_arch, gpus_per_node=gpus_per_node, intra_kind=intra_kind,
        intra_bw_GBps=intra_bw, intra_hop_us=NOMINAL_HOP_US[intra_kind],
        nics_per_node=nics_per_node, nic_bw_GBps=nic_bw, net_hop_us=NOMINAL_HOP_US["network"],
        transport=transport, intra_channels=intra_channels, sources=sources,
        intra_line_GBps=float(intra_line_GBps), nic_line_GBps=nic_line_Gbps / 8.0, **defaults,
    )


def _presets() -> Dict[str, System]:
    p: Dict[str, System] = {}
    # NVIDIA DGX A100 datasheet: 8x A100 SXM4, 6 NVSwitches, NVLink3 600 GB/s bidirectional per
    # GPU (300 each way), 8x ConnectX-6 HDR 200 Gb/s for compute, AMD EPYC 7742.
    p["dgx-a100"] = nominal_system("dgx-a100", "ampere", 8, "nvswitch", 300.0, 8, 200.0, cpu_vendor="amd",
                                   source="NVIDIA DGX A100 datasheet")
    # NVIDIA DGX B200 datasheet: 8x B200 on 2 NVLink5 switch chips (NVLS capable), 1.8 TB/s
    # bidirectional per GPU (900 each way), 8x single-port ConnectX-7 400 Gb/s for compute (the two
    # BlueField-3 DPUs serve storage), 2x Intel Xeon Platinum 8570. No published nccl-tests log of it
    # is among the benchmark's: its figures rest on the nominal constants alone. (A DGX H200 has
    # the DGX H100's NVLink4 and NICs: use dgx-h100.)
    p["dgx-b200"] = nominal_system("dgx-b200", "blackwell", 8, "nvswitch", 900.0, 8, 400.0, nvls=True,
                                   cpu_vendor="intel", source="NVIDIA DGX B200 datasheet")
    # AWS p4d/p4de/p4dn.24xlarge: 8x A100 SXM4 on NVSwitch (600 GB/s), 4x 100 Gb/s EFA, Intel Xeon.
    p["p4d"] = nominal_system("p4d", "ampere", 8, "nvswitch", 300.0, 4, 100.0, cpu_vendor="intel",
                              source="AWS p4d instance page (4x 100 Gb/s EFA)")
    # NVIDIA DGX H100 datasheet: 8x H100 SXM5, 4 NVSwitches (NVLS capable), NVLink4 900 GB/s
    # bidirectional per GPU, 8x ConnectX-7 400 Gb/s for compute, Intel Xeon 8480C.
    p["dgx-h100"] = nominal_system("dgx-h100", "hopper", 8, "nvswitch", 450.0, 8, 400.0, nvls=True,
                                   cpu_vendor="intel", source="NVIDIA DGX H100 datasheet")
    # AWS p5.48xlarge: 8x H100 SXM on NVSwitch, 3200 Gb/s EFAv2 as 32x 100 Gb/s EFA interfaces (4
    # per GPU). NCCL sees 8 NICs of 400 Gb/s: aws-ofi-nccl's RDMA protocol (the default on p5/p5e,
    # src/platform-aws.cpp "p5/p5e" .default_protocol = PROTOCOL::RDMA) groups the EFA rails near
    # each GPU into one device (src/nccl_ofi_topo.cpp, max_group_size) and reports their summed
    # speed (src/nccl_ofi_rdma.cpp get_properties: "Scale speed by the total number of rails",
    # props->port_speed *= max_group_size; aws/aws-ofi-nccl since v1.10.0-aws). A channel drives
    # one such device, so the node is 8 NICs x 400 Gb/s here as well.
    # The plugin reports each device's latency as its platform's (src/platform-aws.cpp "p5/p5e"
    # .latency = 75.0, set as OFI_NCCL_NET_LATENCY and returned in props->latency).
    p["p5"] = nominal_system("p5", "hopper", 8, "nvswitch", 450.0, 8, 400.0, nvls=True, cpu_vendor="amd",
                             nic_reported_latency_us=75.0,
                             source="AWS p5 instance page (3200 Gb/s EFAv2: 32x 100 Gb/s); aws-ofi-nccl "
                                    "RDMA protocol presents 4 rails per GPU as one 400 Gb/s device")
    # HGX H100 4-GPU board: NVLink4 between every pair without NVSwitch (18 links per GPU, 6 to
    # each peer: 450 GB/s each way in all), no NVLS; here with 4x 200 Gb/s InfiniBand (NDR200).
    p["hgx-h100-4gpu"] = nominal_system("hgx-h100-4gpu", "hopper", 4, "nvlink", 450.0, 4, 200.0,
                                        cpu_vendor="amd", source="NVIDIA HGX H100 4-GPU; 4x NDR200 per node")
    # HPE Apollo 6500 Gen10+ (ALCF Polaris): 4x A100 SXM4 with NVLink3 between every pair (12
    # links per GPU, 300 GB/s each way), 2x HPE Slingshot-11 200 Gb/s NICs, AMD EPYC Milan.
    # ALCF's device affinity table (docs.alcf.anl.gov/polaris/hardware-overview/machine-overview):
    # GPU1-NIC1 and GPU3-NIC0 are PHB, every other GPU-NIC pair SYS: the NICs hang off the
    # CPU's root ports, not a PCIe switch shared with a GPU.
    # The logs' env (NCCL_NET='AWS Libfabric', FI_CXI_RX_MATCH_MODE=software): the plugin's
    # per-message cost is CPU work in the proxy thread, paid once per launched channel.
    # Rendezvous: the same authors' runs of May 2024 load aws-ofi-nccl v1.9.1-aws and HPE libfabric
    # 1.15.2.0 (argonne-lcf/alcf-nccl-tests pytests/logs0/2024-05-02-19-06-47/env.dat). The
    # plugin's default SENDRECV protocol (src/nccl_ofi_net.c) sends each NCCL message with one
    # tagged send (OFI_NCCL_EAGER_MAX_SIZE is the RDMA protocol's), so libfabric's CXI provider
    # picks eager or rendezvous by length: eager up to rdzv_threshold + rdzv_get_min (fi_cxi(7)
    # FI_CXI_RDZV_GET_MIN; prov/cxi/src/cxip_txc.c max_eager_size), defaults 2048 and 2049
    # (prov/cxi/include/cxip.h CXIP_RDZV_THRESHOLD, cxip_info.c "Avoid single packet Gets") as
    # upstreamed in February 2024, until libfabric v2.3.0 (June 2025: 16384). The logs set neither
    # variable (FI_CXI_RDZV_PROTO=alt_read changes how the rest is read, not when), and 4097 and
    # 18433 give the same counts on every Simple step they hold.
    p["polaris"] = nominal_system("polaris", "ampere", 4, "nvlink", 300.0, 2, 200.0, cpu_vendor="amd",
                                  nic_path="phb", net_step_per_channel=True, net_rdzv_threshold_bytes=2048 + 2049,
                                  source="ALCF Polaris system overview (2x Slingshot-11 per node)")
    p["polaris"] = replace(p["polaris"], sources={
        **p["polaris"].sources,
        "net_rdzv_threshold_bytes": "libfabric CXI provider defaults before v2.3.0: rdzv_threshold 2048 + "
                                    "rdzv_get_min 2049 (fi_cxi(7); prov/cxi cxip.h, cxip_info.c)"})
    # The same nodes with NCCL's internal TCP socket transport (no libfabric plugin).
    p["polaris-socket"] = nominal_system("polaris-socket", "ampere", 4, "nvlink", 300.0, 2, 200.0, cpu_vendor="amd",
                                         transport="socket", nic_path="phb", net_step_per_channel=True,
                                         source="ALCF Polaris, NCCL socket transport")
    # OCI BM.GPU.GB200.4: 4x B200 per Grace host in an NVL72 rack (18 hosts on one NVLink5
    # domain, 900 GB/s each way per GPU, NVLS), 4x 400 Gb/s InfiniBand between racks.
    p["gb200-nvl72"] = nominal_system("gb200-nvl72", "blackwell", 4, "nvswitch", 900.0, 4, 400.0, nvls=True,
                                      nvlink_domain_nodes=18, cpu_vendor="arm",
                                      source="NVIDIA GB200 NVL72 spec; OCI GB200.4 shape (4x 400 Gb/s IB)")
    # NVIDIA DGX-1 (V100): hybrid cube-mesh NVLink2, 6 links x 25 GB/s = 150 GB/s each way per
    # GPU (not all pairs connected), 4x 100 Gb/s InfiniBand EDR, Intel Xeon.
    p["dgx1-v100"] = nominal_system("dgx1-v100", "volta", 8, "nvlink", 150.0, 4, 100.0, cpu_vendor="intel",
                                    source="NVIDIA DGX-1 datasheet")
    # AWS g4dn.metal: 8x T4 (Turing; NCCL's Volta row) on PCIe Gen3 x16 (15.75 GB/s), 100 Gb/s.
    p["g4dn-t4"] = nominal_system("g4dn-t4", "volta", 8, "pcie_p2p", 15.75, 1, 100.0, cpu_vendor="intel",
                                  source="AWS g4dn instance page")
    # A 2-GPU PCIe Gen3 x16 box without P2P (consumer GPUs): traffic through host memory.
    p["pcie3-nop2p"] = nominal_system("pcie3-nop2p", "volta", 2, "pcie_host", 15.75, 1, 25.0, cpu_vendor="intel",
                                      source="PCIe Gen3 x16 line rate")
    # CSCS Alps GH200 node: 4x GH200 with NVLink4 between every pair (6 links, 150 GB/s each way,
    # to each peer: 450 GB/s in all), 4x Slingshot-11 200 Gb/s, Grace (Arm) CPUs.
    p["gh200-alps"] = nominal_system("gh200-alps", "hopper", 4, "nvlink", 450.0, 4, 200.0, cpu_vendor="arm",
                                     source="CSCS Alps GH200 node description")
    p["gh200-alps-socket"] = nominal_system("gh200-alps-socket", "hopper", 4, "nvlink", 450.0, 4, 200.0, cpu_vendor="arm",
                                            transport="socket", source="CSCS Alps GH200 node, NCCL socket transport")
    # A100 80GB x8 per node with 8x 100 Gb/s RoCE NICs (nccl-tests issue 169, the reporter's
    # description). Intra-node as on HGX A100 8-GPU boards (NVSwitch, NVLink3 300 GB/s each way):
    # the reported 2-node busbw of ~100 GB/s is beyond what PCIe-attached GPUs could move inside
    # the node. CPU vendor and GPU-NIC path are not stated: the defaults (Intel, PXB) are kept.
    p["a100-roce-8x100g"] = nominal_system("a100-roce-8x100g", "ampere", 8, "nvswitch", 300.0, 8, 100.0,
                                           source="nccl-tests issue 169 (8x 100 Gb/s RoCE per node); "
                                                  "NVIDIA HGX A100 8-GPU (NVSwitch, 600 GB/s bidirectional)")
    # Azure NDm A100 v4: 8x A100 80GB SXM4 on NVSwitch (NVLink3, 600 GB/s bidirectional per GPU),
    # 8x 200 Gb/s HDR InfiniBand (one per GPU), AMD EPYC 7V12 (Rome).
    p["azure-ndmv4"] = nominal_system("azure-ndmv4", "ampere", 8, "nvswitch", 300.0, 8, 200.0, cpu_vendor="amd",
                                      source="Azure NDm A100 v4-series page (8x A100 80GB NVLink3, 8x 200 Gb/s HDR IB)")
    # AWS p3dn.24xlarge: 8x V100 SXM2 32GB in the DGX-1 hybrid cube-mesh (NVLink2, 6 links x 25 GB/s
    # each way per GPU), one 100 Gb/s EFA/ENA interface for the node, Intel Xeon Platinum 8175M.
    p["p3dn"] = nominal_system("p3dn", "volta", 8, "nvlink", 150.0, 1, 100.0, cpu_vendor="intel",
                               source="AWS p3dn.24xlarge instance page (8x V100 32GB NVLink, 100 Gb/s EFA)")
    return p


PRESETS: Dict[str, System] = _presets()


# --- direct NVLink meshes: what a job on part of the node gets ------------------------------

# DGX-1 (V100) NVLink2 hybrid cube-mesh, NVLinks per GPU pair (NVIDIA, "NVIDIA DGX-1 With Tesla
# V100 System Architecture" white paper, WP-08437-002, Fig. 4; the same as `nvidia-smi topo -m` on
# a DGX-1V: NV1/NV2 entries, SYS elsewhere). Six links per GPU: two quads (GPUs 0-3, 4-7) fully
# connected, two of each GPU's quad links doubled, and one or two links to its peer in the other
# quad. Pairs with 0 links talk over PCIe and the CPUs' QPI; NCCL's rings avoid them.
DGX1V_NVLINKS: Tuple[Tuple[int, ...], ...] = (
    (0, 1, 1, 2, 2, 0, 0, 0),
    (1, 0, 2, 1, 0, 2, 0, 0),
    (1, 2, 0, 2, 0, 0, 1, 0),
    (2, 1, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 1, 1, 2),
    (0, 2, 0, 0, 1, 0, 2, 1),
    (0, 0, 1, 0, 1, 2, 0, 2),
    (0, 0, 0, 1, 2, 1, 2, 0),
)

# Systems whose GPUs are joined by direct NVLinks that not every pair has (by preset name).
NVLINK_MESHES: Dict[str, Tuple[Tuple[int, ...], ...]] = {"dgx1-v100": DGX1V_NVLINKS}


def _hamiltonian_cycles(gpus: int) -> Tuple[Tuple[Tuple[int, int], ...], ...]:
    """Every undirected Hamiltonian cycle of GPUs 0..gpus-1 (gpus >= 3), as its edge list."""
    import itertools

    out = []
    for perm in itertools.permutations(range(1, gpus)):
        if perm[0] > perm[-1]:
            continue  # the same cycle walked the other way
        order = (0,) + perm
        out.append(tuple(tuple(sorted((order[k], order[(k + 1) % gpus]))) for k in range(gpus)))
    return tuple(out)


def ring_links(links: Tuple[Tuple[int, ...], ...], gpus: int) -> int:
    """Links per GPU that NCCL-style rings can drive for a job on GPUs 0..gpus-1 of a direct
    NVLink mesh (`links[i][j]` NVLinks between GPUs i and j).

    A ring sends each GPU's data to the next GPU over one direction of one link; an undirected
    Hamiltonian cycle of the job's GPUs carries two rings (one each way), using one link of
    every pair it visits. The count is twice the most cycles the links can hold at once (an
    exact search: at most 2,520 cycles for 8 GPUs), and for 2 GPUs their link count. Pairs
    outside the job, and links to them, are unused: that is why a 2-GPU job on a DGX-1 gets 1
    link of its GPUs' 6."""
    if gpus < 2:
        return 0
    if gpus == 2:
        return links[0][1]
    cycles = [c for c in _hamiltonian_cycles(gpus) if all(links[a][b] > 0 for a, b in c)]
    bound = min(sum(links[i][j] for j in range(gpus)) for i in range(gpus)) // 2
    cap = {(a, b): links[a][b] for a in range(gpus) for b in range(a + 1, gpus)}

    def most(start: int, budget: int) -> int:
        if budget == 0:
            return 0
        best = 0
        for k in range(start, len(cycles)):
            c = cycles[k]
            if all(cap[e] > 0 for e in c):
                for e in c:
                    cap[e] -= 1
                best = max(best, 1 + most(k, budget - 1))  # k again: a cycle may be used twice
                for e in c:
                    cap[e] += 1
                if best == budget:
                    break
        return best

    return 2 * most(0, bound)


def job_intra_bw_GBps(system: System, gpus: int) -> float:
    """Per-GPU intra-node ring bandwidth (GB/s, achievable) of a job on GPUs 0..gpus-1 of one
    node: the system's ``intra_bw_GBps`` where every GPU pair is connected alike (NVSwitch,
    PCIe), else that rate scaled by the links the job's rings can drive (:func:`ring_links`)
    over a GPU's links (the whole node's rings drive all of them)."""
    mesh = NVLINK_MESHES.get(system.name)
    if mesh is None or gpus >= system.gpus_per_node or gpus < 2:
        return system.intra_bw_GBps
    driven = ring_links(mesh, gpus)
    if driven == 0:
        raise InputError(system.name, "gpus_per_node",
                         f"expected a GPU count whose GPUs 0..{gpus - 1} close an NVLink ring, got {gpus} "
                         "(some GPU has a single NVLink into the set; rings through PCIe/QPI are not modelled)")
    return system.intra_bw_GBps * driven / sum(mesh[0])


def preset(name: str, source: str = "system") -> System:
    """The named nominal system (InputError naming the key for an unknown name)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise InputError(source, "preset", f"unknown system preset {name!r} (known: {', '.join(sorted(PRESETS))})") from None


# --- reading a system back from its description ----------------------------------------------

_REQUIRED = ("name", "gpu_arch", "gpus_per_node", "intra_kind", "intra_bw_GBps", "intra_hop_us",
             "nics_per_node", "nic_bw_GBps", "net_hop_us")


def system_from_dict(doc: object, source: str, where: str = "system") -> System:
    """The :class:`System` that :meth:`System.describe` wrote (a calibration file's
    ``physical.nominal_system``), or a preset's name. Strict: an unknown or missing key, or a
    value of the wrong kind, is an InputError naming `where` and the key."""
    if isinstance(doc, str):
        return preset(doc, source)
    if not isinstance(doc, Mapping):
        raise InputError(source, where, f"expected a mapping of system fields or a preset name, got {type(doc).__name__}")
    names = [f.name for f in fields(System)]
    unknown = [k for k in doc if k not in names]
    if unknown:
        raise InputError(source, f"{where}.{unknown[0]}", f"unknown key (allowed: {', '.join(names)})")
    missing = [k for k in _REQUIRED if k not in doc]
    if missing:
        raise InputError(source, f"{where}.{missing[0]}", "missing key")
    kw = dict(doc)
    tiers = kw.get("tiers") or []
    if not isinstance(tiers, list):
        raise InputError(source, f"{where}.tiers", f"expected a list, got {type(tiers).__name__}")
    parsed = []
    for i, t in enumerate(tiers):
        w = f"{where}.tiers[{i}]"
        if not isinstance(t, Mapping) or set(t) - {"nodes_below", "oversubscription", "latency_us"} or "nodes_below" not in t:
            raise InputError(source, w, "expected a mapping with nodes_below and optional oversubscription, latency_us")
        below, over, lat = t["nodes_below"], t.get("oversubscription", 1.0), t.get("latency_us", 0.0)
        # each field checked as written: int() truncated 2.7 and raised OverflowError on .inf, and
        # a NaN oversubscription or an infinite latency passed every comparison
        if isinstance(below, bool) or not isinstance(below, int) or below < 1:
            raise InputError(source, f"{w}.nodes_below", f"expected an integer >= 1, got {below!r}"[:200])
        for k, v, low in (("oversubscription", over, 1.0), ("latency_us", lat, 0.0)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < low:
                raise InputError(source, f"{w}.{k}", f"expected a finite number >= {low:g}, got {v!r}"[:200])
        parsed.append(SwitchTier(below, float(over), float(lat)))
    kw["tiers"] = tuple(parsed)
    srcs = kw.get("sources") or {}
    if not isinstance(srcs, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in srcs.items()):
        raise InputError(source, f"{where}.sources", "expected a mapping of constant name to text")
    kw["sources"] = dict(srcs)
    for k in ("name", "gpu_arch", "intra_kind", "transport", "cpu_vendor", "nccl_version", "nic_path"):
        if k in kw and not isinstance(kw[k], str):
            raise InputError(source, f"{where}.{k}", f"expected a string, got {kw[k]!r}")
    for k in ("rails", "nvls", "collnet", "net_step_per_channel"):
        if k in kw and not isinstance(kw[k], bool):
            raise InputError(source, f"{where}.{k}", f"expected true or false, got {kw[k]!r}")
    for k in System.FIT_NAMES:
        if k in kw and (isinstance(kw[k], bool) or not isinstance(kw[k], (int, float))):
            raise InputError(source, f"{where}.{k}", f"expected a positive number, got {kw[k]!r}")
    for k in LINE_RATE_OF.values():
        if kw.get(k) is not None and (isinstance(kw[k], bool) or not isinstance(kw[k], (int, float))):
            raise InputError(source, f"{where}.{k}", f"expected a positive number or null, got {kw[k]!r}")
    try:
        return System(**kw)
    except InputError as exc:  # the record's own check: re-anchor it at this file and key
        raise InputError(source, f"{where}.{exc.path}" if exc.path else where, exc.message) from None


# fields a what-if may not change: the record's own bookkeeping
_UNCHANGEABLE = ("name", "sources")


def with_fields(system: System, values: Mapping[str, object], source: str) -> System:
    """`system` with description fields replaced (a what-if: 4 NICs instead of 8, 400 Gb/s NICs,
    another NCCL release, a switch tier), each checked as a calibration file's
    ``nominal_system`` is (:func:`system_from_dict`) and its source marked `source`. An unknown
    field or a bad value is an InputError naming `source` and the field."""
    names = [f.name for f in fields(System) if f.name not in _UNCHANGEABLE]
    for key in values:
        if key not in names:
            raise InputError(source, key, f"not a field of a system (expected one of {', '.join(names)})")
    doc = system.describe()
    doc.update(values)
    doc["sources"] = {**dict(system.sources), **{k: source for k in values}}
    try:
        return system_from_dict(doc, source, "system")
    except InputError as exc:
        key = (exc.path or "").split(".", 1)[1] if "." in (exc.path or "") else exc.path
        raise InputError(source, key, exc.message) from None


# --- a fabric that carries its physical system ------------------------------------------------

# the fabric's intra_kind names (scenario cluster.intra_kind) -> the System's
FABRIC_INTRA_KIND = {"nvswitch": "nvswitch", "nvlink": "nvlink", "pcie": "pcie_p2p", "pcie-nop2p": "pcie_host"}


@dataclass(frozen=True)
class SystemFabric(Fabric):
    """A :class:`Fabric` that also carries the physical :class:`System` its links come from,
    so that the physical NCCL kernel (``collective.algorithm: nccl``) prices collectives with
    the system's constants (a calibration's physical fit, or a preset) instead of deriving a
    system from the two link levels. ``choice_system`` is NCCL's own (nominal) view that picks
    the algorithm and protocol; ``nccl_algo`` / ``nccl_proto`` restrict that choice like
    NCCL_ALGO / NCCL_PROTO. Every Fabric operation (slow links, per-size pricing) keeps them."""

    system: Optional[System] = None
    choice_system: Optional[System] = None
    nccl_algo: Optional[str] = None
    nccl_proto: Optional[str] = None


def with_system(fabric: Fabric, system: Optional[System], choice_system: Optional[System] = None,
                nccl_algo: Optional[str] = None, nccl_proto: Optional[str] = None) -> SystemFabric:
    """`fabric` carrying `system` (see :class:`SystemFabric`; None: the system its links
    describe, :func:`system_of_fabric`)."""
    kw = {f.name: getattr(fabric, f.name) for f in fields(Fabric)}
    return SystemFabric(**kw, system=system, choice_system=choice_system, nccl_algo=nccl_algo, nccl_proto=nccl_proto)


def system_of_fabric(fabric: Fabric, gpu_arch: Optional[str] = None) -> System:
    """The physical system a fabric describes: the one it carries (:class:`SystemFabric`),
    else one built from its two link levels (bandwidths as achieved rates, per-hop latencies,
    the node's network split over its NICs) with NCCL's protocol priors for `gpu_arch` (default:
    the fabric's ``gpu_arch``, a scenario's ``cluster.gpu_arch``). Assumptions where a plain fabric
    does not say: one NIC per GPU (rail-optimised DGX/HGX nodes; NCCL opens two channels per NIC
    across nodes, so the NIC count sets the channel count), and NVLS on an NVSwitch of Hopper or
    later (the third-generation NVSwitch has the multicast and in-switch reduction NVLS needs;
    A100's second generation has not), as every such preset here has it."""
    carried = getattr(fabric, "system", None)
    if carried is not None:
        return carried
    gpu_arch = gpu_arch or fabric.gpu_arch
    nics = fabric.nics_per_node or fabric.gpus_per_node
    intra_kind = FABRIC_INTRA_KIND.get(fabric.intra_kind, "nvswitch")
    src = "from the scenario's links"
    defaults = dict(nvls_efficiency=_NVLS_EFF[gpu_arch], simple_ch_GBps=_SIMPLE_CH[gpu_arch],
                    ll128_ch_GBps=_LL128_CH[gpu_arch], ll_ch_GBps=_LL_CH[gpu_arch],
                    net_ll_ch_GBps=_NET_LL_CH[gpu_arch])
    nvls = intra_kind == "nvswitch" and gpu_arch in NVLS_ARCHS
    return System(
        name="fabric", gpu_arch=gpu_arch, gpus_per_node=fabric.gpus_per_node, intra_kind=intra_kind, nvls=nvls,
        intra_bw_GBps=fabric.intra_bandwidth / 1e9, intra_hop_us=max(fabric.intra_latency * 1e6, 1e-3),
        nics_per_node=nics, nic_bw_GBps=fabric.inter_bandwidth / nics / 1e9,
        net_hop_us=max(fabric.inter_latency * 1e6, 1e-3),
        intra_channels=16 if intra_kind in ("nvswitch", "nvlink") else 2,
        sources={"intra_bw_GBps": src, "intra_hop_us": src, "nic_bw_GBps": src, "net_hop_us": src}, **defaults,
    )
