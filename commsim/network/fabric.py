"""The two link classes every collective cost in this package is computed from.

A :class:`Fabric` is the collective's view of a cluster: ``nodes`` x ``gpus_per_node`` ranks,
numbered node-major (rank = node * gpus_per_node + local, as in :class:`commsim.scenario.spec.Cluster`),
one *intra-node* link class (NVLink/NVSwitch or PCIe, per GPU and direction) and one
*inter-node* link class (the node's network, per node and direction).

Bandwidth conventions (bytes/s, one direction, full duplex assumed):

- ``intra_bandwidth``: what one GPU can send to (and at the same time receive from) its
  node peers.
- ``inter_bandwidth``: what one node can send into the fabric (and receive), i.e. the sum over
  its NICs divided by the fabric's oversubscription factor (see :mod:`commsim.scenario.topology`).
  An algorithm that runs several inter-node flows per node at once (hierarchical: one ring per
  local rank/rail; halving-doubling: every GPU exchanges; tree: four edge flows per node)
  divides it among them; a flat ring has one inter-node hop per node per step (with one ring
  per NIC, each ring carries 1/nics of the data over one NIC: the same aggregate).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Tuple

import numpy as np


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
    # Degraded links (slow-link stragglers): the fraction of intra_bandwidth each rank's port
    # delivers (n entries) and of inter_bandwidth each node's NICs deliver (nodes entries).
    # None: all nominal. A transfer runs at the slower of its two endpoints.
    intra_scale: Optional[Tuple[float, ...]] = None
    inter_scale: Optional[Tuple[float, ...]] = None

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
        for name, length in (("intra_scale", self.nodes * self.gpus_per_node), ("inter_scale", self.nodes)):
            scale = getattr(self, name)
            if scale is not None and (len(scale) != length or not all(0 < x <= 1e6 for x in scale)):
                raise ValueError(f"Fabric.{name} must hold {length} positive factors, got {scale!r}")

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def degraded(self) -> bool:
        """True when some link runs below its class's nominal bandwidth."""
        return self.intra_scale is not None or self.inter_scale is not None

    def pair_bandwidth(self, a, b) -> np.ndarray:
        """Bandwidth (bytes/s) of a transfer between ranks ``a`` and ``b`` (arrays): the intra-node
        link if they share a node, else the network; scaled by the slower endpoint."""
        a, b = np.asarray(a), np.asarray(b)
        na, nb = a // self.gpus_per_node, b // self.gpus_per_node
        intra = self.intra_bandwidth * np.ones(a.shape)
        inter = self.inter_bandwidth * np.ones(a.shape)
        if self.intra_scale is not None:
            sc = np.asarray(self.intra_scale, dtype=float)
            intra = intra * np.minimum(sc[a], sc[b])
        if self.inter_scale is not None:
            sc = np.asarray(self.inter_scale, dtype=float)
            inter = inter * np.minimum(sc[na], sc[nb])
        return np.where(na == nb, intra, inter)

    def pair_latency(self, a, b) -> np.ndarray:
        """Latency of a transfer between ranks ``a`` and ``b`` (arrays)."""
        a, b = np.asarray(a), np.asarray(b)
        same = a // self.gpus_per_node == b // self.gpus_per_node
        return np.where(same, self.intra_latency, self.inter_latency)

    def min_scales(self) -> tuple[float, float]:
        """(slowest intra factor, slowest inter factor): 1.0 when nominal."""
        return (min(self.intra_scale) if self.intra_scale is not None else 1.0,
                min(self.inter_scale) if self.inter_scale is not None else 1.0)

    @classmethod
    def from_cluster(cls, cluster) -> "Fabric":
        """Build from a :class:`commsim.scenario.spec.Cluster` (duck-typed: ``nodes``, ``gpus_per_node``,
        ``intra_node``/``inter_node`` with ``latency`` and ``bandwidth``; optional
        ``nics_per_node``). ``inter_node.bandwidth`` is taken as the node's aggregate
        network bandwidth (see :func:`commsim.scenario.topology.resolve_preset`)."""
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


def with_slow_links(fabric: Fabric, slow_links) -> Fabric:
    """``fabric`` with slow-link stragglers applied (duck-typed :class:`commsim.scenario.spec.SlowLink`:
    ``factor`` and ``rank`` or ``node``).

    ``node: k`` scales node k's network. ``rank: r`` is the link r uses to send to r+1 (the
    ring hop of commsim's ring): r's intra-node port if r+1 is on its node, else its node's
    network. Factors of several entries multiply.
    """
    n, g = fabric.world_size, fabric.gpus_per_node
    intra = np.ones(n) if fabric.intra_scale is None else np.array(fabric.intra_scale, dtype=float)
    inter = np.ones(fabric.nodes) if fabric.inter_scale is None else np.array(fabric.inter_scale, dtype=float)
    touched = False
    for s in slow_links:
        rank, node = getattr(s, "rank", None), getattr(s, "node", None)
        if rank is not None:
            if rank // g == ((rank + 1) % n) // g:
                intra[rank] *= s.factor
            else:
                inter[rank // g] *= s.factor
            touched = True
        elif node is not None:
            inter[node] *= s.factor
            touched = True
    if not touched:
        return fabric
    return replace(fabric, intra_scale=tuple(float(x) for x in intra), inter_scale=tuple(float(x) for x in inter))


def flat(n: int, latency: float, bandwidth: float) -> Fabric:
    """A single-level fabric of ``n`` ranks, one per node, all links alike (handy in tests)."""
    return Fabric(nodes=n, gpus_per_node=1, intra_latency=latency, intra_bandwidth=bandwidth,
                  inter_latency=latency, inter_bandwidth=bandwidth)
