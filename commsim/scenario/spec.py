"""The scenario as a typed, frozen spec.

A scenario file is validated once, at the edge, by :mod:`commsim.scenario.loader`; everything
downstream reads these immutable records. All quantities are in base units: bytes,
bytes per second, seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Optional, Tuple, Union, get_args

import numpy as np

from commsim.network.costs import ddp_buckets

if TYPE_CHECKING:  # the record lives with its fitting code; the spec only carries it
    from commsim.calibration import Calibration

GradDtype = Literal["fp32", "bf16", "fp16"]
BYTES_PER_ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2}

JitterDistribution = Literal["lognormal", "normal", "gamma", "exponential"]
# All-reduce algorithms a DDP job can use (commsim/collectives); `auto` picks the fastest per size.
Algorithm = Literal["ring", "tree", "hierarchical", "halving_doubling", "reduce_broadcast", "auto", "nccl"]
# Cost models: the plain alpha-beta model, or NCCL's own tuning model of a given version.
CostModel = Literal["alpha-beta", "nccl-2.7", "nccl-2.19", "nccl-2.30"]
IntraKind = Literal["nvswitch", "nvlink", "pcie", "pcie-nop2p"]
# The GPUs' generation, as NCCL's tuning tables have a row for each (commsim.network.fabric.GPU_ARCHS)
GpuArch = Literal["volta", "ampere", "hopper", "blackwell"]
# Data-parallel sharding (commsim/sim/sharding.py): plain DDP, ZeRO stage 2, or FSDP FULL_SHARD (ZeRO-3).
Sharding = Literal["none", "zero2", "fsdp"]
# What concurrent collectives share (commsim/sim/concurrent_streams.py): the bandwidth part, or all.
CommShared = Literal["bandwidth", "all"]


@dataclass(frozen=True)
class Link:
    """One class of link: bandwidth in bytes/s, latency (per hop) in seconds."""

    bandwidth: float
    latency: float


@dataclass(frozen=True)
class Cluster:
    """Nodes of identical GPUs; ranks are numbered node-major (rank = node * gpus_per_node + local).

    ``inter_node.bandwidth`` is a node's network bandwidth available to one collective (all its
    NICs together: NCCL spreads a ring's channels over the NICs, rail-aligned); ``nics_per_node``
    (None: unknown) and ``intra_kind`` refine the tree/hierarchical and NCCL models; ``gpu_arch``
    picks NCCL's per-generation tables where a collective is priced as NCCL runs it.
    """

    nodes: int
    gpus_per_node: int
    intra_node: Link
    inter_node: Link
    intra_kind: IntraKind = "nvswitch"
    nics_per_node: Optional[int] = None
    gpu_arch: GpuArch = "hopper"

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Model:
    """The model being trained: its parameter count and the dtype its gradients are reduced in."""

    parameters: int
    grad_dtype: GradDtype = "fp32"

    @property
    def grad_bytes(self) -> int:
        """Bytes of gradient all-reduced per step (parameters x bytes per element)."""
        return self.parameters * BYTES_PER_ELEMENT[self.grad_dtype]


@dataclass(frozen=True)
class Compute:
    """Per-GPU, per-micro-batch durations (seconds) of a healthy GPU."""

    forward: float
    backward: float
    optimizer: float = 0.0
    batch_size: int = 1


@dataclass(frozen=True)
class DDPCosts:
    """DDP's own costs beyond its collectives: per-bucket host cost, gradient copies at memory
    bandwidth, compute slowed while a collective is in flight (:mod:`commsim.sim.ddp_costs`
    says what each is, where the defaults come from, and how the engine charges them).
    Units: seconds, bytes/s, a fraction."""

    bucket_overhead: float = 20e-6
    memory_bandwidth: float = 1.5e12
    gradient_as_bucket_view: bool = False
    overlap_slowdown: float = 0.189  # measured mean compute slowdown under overlap (ddp_costs.py)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bucket_overhead) and self.bucket_overhead >= 0):
            raise ValueError(f"bucket_overhead must be >= 0 seconds, got {self.bucket_overhead!r}")
        if not (math.isfinite(self.memory_bandwidth) and self.memory_bandwidth > 0):
            raise ValueError(f"memory_bandwidth must be > 0 bytes/s, got {self.memory_bandwidth!r}")
        if not (math.isfinite(self.overlap_slowdown) and 0 <= self.overlap_slowdown <= 10):
            raise ValueError(f"overlap_slowdown must be in [0, 10], got {self.overlap_slowdown!r}")

    @property
    def on(self) -> bool:
        """Whether any cost is charged (all off: ``bucket_overhead: 0, overlap_slowdown: 0,
        gradient_as_bucket_view: true``; the memory bandwidth then prices nothing)."""
        return self.bucket_overhead > 0 or self.overlap_slowdown > 0 or not self.gradient_as_bucket_view


@dataclass(frozen=True)
class DDP:
    """PyTorch DistributedDataParallel settings (defaults as in PyTorch: 25 MiB buckets, 1 MiB first).

    ``sharding``: ``none`` (DDP: all-reduce per bucket), ``zero2`` (reduce-scatter per bucket,
    1/n optimizer, all-gather after it) or ``fsdp`` (the buckets are FSDP units, gathered before
    their forward and their backward); see :mod:`commsim.sim.sharding`.

    ``bucket_sizes`` (bytes, in all-reduce order; None: ``first_bucket`` then ``bucket_cap``s) is
    an explicit bucket layout, as a real job's DDP built it; ``bucket_ready`` (None: gradients at
    a uniform rate) the share of the backward done when each bucket is ready, non-decreasing in
    (0, 1] (:func:`commsim.sim.engine.bucket_layout` turns both into the engine's layout). ``costs``: DDP's own
    costs beyond the collectives (:class:`DDPCosts`; the literature's defaults, on). ``comm_streams``:
    how many of a rank's bucket all-reduces may be in flight at once (1: one stream, in order, as
    NCCL; k > 1: :mod:`commsim.sim.concurrent_streams`, as gloo's worker threads), ``comm_capacity``
    how much bandwidth they have together, in collectives' worth (1: they share one link),
    ``comm_shared`` which part of each they share (``bandwidth``: the fixed part overlaps; ``all``).
    """

    bucket_cap: float = 25 * 1024 * 1024
    first_bucket: float = 1024 * 1024
    overlap: bool = True
    gradient_accumulation: int = 1
    sharding: Sharding = "none"
    bucket_sizes: Optional[Tuple[float, ...]] = None
    bucket_ready: Optional[Tuple[float, ...]] = None
    costs: DDPCosts = field(default_factory=DDPCosts)
    # collectives a rank runs at once (commsim/sim/concurrent_streams.py): NCCL runs a
    # communicator's collectives in order on one stream, 1; torch's gloo group runs up to its
    # worker threads at once, 2 by default
    comm_streams: int = 1
    # how many collectives' worth of bandwidth those streams have together: m in flight each run
    # at min(1, comm_capacity / m) of their rate alone (1: they split one link)
    comm_capacity: float = 1.0
    # which part of a collective the concurrent ones share: its bandwidth part (its fixed part, the
    # latencies, overlaps freely: links), or all of it (a CPU backend's fixed part is work on the
    # same cores: gloo)
    comm_shared: CommShared = "bandwidth"

    def __post_init__(self) -> None:
        if isinstance(self.comm_streams, bool) or not isinstance(self.comm_streams, int) or self.comm_streams < 1:
            raise ValueError(f"comm_streams must be an integer >= 1, got {self.comm_streams!r}")
        if self.comm_shared not in get_args(CommShared):
            raise ValueError(f"comm_shared must be one of {', '.join(get_args(CommShared))}, got {self.comm_shared!r}")
        if isinstance(self.comm_capacity, bool) or not (isinstance(self.comm_capacity, (int, float))
                                                         and math.isfinite(self.comm_capacity) and self.comm_capacity >= 1):
            raise ValueError(f"comm_capacity must be a number >= 1, got {self.comm_capacity!r}")


@dataclass(frozen=True)
class Collective:
    """Which all-reduce algorithm the job uses, and which cost model prices it. Under
    ``algorithm: nccl`` (NCCL's own choice, priced by the physical model), ``nccl_algo`` and
    ``nccl_proto`` restrict that choice as NCCL_ALGO and NCCL_PROTO do ("ring", "^nvls",
    "LL,LL128"); None keeps every runnable one."""

    algorithm: Algorithm = "ring"
    model: CostModel = "alpha-beta"
    nccl_algo: Optional[str] = None
    nccl_proto: Optional[str] = None


@dataclass(frozen=True)
class SlowRank:
    """Compute on these ranks takes `factor` times as long, every step."""

    ranks: Tuple[int, ...]
    factor: float
    kind: Literal["slow_rank"] = "slow_rank"


@dataclass(frozen=True)
class Throttle:
    """Thermal throttling: full clock for `heat_up` seconds, then `clock_fraction` of the
    clock for `throttled_time` seconds, then cool and repeat (an intermittent straggler).
    `phase` shifts where in that cycle the GPU is at time zero."""

    ranks: Tuple[int, ...]
    heat_up: float
    throttled_time: float
    clock_fraction: float
    phase: float = 0.0
    kind: Literal["throttle"] = "throttle"


@dataclass(frozen=True)
class Jitter:
    """Per-rank, per-step multiplicative noise on compute with mean 1 and coefficient of variation `cv`.
    `ranks` None means every rank."""

    cv: float
    distribution: JitterDistribution = "lognormal"
    ranks: Optional[Tuple[int, ...]] = None
    kind: Literal["jitter"] = "jitter"


@dataclass(frozen=True)
class Stall:
    """A pause of `duration` seconds before a step's forward (GC, checkpoint, data loader):
    every `every` steps (starting at step `every - 1`) or with `probability` per step."""

    ranks: Tuple[int, ...]
    duration: float
    every: Optional[int] = None
    probability: Optional[float] = None
    kind: Literal["stall"] = "stall"


@dataclass(frozen=True)
class SlowLink:
    """A degraded link running at `factor` of its bandwidth: either the ring hop from `rank` to
    `rank + 1`, or node `node`'s network link (both ring hops that enter and leave that node)."""

    factor: float
    rank: Optional[int] = None
    node: Optional[int] = None
    kind: Literal["slow_link"] = "slow_link"


Straggler = Union[SlowRank, Throttle, Jitter, Stall, SlowLink]


@dataclass(frozen=True)
class Scenario:
    """A complete, validated scenario."""

    cluster: Cluster
    model: Model
    compute: Compute
    name: str = "scenario"
    description: str = ""
    seed: int = 0
    steps: int = 100
    ddp: DDP = field(default_factory=DDP)
    collective: Collective = field(default_factory=Collective)
    stragglers: Tuple[Straggler, ...] = ()
    calibration: Optional["Calibration"] = None  # measured link costs replacing the nominal links

    @property
    def world_size(self) -> int:
        return self.cluster.world_size

    def without_stragglers(self) -> "Scenario":
        """The same scenario with every straggler removed (the baseline)."""
        return replace(self, stragglers=())

    def gradient_buckets(self) -> Tuple[float, ...]:
        """A step's gradient buckets in bytes, in all-reduce order: ``ddp.bucket_sizes`` when the
        scenario gives them (a real job's layout), else DDP's (a first bucket, then ``bucket_cap``s:
        :func:`commsim.network.costs.ddp_buckets`). The one place every stage reads them from."""
        if self.ddp.bucket_sizes is not None:
            return tuple(float(b) for b in self.ddp.bucket_sizes)
        return tuple(float(b) for b in ddp_buckets(self.model.grad_bytes, self.ddp.first_bucket, self.ddp.bucket_cap))

    def bucket_ready_points(self) -> Tuple[float, ...]:
        """For each of :meth:`gradient_buckets`, the share of the last backward done when all its
        gradients are: ``ddp.bucket_ready`` when given, else its share of the cumulative bytes
        (gradients produced at a uniform rate through the backward)."""
        if self.ddp.bucket_ready is not None:
            return tuple(float(f) for f in self.ddp.bucket_ready)
        sizes = np.asarray(self.gradient_buckets(), dtype=float)
        return tuple((np.cumsum(sizes) / max(sizes.sum(), 1.0)).tolist())
