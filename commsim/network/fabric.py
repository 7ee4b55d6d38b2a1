"""The fabric: every link a collective can use, and the only source of hop costs.

A :class:`Fabric` is a cluster as the collectives see it: ``nodes`` x ``gpus_per_node`` ranks,
numbered node-major (rank = node * gpus_per_node + local, as in
:class:`commsim.scenario.spec.Cluster`), and two link *levels*:

- ``intra_node`` (NVLink/NVSwitch or PCIe): one *port* per rank, what one GPU can send to (and
  at the same time receive from) its node peers;
- ``inter_node`` (the network): one port per node, what the node's NICs together can push into
  the fabric (and receive), i.e. NICs x NIC bandwidth / oversubscription (see
  :mod:`commsim.scenario.topology`). An algorithm that runs several network flows per node at
  once (hierarchical: one ring per rail; halving-doubling: every GPU exchanges; tree: up to four
  edges per node) divides it among them; a flat ring has one network hop per node and step.

A hop a -> b is on ``inter_node`` when a and b sit on different nodes, else on ``intra_node``; it
costs its level's latency and moves bytes at its level's bandwidth, and a level's constants
price only that level's hops. Bandwidths are bytes/s per direction (full duplex), latencies
seconds per hop.

Degraded links (the ``slow_link`` straggler) are port scales per level and direction: a
transfer a -> b on level L runs at ``bandwidth_L x min(send_L[port_L(a)], receive_L[port_L(b)])``,
the slower of the sender's outgoing side and the receiver's incoming side (a transfer is as fast
as its slowest segment). Two kinds of degradation, the same for every algorithm:

- :meth:`Fabric.with_slow_sender` (``slow_link`` with ``rank: r``): the send side of the port r
  uses for the ring hop r -> r+1 (r+1 mod n): r's intra-node port when r+1 is on r's node, else
  r's node's network. Every transfer that leaves through it runs at ``factor`` of the bandwidth
  (in the ring exactly the hop r -> r+1; in a tree both of r's sending edges; ...); what r
  receives is untouched.
- :meth:`Fabric.with_slow_node` (``slow_link`` with ``node: k``): node k's network in both
  directions: every network transfer into or out of node k (in the ring the hops into node
  k's first rank and out of its last).

Factors on the same port and direction multiply.

Per-size pricing: a fabric may carry a :class:`LevelPricing` (a calibration,
:mod:`commsim.calibration.model`) that replaces a level's constants for each collective size;
:meth:`Fabric.at_size` applies it, and the collective planners
(:func:`commsim.collectives.kernels.make_kernel`) price a collective on ``fabric.at_size(size)``.

Room to grow: ports are per level, so rails (a network port per NIC), more NICs per node or
switch tiers (more levels, each with its own constants and ports) change :meth:`level_of` and
the port maps, not the algorithms, which only ask :meth:`pair_latency` / :meth:`pair_bandwidth`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Protocol, Tuple

import numpy as np

LEVELS = ("intra_node", "inter_node")
INTRA, INTER = 0, 1  # level indices


class LevelPricing(Protocol):
    """Replaces a level's constants per collective: ``pricing(level, size, n)`` gives
    (latency s, bandwidth B/s) of every hop of ``level`` (a name of :data:`LEVELS`) for a
    collective of ``size`` bytes over ``n`` ranks."""

    def __call__(self, level: str, size: float, n: int) -> Tuple[float, float]: ...


@dataclass(frozen=True)
class PortScales:
    """Bandwidth fractions of one level's ports (1.0 = nominal): ``send[p]`` of port p's outgoing
    side, ``receive[p]`` of its incoming side."""

    send: Tuple[float, ...]
    receive: Tuple[float, ...]

    @classmethod
    def nominal(cls, ports: int) -> "PortScales":
        return cls((1.0,) * ports, (1.0,) * ports)

    def scaled(self, port: int, factor: float, send: bool, receive: bool) -> "PortScales":
        """These scales with port ``port``'s sides multiplied by ``factor``."""
        s, r = list(self.send), list(self.receive)
        if send:
            s[port] *= factor
        if receive:
            r[port] *= factor
        return PortScales(tuple(s), tuple(r))

    @property
    def slowest(self) -> float:
        return min(min(self.send), min(self.receive))


