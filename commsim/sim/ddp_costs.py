"""DDP's own costs, beyond the collectives: what PyTorch's Reducer adds to a training step.

Three costs (PyTorch DistributedDataParallel, torch/csrc/distributed/c10d/reducer.cpp; Li et
al., "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020,
Sec. 3-4), each a scenario key under ``ddp:`` (:func:`parse_ddp_costs`):

- ``bucket_overhead`` (seconds per bucket, default 20 us): the host work of launching one
  bucket's all-reduce (the autograd hook marking the bucket ready, ProcessGroupNCCL's work
  object and stream synchronisation, the NCCL kernel launch). It delays every bucket's
  collective after its last gradient is ready, and it is why many small buckets lose to few
  large ones when communication is exposed (the paper's bucket-size sweep). The default is
  of the order of NCCL's own base latencies (tuning.cc baseLat 6.6-14 us) plus one launch;
  an estimate to be fitted (``commsim calibrate`` from a ``validate --mode ddp`` run), not a
  measured constant.
- ``memory_bandwidth`` (bytes/s, default 1.5 TB/s, the A100 40 GB HBM2 datasheet rate) with
  ``gradient_as_bucket_view`` (default false, as PyTorch): each gradient is copied into its
  bucket's flat buffer on the compute stream (read + write: 2 bytes moved per byte, so
  ``2 B / memory_bandwidth``), and, without the bucket view, copied back into ``.grad`` after
  the all-reduce (the same again, before the optimizer). With the view, neither copy.
- ``overlap_slowdown`` (fraction, default 0.1): compute runs slower while a collective is in
  flight, since NCCL's kernels occupy SMs (one thread block per channel: 16 of an A100's 108
  SMs is 15%) and memory bandwidth. Compute that overlaps communication progresses at
  ``1 / (1 + overlap_slowdown)`` of its rate (:func:`stretched_finish`). The default is the
  order of that SM share, not a measured constant.

Numbers and closed forms, and their schedule over rank vectors: :class:`ChargedBackward` is
one step's last backward on every rank with these costs (the engine's and the communication
hooks' schedule, :mod:`commsim.mitigations.hooked`), :class:`InFlight` the vectorized
:func:`stretched_finish`. One GPU alone has no DDP reduction at all (:func:`charges`).

Copies are memory-bound: they take their time whatever the compute clock (no jitter or slow-rank
factor, no thermal clock, no overlap slowdown). A thermally throttled rank is stretched in its own
work units (the clock's ``work_done``, where it runs at full rate): the overlap stretch applies
there as to any rank, and the result is mapped back to time (``time_for_work``).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from commsim.scenario.schema_training import DDP_COST_KEYS as KEYS, read_ddp_costs
from commsim.scenario.spec import DDPCosts

__all__ = ["DDPCosts", "NONE", "KEYS", "bucket_copy_in_time", "bucket_launch_time", "copy_back_time",
           "stretched_finish", "step_overhead", "parse_ddp_costs", "charges", "InFlight", "ChargedBackward"]

NONE = DDPCosts(0.0, 1e30, True, 0.0)  # no DDP costs at all: the model before them


def bucket_copy_in_time(bucket_bytes: float, costs: DDPCosts) -> float:
    """Seconds the compute stream spends copying a bucket's gradients into its flat buffer
    (read + write at memory bandwidth); 0 with ``gradient_as_bucket_view``."""
    if costs.gradient_as_bucket_view:
        return 0.0
    return 2.0 * bucket_bytes / costs.memory_bandwidth


def bucket_launch_time(ready: float, previous_launch: float, costs: DDPCosts) -> float:
    """When a bucket's collective starts: its last gradient (and its copy-in) done at `ready`,
    plus the per-bucket host cost; launches are issued one after another by one host thread,
    so never sooner than `previous_launch` plus that cost."""
    return max(ready, previous_launch) + costs.bucket_overhead


def copy_back_time(total_bytes: float, costs: DDPCosts) -> float:
    """Seconds after the last all-reduce to copy the reduced buckets back into ``.grad``
    before the optimizer (read + write); 0 with ``gradient_as_bucket_view``."""
    if costs.gradient_as_bucket_view:
        return 0.0
    return 2.0 * total_bytes / costs.memory_bandwidth


def stretched_finish(start: float, work: float, busy: Iterable[Tuple[float, float]], slowdown: float) -> float:
    """When compute of `work` seconds (at full rate) that starts at `start` finishes, if it
    runs at ``1 / (1 + slowdown)`` of its rate inside the `busy` intervals (collectives in
    flight; (begin, end) pairs, any order, may overlap) and at full rate outside them."""
    if work <= 0:
        return start
    if slowdown <= 0:
        return start + work
    # merge the busy intervals that end after `start`
    merged = []
    for b, e in sorted((max(b, start), e) for b, e in busy if e > start and e > b):
        if merged and b <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([b, e])
    t, left, rate_busy = start, work, 1.0 / (1.0 + slowdown)
    for b, e in merged:
        if b > t:  # free time before this interval
            if left <= b - t:
                return t + left
            left -= b - t
            t = b
        span = e - t
        if left <= span * rate_busy:
            return t + left / rate_busy
        left -= span * rate_busy
        t = e
    return t + left


def step_overhead(bucket_sizes: Sequence[float], costs: DDPCosts) -> float:
    """DDP's own seconds per step when nothing overlaps (communication fully exposed): every
    bucket's copy-in and host cost, and the copy back. With overlap the engine hides part of
    it; this bound is what a per-bucket cost adds to a communication-bound step."""
    total = float(sum(bucket_sizes))
    return (sum(bucket_copy_in_time(b, costs) for b in bucket_sizes) + len(bucket_sizes) * costs.bucket_overhead
            + copy_back_time(total, costs))


def parse_ddp_costs(raw: Mapping[str, Any], source: str, where: str = "ddp") -> DDPCosts:
    """The DDP costs of a scenario's raw ``ddp:`` mapping (keys :data:`KEYS`; the section's
    other keys are the schema's). ScenarioError naming ``ddp.KEY`` for a bad value. The schema
    reads the keys (:func:`commsim.scenario.schema_training.read_ddp_costs`, which a scenario
    below this package can import); this is the same reader."""
    return read_ddp_costs(raw, source, where)


def charges(costs: DDPCosts, world_size: int) -> bool:
    """Whether DDP's own costs change the schedule at all. Not on one GPU (DDP reduces nothing
    there: the engine's rule), nor with every cost off: then the engine runs the schedule it ran
    before the costs existed, bit for bit."""
    return world_size > 1 and (costs.bucket_overhead > 0 or costs.overlap_slowdown > 0
                               or not costs.gradient_as_bucket_view)


class InFlight:
    """One step's collectives in flight on each rank's communication stream, and compute slowed
    by them: :func:`stretched_finish` over rank vectors.

    A rank's collectives run one after another (each launches once the previous one is done), so
    its busy time is a sequence of disjoint chains (collectives back to back; a new chain starts
    when the stream was idle before a launch). Compute started at t only needs the chains that end
    after t, in order. Each rank keeps its last few chains as the rows of two (chains, n) arrays,
    oldest first (begin = end = -1 for a rank with fewer); a chain leaves when a new one starts and
    it ended before any later compute can start (`floor` in :meth:`add`), else a row is added, so
    the result is exact with as few rows as the schedule needs (one, or two with a gap).
    ``clocks``: the thermally throttled ranks' clocks (rank -> ThermalClock), whose compute is
    stretched in work units (module docstring), one rank at a time."""

    def __init__(self, clocks: Mapping[int, Any], slowdown: float):
        self.clocks = clocks
        self.slowdown = slowdown
        self.rate = 1.0 / (1.0 + slowdown)
        self.begin: Optional[np.ndarray] = None  # (chains, n) each chain's start on each rank
        self.end: Optional[np.ndarray] = None  # and its end
        self.last: Optional[np.ndarray] = None  # (n,) the last collective's finish
        self.zero = np.zeros(0)

    def add(self, begin: np.ndarray, end: np.ndarray, floor: np.ndarray) -> None:
        """The next collective on the stream: running from `begin` to `end` on each rank; no later
        compute starts before `floor` there."""
        if self.slowdown <= 0:
            return
        if self.last is None:
            self.begin, self.end = begin[None].copy(), end[None].copy()
        else:
            new = begin > self.last  # else begin == last: queued behind the previous one, same chain
            if new.any():
                if (new & (self.end[0] > floor)).any():  # the oldest chain can still slow compute: keep it
                    empty = np.full((1, len(begin)), -1.0)
                    self.begin, self.end = np.vstack([empty, self.begin]), np.vstack([empty, self.end])
                if new.all():
                    self.begin[:-1], self.end[:-1] = self.begin[1:], self.end[1:]
                    self.begin[-1] = begin
                else:
                    r = np.flatnonzero(new)
                    self.begin[:-1, r], self.end[:-1, r] = self.begin[1:, r], self.end[1:, r]
                    self.begin[-1, r] = begin[r]
            self.end[-1] = end
        self.last = end

    def compute(self, start: np.ndarray, work: np.ndarray) -> np.ndarray:
        """When `work` (full-clock seconds per rank) started at `start` is done on each rank."""
        if self.slowdown <= 0 or self.last is None:
            t = start + work
        else:
            # np.maximum against a zero vector: against the scalar 0.0 it is several times slower
            zero = self.zero if len(self.zero) == len(start) else np.zeros(len(start))
            self.zero = zero
            t, left, rate = start, np.asarray(work, dtype=np.float64), self.rate
            rows = len(self.begin)
            for k in range(rows - 1):  # older chains (a gap before the last one), in order
                if (self.end[k] <= t).all():
                    continue  # over on every rank
                free = np.minimum(np.maximum(self.begin[k] - t, zero), left)  # full rate before the chain
                t = t + free
                left = left - free
                slow = np.minimum(np.maximum(self.end[k] - t, zero) * rate, left)  # work done while it runs
                t = t + slow / rate
                left = left - slow
            # the last chain [b, e] in closed form: `free` at full rate before it, then the work done
            # inside it, `slow`, takes (1 + slowdown) times as long: the finish is t + left + slowdown x slow
            free = np.maximum(self.begin[-1] - t, zero)
            slow = np.maximum(np.minimum((self.end[-1] - t - free) * rate, left - free), zero)
            t = t + left + self.slowdown * slow
        for r, clock in self.clocks.items():
            if self.last is None or self.slowdown <= 0:
                t[r] = clock.finish(start[r], work[r])
                continue
            k = len(self.begin)
            units = clock.work_done(np.concatenate(([start[r]], self.begin[:, r], self.end[:, r])))
            done = stretched_finish(float(units[0]), float(work[r]), zip(units[1:k + 1], units[k + 1:]), self.slowdown)
            t[r] = clock.time_for_work(done)
        return t


class ChargedBackward:
    """One step's last backward on every rank (vectors) with DDP's own costs, bucket by bucket.

    The backward is cut at each bucket's ready point (gradient bytes produced at a uniform rate,
    or all at its end without overlap); after each cut the compute stream copies the bucket into
    its flat buffer (:func:`bucket_copy_in_time`), delaying the rest of backward; the host issues
    the bucket's all-reduce :func:`bucket_launch_time` after that copy (launches one after
    another); backward computes ``1 / (1 + overlap_slowdown)`` slower while the rank's own
    all-reduces run (:class:`InFlight`); :attr:`copy_back` seconds before the optimizer copy
    the reduced buckets back (:func:`copy_back_time`). Use: :meth:`begin` per step, then per
    bucket :meth:`bucket` (its issue time) and :meth:`ran` (its collective's start and finish),
    then :meth:`end`."""

    def __init__(self, buckets: Sequence[float], overlap: bool, costs: DDPCosts, clocks: Mapping[int, Any]):
        buckets = np.asarray(buckets, dtype=np.float64)
        nb = len(buckets)
        fractions = np.cumsum(buckets) / max(buckets.sum(), 1.0) if overlap else np.ones(nb)
        self.share = np.diff(fractions, prepend=0.0)  # of the backward, computed before each bucket is ready
        self.remainder = 1.0 - (fractions[-1] if nb else 0.0)  # the shares' rounding, or no bucket at all
        self.copy_in = [bucket_copy_in_time(float(b), costs) for b in buckets]
        self.copy_back = copy_back_time(float(buckets.sum()), costs)
        self.costs = costs
        self.clocks = clocks

    def begin(self, backward: np.ndarray, start: np.ndarray) -> None:
        """A new step: the last backward (`backward` full-clock seconds per rank) starts at `start`."""
        self.backward = backward
        self.t = start
        self.backward_end = start
        self.issued: Optional[np.ndarray] = None
        self.in_flight = InFlight(self.clocks, self.costs.overlap_slowdown)

    def bucket(self, j: int) -> np.ndarray:
        """Compute up to bucket j's ready point and copy it in; returns when its all-reduce is issued."""
        if self.share[j] > 0:
            self.t = self.backward_end = self.in_flight.compute(self.t, self.backward * self.share[j])
        if self.copy_in[j] > 0:
            self.t = self.t + self.copy_in[j]
        # bucket_launch_time on every rank: after the copy, and after the previous launch
        issue = (self.t if self.issued is None else np.maximum(self.t, self.issued)) + self.costs.bucket_overhead
        self.issued = issue
        return issue

    def ran(self, begin: np.ndarray, finish: np.ndarray) -> None:
        """The bucket's all-reduce ran from `begin` to `finish` on each rank's stream."""
        self.in_flight.add(begin, finish, self.t)

    def end(self) -> Tuple[np.ndarray, np.ndarray]:
        """(when the compute stream is done with the backward and its copies, when backward's
        compute ended) on each rank."""
        if self.remainder > 0:
            self.t = self.backward_end = self.in_flight.compute(self.t, self.backward * self.remainder)
        return self.t, self.backward_end
