"""The two link classes every collective cost in this package is computed from.

A :class:`Fabric` is the collective's view of a cluster: ``nodes`` x ``gpus_per_node`` ranks,
numbered node-major (rank = node * gpus_per_node + local, as in :class:`commsim.spec.Cluster`),
one *intra-node* link class (NVLink/NVSwitch or PCIe, per GPU and direction) and one
*inter-node* link class (the node's network, per node and direction).

Bandwidth conventions (bytes/s, one direction, full duplex assumed):

- ``intra_bandwidth``: what one GPU can send to (and at the same time receive from) its
  node peers.
- ``inter_bandwidth``: what one node can send into the fabric (and receive), i.e. the sum over
  its NICs divided by the fabric's oversubscription factor (see :mod:`commsim.topology`).
  An algorithm that runs several inter-node flows per node at once (hierarchical: one ring per
  local rank/rail; halving-doubling: every GPU exchanges; tree: four edge flows per node)
  divides it among them; a flat ring has one inter-node hop per node per step (with one ring
  per NIC, each ring carries 1/nics of the data over one NIC: the same aggregate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Fabric:
    """Two-level cluster as seen by a collective. Units: seconds, bytes/s."""

    nodes: int
    gpus_per_node: int
    intra_latency: float
    intra_bandwidth: float
    inter_latency: float
    inter_bandwidth: float
    nics_per_node: Optional[int] = None  # None: not known (only NCCL's channel count uses it)
    intra_kind: str = "nvswitch"  # nvswitch | nvlink | pcie | pcie-nop2p (NCCL's model: NVLINK vs PCI latencies)

    def __post_init__(self) -> None:
        if int(self.nodes) != self.nodes or self.nodes < 1:
            raise ValueError(f"Fabric.nodes must be an integer >= 1, got {self.nodes!r}")
        if int(self.gpus_per_node) != self.gpus_per_node or self.gpus_per_node < 1:
            raise ValueError(f"Fabric.gpus_per_node must be an integer >= 1, got {self.gpus_per_node!r}")
        for name in ("intra_latency", "inter_latency"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"Fabric.{name} must be >= 0 seconds, got {getattr(self, name)!r}")
        for name in ("intra_bandwidth", "inter_bandwidth"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Fabric.{name} must be > 0 bytes/s, got {getattr(self, name)!r}")
        if self.nics_per_node is not None and (int(self.nics_per_node) != self.nics_per_node or self.nics_per_node < 1):
            raise ValueError(f"Fabric.nics_per_node must be an integer >= 1, got {self.nics_per_node!r}")

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_of(self, rank):
        """Node index of a rank (works on numpy arrays too)."""
        return rank // self.gpus_per_node

    @classmethod
    def from_cluster(cls, cluster) -> "Fabric":
        """Build from a :class:`commsim.spec.Cluster` (duck-typed: ``nodes``, ``gpus_per_node``,
        ``intra_node``/``inter_node`` with ``latency`` and ``bandwidth``; optional
        ``nics_per_node``). ``inter_node.bandwidth`` is taken as the node's aggregate
        network bandwidth (see :func:`commsim.topology.resolve_preset`)."""
        return cls(
            nodes=cluster.nodes,
            gpus_per_node=cluster.gpus_per_node,
            intra_latency=cluster.intra_node.latency,
            intra_bandwidth=cluster.intra_node.bandwidth,
            inter_latency=cluster.inter_node.latency,
            inter_bandwidth=cluster.inter_node.bandwidth,
            nics_per_node=getattr(cluster, "nics_per_node", None),
            intra_kind=getattr(cluster, "intra_kind", "nvswitch") or "nvswitch",
        )


def flat(n: int, latency: float, bandwidth: float) -> Fabric:
    """A single-level fabric of ``n`` ranks, one per node, all links alike (handy in tests)."""
    return Fabric(nodes=n, gpus_per_node=1, intra_latency=latency, intra_bandwidth=bandwidth,
                  inter_latency=latency, inter_bandwidth=bandwidth)