# NCCL's compute-capability rows (src/graph/tuning.cc): a fabric's GPUs pick NCCL's tables by these.
GPU_ARCHS = ("volta", "ampere", "hopper", "blackwell")


@dataclass(frozen=True)
class Fabric:
    """Two-level cluster as seen by a collective (module docstring). Units: seconds, bytes/s."""

    nodes: int
    gpus_per_node: int
    intra_latency: float
    intra_bandwidth: float
    inter_latency: float
    inter_bandwidth: float
    nics_per_node: Optional[int] = None  # None: not known (only NCCL's channel count uses it)
    intra_kind: str = "nvswitch"  # nvswitch | nvlink | pcie | pcie-nop2p (NCCL's model: NVLINK vs PCI latencies)
    gpu_arch: str = "hopper"  # GPU_ARCHS: which of NCCL's per-generation tables price its collectives
    # degraded ports (None: all nominal): intra_scale per rank, inter_scale per node
    intra_scale: Optional[PortScales] = None
    inter_scale: Optional[PortScales] = None
    pricing: Optional[LevelPricing] = None  # per-size constants (a calibration); see at_size

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
        if self.gpu_arch not in GPU_ARCHS:
            raise ValueError(f"Fabric.gpu_arch must be one of {', '.join(GPU_ARCHS)}, got {self.gpu_arch!r}")
        if self.nics_per_node is not None and (int(self.nics_per_node) != self.nics_per_node or self.nics_per_node < 1):
            raise ValueError(f"Fabric.nics_per_node must be an integer >= 1, got {self.nics_per_node!r}")
        for name, ports in (("intra_scale", self.world_size), ("inter_scale", self.nodes)):
            scale = getattr(self, name)
            if scale is None:
                continue
            sides = scale.send + scale.receive
            if len(scale.send) != ports or len(scale.receive) != ports or not all(0 < x <= 1e6 for x in sides):
                raise ValueError(f"Fabric.{name} must hold {ports} positive factors per direction, got {scale!r}")

    # -- shape -------------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_of(self, ranks) -> np.ndarray:
        return np.asarray(ranks) // self.gpus_per_node

    def level_of(self, a, b) -> np.ndarray:
        """Level index (INTRA or INTER) of the hops a -> b (arrays of ranks)."""
        return np.where(self.node_of(a) == self.node_of(b), INTRA, INTER)

    # -- degradation -------------------------------------------------------------------------
    @property
    def degraded(self) -> bool:
        """True when a link some hop can use runs below its level's nominal bandwidth."""
        intra = self.gpus_per_node > 1 and self.intra_scale is not None and self.intra_scale.slowest < 1
        inter = self.nodes > 1 and self.inter_scale is not None and self.inter_scale.slowest < 1
        return intra or inter

    def min_scales(self) -> Tuple[float, float]:
        """(slowest intra-node factor, slowest network factor): 1.0 when nominal."""
        return (self.intra_scale.slowest if self.intra_scale is not None else 1.0,
                self.inter_scale.slowest if self.inter_scale is not None else 1.0)

    def with_slow_sender(self, rank: int, factor: float) -> "Fabric":
        """``slow_link`` on ``rank``: the send side of the port ``rank`` uses for the ring hop
        rank -> rank+1 (mod n) runs at ``factor``: its intra-node port if rank+1 is on its node,
        else its node's network (module docstring)."""
        n = self.world_size
        if not 0 <= rank < n:
            raise ValueError(f"rank must be in 0..{n - 1}, got {rank!r}")
        nxt = (rank + 1) % n
        if self.node_of(rank) == self.node_of(nxt):
            scale = self.intra_scale or PortScales.nominal(n)
            return replace(self, intra_scale=scale.scaled(rank, factor, send=True, receive=False))
        node = int(self.node_of(rank))
        scale = self.inter_scale or PortScales.nominal(self.nodes)
        return replace(self, inter_scale=scale.scaled(node, factor, send=True, receive=False))

    def with_slow_node(self, node: int, factor: float) -> "Fabric":
        """``slow_link`` on ``node``: node's network runs at ``factor`` in both directions."""
        if not 0 <= node < self.nodes:
            raise ValueError(f"node must be in 0..{self.nodes - 1}, got {node!r}")
        scale = self.inter_scale or PortScales.nominal(self.nodes)
        return replace(self, inter_scale=scale.scaled(node, factor, send=True, receive=True))

    # -- hop costs ---------------------------------------------------------------------------
    def at_size(self, size: float) -> "Fabric":
        """The fabric whose constants price a collective of ``size`` bytes: its pricing's
        constants per level (degradations kept), or itself when it has no pricing."""
        if self.pricing is None:
            return self
        n = self.world_size
        intra_latency, intra_bandwidth = self.pricing(LEVELS[INTRA], size, n)
        inter_latency, inter_bandwidth = self.pricing(LEVELS[INTER], size, n)
        return replace(self, intra_latency=intra_latency, intra_bandwidth=intra_bandwidth,
                       inter_latency=inter_latency, inter_bandwidth=inter_bandwidth, pricing=None)

    def pair_latency(self, a, b) -> np.ndarray:
        """Latency of the hops a -> b (arrays of ranks): their level's."""
        return np.where(self.level_of(a, b) == INTRA, self.intra_latency, self.inter_latency)

    def pair_bandwidth(self, a, b) -> np.ndarray:
        """Bandwidth (bytes/s) of the transfers a -> b (arrays of ranks): their level's, times the
        slower of a's send side and b's receive side on that level (module docstring)."""
        a, b = np.asarray(a), np.asarray(b)
        intra = self.intra_bandwidth * np.ones(a.shape)
        inter = self.inter_bandwidth * np.ones(a.shape)
        if self.intra_scale is not None:
            send, receive = (np.asarray(x, dtype=float) for x in (self.intra_scale.send, self.intra_scale.receive))
            intra = intra * np.minimum(send[a], receive[b])
        if self.inter_scale is not None:
            send, receive = (np.asarray(x, dtype=float) for x in (self.inter_scale.send, self.inter_scale.receive))
            inter = inter * np.minimum(send[self.node_of(a)], receive[self.node_of(b)])
        return np.where(self.level_of(a, b) == INTRA, intra, inter)

    def exchange_bandwidth(self, a, b) -> np.ndarray:
        """Bandwidth of a pairwise exchange (a sends to b while b sends to a): the slower direction."""
        return np.minimum(self.pair_bandwidth(a, b), self.pair_bandwidth(b, a))

    # -- the node-major ring -----------------------------------------------------------------
    def ring_predecessors(self) -> np.ndarray:
        """Rank i's predecessor in the node-major ring: i-1, and n-1 for rank 0."""
        return (np.arange(self.world_size) - 1) % self.world_size

    def ring_crossings(self) -> np.ndarray:
        """Whether the ring hop into each rank crosses the network (its predecessor is on
        another node: the rank is a node's first and there is more than one node)."""
        ranks = np.arange(self.world_size)
        return self.level_of(self.ring_predecessors(), ranks) == INTER

    def ring_links(self) -> Tuple[np.ndarray, np.ndarray]:
        """(latency, bandwidth) of the ring hop into each rank, from its predecessor."""
        ranks = np.arange(self.world_size)
        prev = self.ring_predecessors()
        return self.pair_latency(prev, ranks).astype(np.float64), self.pair_bandwidth(prev, ranks).astype(np.float64)


def flat(n: int, latency: float, bandwidth: float) -> Fabric:
    """A single-level fabric of ``n`` ranks, one per node, all links alike (handy in tests)."""
    return Fabric(nodes=n, gpus_per_node=1, intra_latency=latency, intra_bandwidth=bandwidth,
                  inter_latency=latency, inter_bandwidth=bandwidth)
