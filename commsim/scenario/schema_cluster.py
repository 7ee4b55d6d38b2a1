"""The ``cluster`` section of a scenario: nodes, GPUs, the two link classes, and presets.

A ``preset`` (:mod:`commsim.scenario.topology`) fills in what the file leaves out before the
keys are checked; ``nic_bandwidth`` and ``oversubscription`` only feed a preset's NIC
arithmetic and are checked here but not kept.
"""

from __future__ import annotations

from typing import Any, Tuple, get_args

from commsim.errors import ScenarioError
from commsim.scenario import spec, topology
from commsim.scenario.schema_fields import (
    COUNT_HINT,
    RATE_HINT,
    SECTION_KEYS,
    Section,
    choice,
    read_count,
    read_rate,
    read_time_or_zero,
    MIN_RATE,
)
from commsim.units import describe, parse_number

__all__ = [
    "DEFAULT_INTRA_NODE_LATENCY",
    "DEFAULT_INTER_NODE_LATENCY",
    "INTRA_KINDS",
    "MAX_WORLD_SIZE",
    "read_cluster",
]

INTRA_KINDS: Tuple[str, ...] = get_args(spec.IntraKind)
GPU_ARCHS: Tuple[str, ...] = get_args(spec.GpuArch)

# Per-hop link latency when a file gives none: NCCL's own cost model for Ring/Simple
# (src/graph/tuning.cc hwLat, v2.19.3 and v2.30.7: NVLink 3.4 us, network 14.0 us; see
# NCCL src/graph/tuning.cc v2.19.3). Write `latency:` explicitly to model anything else.
DEFAULT_INTRA_NODE_LATENCY = 3.4e-6
DEFAULT_INTER_NODE_LATENCY = 14.0e-6

MAX_WORLD_SIZE = 2**20  # ranks; about 64 times the largest jobs run today
# Far beyond real tapers (2:1, 4:1): a typo's 1e300 derived a 1e-290 B/s network that was
# refused at inter_node.bandwidth, a key the file never wrote
MAX_OVERSUBSCRIPTION = 1000.0


def _link(source: str, path: str, value: Any, default_latency: float) -> spec.Link:
    m = Section(
        source, path, value, SECTION_KEYS[path], required=("bandwidth",),
        hints={"bandwidth": RATE_HINT},
        what=f"a mapping with bandwidth ({RATE_HINT}) and latency",
    )
    return spec.Link(
        bandwidth=m.get("bandwidth", read_rate),
        latency=m.get("latency", read_time_or_zero, default_latency),
    )


def read_cluster(source: str, value: Any) -> spec.Cluster:
    """The ``cluster`` mapping as a :class:`commsim.scenario.spec.Cluster`."""
    derived = _derives_inter_bandwidth(value)
    if isinstance(value, dict):  # a named preset fills in what the file leaves out
        value = topology.expand_cluster(value, source, "cluster")
    m = Section(
        source, "cluster", value, SECTION_KEYS["cluster"],
        required=("nodes", "gpus_per_node", "intra_node", "inter_node"),
        hints={
            "nodes": COUNT_HINT,
            "gpus_per_node": COUNT_HINT,
            "intra_node": f"a mapping with bandwidth ({RATE_HINT})",
            "inter_node": f"a mapping with bandwidth ({RATE_HINT})",
        },
    )
    nodes = m.get("nodes", read_count)
    gpus = m.get("gpus_per_node", read_count)
    if nodes * gpus > MAX_WORLD_SIZE:
        raise ScenarioError(
            source, "cluster",
            f"expected a world size (nodes x gpus_per_node) up to {MAX_WORLD_SIZE}, got {nodes} x {gpus} = {nodes * gpus}",
        )
    if "oversubscription" in m.value:  # only meaningful through a preset's NIC arithmetic
        over = m.get("oversubscription", parse_number)
        if over < 1:
            raise ScenarioError(source, "cluster.oversubscription", topology.OVERSUBSCRIPTION_EXPECTED.format(over))
        if over > MAX_OVERSUBSCRIPTION:
            raise ScenarioError(source, "cluster.oversubscription",
                                f"expected a factor in [1, {MAX_OVERSUBSCRIPTION:g}] (1 = non-blocking, 2 = 2:1), "
                                f"got {over:g}")
    if "nic_bandwidth" in m.value:
        m.get("nic_bandwidth", read_rate)
    if derived:
        _check_derived_bandwidth(source, m.value)
    return spec.Cluster(
        nodes=nodes,
        gpus_per_node=gpus,
        intra_node=_link(source, "cluster.intra_node", m.value["intra_node"], DEFAULT_INTRA_NODE_LATENCY),
        inter_node=_link(source, "cluster.inter_node", m.value["inter_node"], DEFAULT_INTER_NODE_LATENCY),
        intra_kind=m.get("intra_kind", choice(INTRA_KINDS), spec.Cluster.intra_kind),
        nics_per_node=m.get("nics_per_node", read_nic_count, None),
        gpu_arch=m.get("gpu_arch", choice(GPU_ARCHS), spec.Cluster.gpu_arch),
    )


# The most NICs a node's collectives can use: NCCL opens at most MAXCHANNELS (64, from 2.25)
# channels, and each crosses the network through one NIC. More (cluster.nics_per_node
# 9223372036854775807) split the node's bandwidth over NICs no channel reaches: the physical
# model (collective.algorithm nccl) then priced an all-reduce at 2e15 s.
MAX_NICS_PER_NODE = 64


def read_nic_count(value: Any) -> int:
    count = read_count(value)
    if count > MAX_NICS_PER_NODE:
        raise ValueError(f"expected at most {MAX_NICS_PER_NODE} NICs per node (NCCL's most channels, one NIC "
                         f"each), got {describe(value)}")
    return count


def _derives_inter_bandwidth(value: Any) -> bool:
    """Whether ``topology.expand_cluster`` derives inter_node.bandwidth from the NIC keys (the
    file writes one of them and no inter_node.bandwidth)."""
    if not isinstance(value, dict):
        return False
    inter = value.get("inter_node")
    written = isinstance(inter, dict) and "bandwidth" in inter
    return not written and any(k in value for k in ("nics_per_node", "nic_bandwidth", "oversubscription"))


def _check_derived_bandwidth(source: str, value: dict) -> None:
    """A derived network bandwidth out of range is refused at the NIC key it comes from, not at
    inter_node.bandwidth, which the file does not write."""
    inter = value.get("inter_node")
    bandwidth = inter.get("bandwidth") if isinstance(inter, dict) else None
    if not isinstance(bandwidth, float) or MIN_RATE <= bandwidth < float("inf"):
        return  # written by a preset, or in range (the link reader checks it again)
    over = value.get("oversubscription", 1)
    raise ScenarioError(
        source, "cluster.nic_bandwidth",
        f"expected nics_per_node x nic_bandwidth / oversubscription (the inter_node.bandwidth it derives) of at "
        f"least {MIN_RATE:g} B/s and finite, got {value.get('nics_per_node')} x {value.get('nic_bandwidth')} / "
        f"{over} = {bandwidth:g} B/s",
    )
