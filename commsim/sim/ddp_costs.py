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
- ``memory_bandwidth`` (bytes/s, default 1.5 TB/s, the A100 40 GB HBM2 datasheet rate; a cluster
  ``preset`` naming its GPUs gives theirs: H100 SXM5 3.35 TB/s, A100 SXM4 1,555 GB/s, V100 900 GB/s, T4 320 GB/s,
  :data:`commsim.scenario.schema_training.PRESET_MEMORY_BANDWIDTH`) with
  ``gradient_as_bucket_view`` (default false, as PyTorch): each gradient is copied into its
  bucket's flat buffer on the compute stream (read + write: 2 bytes moved per byte, so
  ``2 B / memory_bandwidth``), and, without the bucket view, copied back into ``.grad`` after
  the all-reduce (the same again, before the optimizer). With the view, neither copy.
- ``overlap_slowdown`` (fraction, default 0.189): compute runs slower while a collective is in
  flight, since NCCL's kernels occupy SMs (one thread block per channel: 16 of an A100's 108
  SMs is 15%) and memory bandwidth. Compute that overlaps communication progresses at
  ``1 / (1 + overlap_slowdown)`` of its rate (:func:`stretched_finish`). The default is the
  mean compute slowdown measured with communication overlapped against compute alone, 18.9%
  (max 40%), over training workloads on A100, H100, MI210 and MI250 ("Characterizing
  Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning: Performance and
  Power Implications", arXiv:2507.03114, 2025). A GPU figure: for CPU ranks (gloo) fit it with
  ``commsim calibrate --ddp-fit`` (the mitigation job measures its own).

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

from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple

import numpy as np

from commsim.scenario.schema_training import DDP_COST_KEYS as KEYS, read_ddp_costs
from commsim.scenario.spec import DDPCosts
from commsim.sim.stragglers import ThermalClock

__all__ = ["DDPCosts", "NONE", "KEYS", "bucket_copy_in_time", "bucket_launch_time", "copy_back_time",
           "stretched_finish", "step_overhead", "parse_ddp_costs", "charges", "clock_group", "InFlight", "ChargedBackward"]

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
    return world_size > 1 and costs.on


def clock_group(clocks: Mapping[int, ThermalClock]) -> Optional[Tuple[np.ndarray, ThermalClock]]:
    """The throttled ranks (sorted) and one ThermalClock whose parameters are their arrays: its
    ``work_done`` / ``time_for_work`` map all of them at once (None without a throttled rank)."""
    if not clocks:
        return None
    ranks = np.array(sorted(clocks), dtype=np.int64)
    fields = ("heat_up", "throttled_time", "clock_fraction", "phase")
    return ranks, ThermalClock(*(np.array([getattr(clocks[int(r)], f) for r in ranks]) for f in fields))


def _through_chains(start: np.ndarray, work: np.ndarray, begin: np.ndarray, end: np.ndarray, slowdown: float,
                    zero: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per column: (when `work` started at `start` is done, at ``1 / (1 + slowdown)`` of its rate
    inside the chains (rows of `begin`/`end`: disjoint, in order) and at full rate outside, and
    how much later than at full rate throughout)."""
    t, left, rate = start, work, 1.0 / (1.0 + slowdown)
    late = 0.0
    for k in range(len(begin) - 1):  # older chains (a gap before the last one), in order
        if (end[k] <= t).all():
            continue  # over in every column
        free = np.minimum(np.maximum(begin[k] - t, zero), left)  # full rate before the chain
        t = t + free
        left = left - free
        slow = np.minimum(np.maximum(end[k] - t, zero) * rate, left)  # work done while it runs
        t = t + slow / rate
        left = left - slow
        late = late + slowdown * slow
    # the last chain [b, e] in closed form: `free` at full rate before it, then the work done
    # inside it, `slow`, takes (1 + slowdown) times as long: the finish is t + left + slowdown x slow
    # (in place: at 10^5 ranks a fresh array per operation costs more than the arithmetic)
    free = np.subtract(begin[-1], t)
    np.maximum(free, zero, out=free)
    slow = np.subtract(end[-1], t)
    slow -= free
    slow *= rate
    np.subtract(left, free, out=free)
    np.minimum(slow, free, out=slow)
    np.maximum(slow, zero, out=slow)
    slow *= slowdown
    finish = np.add(t, left)
    finish += slow
    if isinstance(late, float):  # no older chain ran: `slow` is a fresh array, the lateness itself
        return finish, slow
    slow += late
    return finish, slow


def _through_chains_float(start: float, work: float, begin, end, slowdown: float) -> Tuple[float, float]:
    """:func:`_through_chains` of one column, on plain floats (a rank past a finished chain
    gains nothing from it there, so the vector form's skip is per column here)."""
    t, left, rate, late = start, work, 1.0 / (1.0 + slowdown), 0.0
    for k in range(len(begin) - 1):
        if left <= 0.0:
            break  # the work is done: every later chain adds exact zeros (bit-identical to running on)
        if end[k] <= t:
            continue
        free = min(max(begin[k] - t, 0.0), left)
        t += free
        left -= free
        slow = min(max(end[k] - t, 0.0) * rate, left)
        t += slow / rate
        left -= slow
        late += slowdown * slow
    free = max(begin[-1] - t, 0.0)
    slow = max(min((end[-1] - t - free) * rate, left - free), 0.0) * slowdown
    return t + left + slow, slow + late


def _one_chain_float(start: float, work: float, begin: float, end: float, slowdown: float) -> Tuple[float, float]:
    """:func:`_through_chains_float` with one chain: the same operations in the same order
    (bit-identical), without building the chain lists (the partial path's common case)."""
    rate = 1.0 / (1.0 + slowdown)
    free = max(begin - start, 0.0)
    slow = max(min((end - start - free) * rate, work - free), 0.0) * slowdown
    return start + work + slow, slow + 0.0


def _through_chain_list_float(t: float, w: float, chains, begin: int, end: int, slowdown: float):
    """:func:`_through_chains_float` over `chains` (rows holding each chain's begin and end at
    indices `begin` and `end`), by :func:`_one_chain_float` where there is one chain."""
    if len(chains) == 1:
        c = chains[0]
        return _one_chain_float(t, w, c[begin], c[end], slowdown)
    # _through_chains_float's operations on the rows themselves: copying out the columns cost
    # O(chains) per bucket, quadratic where launches lag compute (bucket_overhead above the
    # compute per bucket) and every collective still ahead is a chain of its own
    left, rate, late = w, 1.0 / (1.0 + slowdown), 0.0
    for k in range(len(chains) - 1):
        if left <= 0.0:
            break  # the work is done: every later chain adds exact zeros
        c = chains[k]
        if c[end] <= t:
            continue
        free = min(max(c[begin] - t, 0.0), left)
        t += free
        left -= free
        slow = min(max(c[end] - t, 0.0) * rate, left)
        t += slow / rate
        left -= slow
        late += slowdown * slow
    c = chains[-1]
    free = max(c[begin] - t, 0.0)
    slow = max(min((c[end] - t - free) * rate, left - free), 0.0) * slowdown
    return t + left + slow, slow + late


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
    ``throttled``: :func:`clock_group` of the thermally throttled ranks, whose compute is
    stretched in work units (module docstring): their chains mapped through the clock, the same
    arithmetic, the finish mapped back."""

    def __init__(self, throttled: Optional[Tuple[np.ndarray, ThermalClock]], slowdown: float):
        self.throttled = throttled
        self.slowdown = slowdown
        self.begin: Optional[np.ndarray] = None  # (chains, n) each chain's start on each rank
        self.end: Optional[np.ndarray] = None  # and its end
        self.last: Optional[np.ndarray] = None  # (n,) the last collective's finish
        self.zero = np.zeros(0)
        self.stretch = 0.0  # (n,) seconds the slowdown added to the compute so far (0 until any)
        # the last chain's latest begin and earliest end over the ranks, where the caller gave
        # them (add's `bounds`; None: unknown): compute's scalar test for the common case
        self.begin_high: Optional[float] = None
        self.end_low: Optional[float] = None
        # a few throttled ranks: one scalar clock each (ThermalClock's float path is ~30x
        # cheaper than a vectorized call on a handful of elements)
        self.scalar_clocks = None
        self._units: dict = {}  # rank -> {time: the clock's work_done there} (compute's memo)
        if throttled is not None and len(throttled[0]) <= 16:
            ranks, clock = throttled
            fields = ("heat_up", "throttled_time", "clock_fraction", "phase")
            self.scalar_clocks = [(int(r), ThermalClock(*(float(getattr(clock, f)[i]) for f in fields)))
                                  for i, r in enumerate(ranks)]

    # hints to :meth:`add`: the caller knows (from scalar bounds) that the collective begins at
    # the previous one's end on every rank (QUEUED), or after it on every rank (NEW)
    QUEUED, NEW = "queued", "new"

    def add(self, begin: np.ndarray, end: np.ndarray, floor: np.ndarray, hint: Optional[str] = None,
            bounds: Optional[Tuple[float, float]] = None) -> None:
        """The next collective on the stream: running from `begin` to `end` on each rank; no later
        compute starts before `floor` there. `hint`: :attr:`QUEUED` or :attr:`NEW` where the
        caller knows ``begin == last`` or ``begin > last`` on every rank (the same result, without
        the O(n) comparisons); `bounds`: ``(begin.max(), end.min())`` where the caller has them."""
        if self.slowdown <= 0:
            return
        high = None if bounds is None else bounds[0]
        self.end_low = None if bounds is None else bounds[1]
        if self.last is None:
            self.begin, self.end = begin[None].copy(), end[None].copy()
            self.begin_high = high
        elif hint != InFlight.QUEUED:  # (queued: the last chain, and its begin, go on)
            self.begin_high = high if hint == InFlight.NEW else None
            if hint == InFlight.NEW:
                new, every = None, True
            else:
                new = begin > self.last  # else begin == last: queued behind the previous one, same chain
                count = int(np.count_nonzero(new))
                every = count == len(new)
            if every or count:
                later = self.end[0] > floor
                if (later if every else new & later).any():  # the oldest chain can still slow compute: keep it
                    empty = np.full((1, len(begin)), -1.0)
                    self.begin, self.end = np.vstack([empty, self.begin]), np.vstack([empty, self.end])
                if every:
                    self.begin[:-1], self.end[:-1] = self.begin[1:], self.end[1:]
                    self.begin[-1] = begin
                else:
                    r = np.flatnonzero(new)
                    self.begin[:-1, r], self.end[:-1, r] = self.begin[1:, r], self.end[1:, r]
                    self.begin[-1, r] = begin[r]
        if self.last is not None:
            self.end[-1] = end
        self.last = end

    def compute(self, start: np.ndarray, work: np.ndarray,
                bounds: Optional[Tuple[float, float, float]] = None) -> np.ndarray:
        """When `work` ((n,) full-clock seconds per rank) started at `start` is done on each rank.
        `bounds`: ``(start.min(), start.max(), work.max())`` where the caller has them."""
        if self.slowdown <= 0 or self.last is None:
            t = start + work
            if self.throttled is not None:
                ranks, clock = self.throttled
                t[ranks] = clock.finish(start[ranks], work[ranks])
            return t
        if (bounds is not None and len(self.begin) == 1 and self.begin_high is not None
                and self.end_low is not None and self.begin_high <= bounds[0]
                and (self.end_low - bounds[1]) * (1.0 / (1.0 + self.slowdown)) >= bounds[2]):
            # every rank's compute starts inside its one chain and ends before the chain does
            # (rounding is monotone, so the scalar bounds bound every rank's terms): all of it
            # runs slowed, t + work + slowdown x work, _through_chains' arithmetic bit for bit
            extra = work * self.slowdown
            t = start + work
            t += extra
        else:
            if len(self.zero) != len(start):
                # np.maximum against a zero vector: against the scalar 0.0 it is several times slower
                self.zero = np.zeros(len(start))
            t, extra = _through_chains(start, work, self.begin, self.end, self.slowdown, self.zero)
        if self.scalar_clocks is not None:
            for r, clock in self.scalar_clocks:
                # a chain's begin (and the end a segment then starts at) recur from call to call:
                # the clock's work_done of a time is memoized (a few entries per rank)
                memo = self._units.setdefault(r, {})
                if len(memo) > 8:
                    memo.clear()
                wd = clock.work_done_float
                x = float(start[r])
                units = memo[x] if x in memo else memo.setdefault(x, wd(x))
                begin = [memo[x] if x in memo else memo.setdefault(x, wd(x)) for x in self.begin[:, r].tolist()]
                end = [memo[x] if x in memo else memo.setdefault(x, wd(x)) for x in self.end[:, r].tolist()]
                w = float(work[r])
                done, _ = _through_chains_float(units, w, begin, end, self.slowdown)
                finish = clock.time_for_work_float(done)
                t[r] = finish
                extra[r] = finish - clock.time_for_work_float(units + w)
        elif self.throttled is not None:
            ranks, clock = self.throttled
            rows = len(self.begin)  # one clock call for the start and every chain end, one back
            units = clock.work_done(np.vstack([start[ranks], self.begin[:, ranks], self.end[:, ranks]]))
            done, _ = _through_chains(units[0], work[ranks], units[1:rows + 1], units[rows + 1:], self.slowdown,
                                      self.zero[:len(ranks)])
            finish, unslowed = clock.time_for_work(np.vstack([done, units[0] + work[ranks]]))
            t[ranks] = finish
            extra[ranks] = finish - unslowed
        self.stretch += extra
        return t


# ChargedBackward.ahead's running maximum over rows: np.maximum.accumulate along the rows up to
# this many ranks, a row-by-row loop beyond (measured on 56 rows: 7 against 36 us at 32 ranks,
# 14 against 37 at 64, 50 against 36 at 128; 475 against 16 at 4 x 16,384)
ACCUMULATE_MAX_RANKS = 64

# at most this many ranks go bucket by bucket beside a block (ChargedBackward.partial): a few
# stragglers; beyond that the per-rank Python costs more than the vector path
PARTIAL_RANKS = 8


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

    def __init__(self, buckets: Sequence[float], overlap: bool, costs: DDPCosts, clocks: Mapping[int, Any],
                 ready: Optional[Sequence[float]] = None):
        buckets = np.asarray(buckets, dtype=np.float64)
        nb = len(buckets)
        # `ready`: each bucket's ready point (share of the backward done), as
        # Scenario.bucket_ready_points gives it (an explicit ddp.bucket_ready included); without
        # it, each bucket's share of the cumulative bytes (gradients at a uniform rate)
        if not overlap:
            fractions = np.ones(nb)
        elif ready is not None:
            fractions = np.asarray(ready, dtype=np.float64)
            if fractions.shape != (nb,):
                raise ValueError(f"expected {nb} ready points (one per bucket), got {fractions.shape}")
        else:
            fractions = np.cumsum(buckets) / max(buckets.sum(), 1.0)
        self.share = np.diff(fractions, prepend=0.0)  # of the backward, computed before each bucket is ready
        self.remainder = 1.0 - (fractions[-1] if nb else 0.0)  # the shares' rounding, or no bucket at all
        self.copy_in = [bucket_copy_in_time(float(b), costs) for b in buckets]
        self.copy_back = copy_back_time(float(buckets.sum()), costs)
        self.costs = costs
        self.throttled = clock_group(clocks)
        self._clocks = [(int(r), clocks[int(r)]) for r in sorted(clocks)]
        self._copy_in = np.array(self.copy_in, dtype=np.float64)
        self._ahead: Optional[tuple] = None
        self._late: Optional[np.ndarray] = None
        self._partial: Optional[PartialRanks] = None

    def begin(self, backward: np.ndarray, start: np.ndarray) -> None:
        """A new step: the last backward (`backward` full-clock seconds per rank) starts at `start`."""
        self.backward = backward
        self.t = start
        self.backward_end = start
        self.issued: Optional[np.ndarray] = None
        self.in_flight = InFlight(self.throttled, self.costs.overlap_slowdown)
        self.copied = 0.0  # seconds of copies in so far

    def bucket(self, j: int) -> np.ndarray:
        """Compute up to bucket j's ready point and copy it in; returns when its all-reduce is issued."""
        if self.share[j] > 0:
            self.t = self.backward_end = self.in_flight.compute(self.t, self.backward * self.share[j])
        if self.copy_in[j] > 0:
            self.t = self.t + self.copy_in[j]
            self.copied += self.copy_in[j]
        # bucket_launch_time on every rank: after the copy, and after the previous launch
        issue = (self.t if self.issued is None else np.maximum(self.t, self.issued)) + self.costs.bucket_overhead
        self.issued = issue
        return issue

    def ran(self, begin: np.ndarray, finish: np.ndarray) -> None:
        """The bucket's all-reduce ran from `begin` to `finish` on each rank's stream."""
        self.in_flight.add(begin, finish, self.t)

    def ahead(self, j: int, rows: int, partial: bool = False) -> Optional[Tuple[np.ndarray, bool]]:
        """Buckets j..j+rows-1 at once, ahead of their collectives: ``(issue, binding)``, the
        (rows, n) issue times, or None where this shortcut does not apply.

        Exact when no compute is slowed (``overlap_slowdown`` 0: ``binding`` False). Otherwise
        (``binding`` True) it assumes that every rank's stream stays busy throughout: each row is
        exact if its bucket and every earlier one of the block was issued, on every rank, no later
        than the previous collective's finish there (then each collective launches at that finish,
        the stream's chain never breaks, and every backward segment from now on runs inside it at
        the slowed rate: ``(1 + overlap_slowdown)`` times its work, the copies at their own
        time between). That needs the chain to have begun by now on every rank (checked here);
        the caller checks the rest row by row and keeps the rows that passed (:meth:`keep`).
        Thermally throttled ranks are stepped in their work units with the clock's float path,
        so it applies with at most 16 of them. With `partial`, up to :data:`PARTIAL_RANKS` ranks
        whose chain has not begun are allowed (:attr:`late_ranks`): their rows are to be
        replaced by :meth:`partial`'s."""
        slowdown = self.costs.overlap_slowdown
        flight = self.in_flight
        if len(self._clocks) > 16:
            return None
        self._late = None
        if slowdown > 0:
            if flight.last is None:
                return None
            begun = flight.begin[-1] <= self.t
            if not begun.all():
                late = np.flatnonzero(~begun)
                if not partial or len(late) > PARTIAL_RANKS:
                    return None
                self._late = late  # their rows are not valid: the caller steps them (:meth:`partial`)
        share, copy = self.share[j:j + rows], self._copy_in[j:j + rows]
        rate = 1.0 + slowdown if slowdown > 0 else 1.0
        before = np.concatenate(([0.0], np.cumsum(copy[:-1])))  # copies done before each segment starts
        done = np.multiply.outer(np.cumsum(share) * rate, self.backward)  # (rows, n) compute ends
        done += self.t
        done += before[:, None]
        extra = []  # per throttled rank: the slowdown's seconds after each row (None: a late rank)
        skip = () if self._late is None else set(self._late.tolist())
        share_list, copy_list = share.tolist(), copy.tolist()  # Python floats: no numpy scalar per row
        for r, clock in self._clocks:
            if r in skip:  # a late rank's rows are :meth:`partial`'s: not stepped here
                extra.append(None)
                continue
            t, work, late, lates, column = float(self.t[r]), float(self.backward[r]), 0.0, [], []
            work_done, time_for_work = clock.work_done_float, clock.time_for_work_float
            for part, c in zip(share_list, copy_list):
                if part > 0:  # InFlight.compute's closed form inside the last chain, in work units
                    w = work * part
                    units = work_done(t)
                    if slowdown > 0:
                        t_end = time_for_work(units + w + slowdown * w)
                        late += t_end - time_for_work(units + w)
                    else:
                        t_end = time_for_work(units + w)
                    t = t_end
                column.append(t)
                lates.append(late)
                t = t + c
            done[:, r] = column
            extra.append(lates)
        # bucket_launch_time row after row: issue_i = max(issue_{i-1}, done_i + copy_i) + overhead,
        # i.e. (i + 1) overhead + max(issued before, max over l <= i of done_l + copy_l - l overhead)
        overhead = self.costs.bucket_overhead
        steps = np.arange(len(share)) * overhead
        issue = done + copy[:, None]
        issue -= steps[:, None]
        if self.issued is not None:
            np.maximum(issue[0], self.issued, out=issue[0])
        if issue.shape[1] <= ACCUMULATE_MAX_RANKS:  # a few ranks: one call, not a numpy call per row
            np.maximum.accumulate(issue, axis=0, out=issue)
        else:
            for i in range(1, len(issue)):  # row by row: np.maximum.accumulate in place is 50x slower
                np.maximum(issue[i], issue[i - 1], out=issue[i])
        issue += (steps + overhead)[:, None]
        self._ahead = (j, done, issue, extra)
        self._partial = None
        return issue, slowdown > 0

    @property
    def late_ranks(self) -> Optional[np.ndarray]:
        """The ranks the last :meth:`ahead` left to :meth:`partial` (None: none)."""
        return self._late

    def partial(self, ranks: np.ndarray) -> "PartialRanks":
        """Step `ranks` (a few) bucket by bucket on plain floats while the last :meth:`ahead`'s
        block runs on the others: exactly :meth:`bucket` and :meth:`ran` restricted to them (a
        rank's compute depends only on its own collectives); :meth:`keep` writes them back."""
        self._partial = PartialRanks(self, ranks)
        return self._partial

    def keep(self, rows: int, finish: Optional[np.ndarray]) -> None:
        """Take the first `rows` (>= 1) buckets of the last :meth:`ahead` as run; `finish`: the
        last of their collectives' finish on every rank (the stream's chain now ends there; only
        needed when that call was binding)."""
        j, done, issue, extra = self._ahead
        self._ahead = None
        last = rows - 1
        share, copy = self.share[j:j + rows], self._copy_in[j:j + rows]
        computed = np.flatnonzero(share > 0)
        if len(computed):  # the last segment's compute end (copies after it are not backward)
            self.backward_end = done[computed[-1]].copy()
        self.t = done[last] + copy[last]
        self.issued = issue[last].copy()
        self.copied += float(copy.sum())
        flight = self.in_flight
        if self.costs.overlap_slowdown > 0:
            stretch = (self.costs.overlap_slowdown * float(share.sum())) * self.backward
            for (r, _), lates in zip(self._clocks, extra):
                if lates is not None:  # else a late rank: PartialRanks.write_back sets it
                    stretch[r] = lates[last]
            flight.stretch = flight.stretch + stretch
            flight.end[-1] = finish
            flight.last = finish
        if self._partial is not None:
            self._partial.write_back()
            self._partial = None

    def overhead(self) -> np.ndarray:
        """(n,) or scalar: the seconds of this step's backward that were DDP's own costs (copies
        in, the slowdown under overlap), not compute: the engine counts them as waiting."""
        return self.copied + self.in_flight.stretch

    def end(self) -> Tuple[np.ndarray, np.ndarray]:
        """(when the compute stream is done with the backward and its copies, when backward's
        compute ended) on each rank."""
        if self.remainder > 0:
            self.t = self.backward_end = self.in_flight.compute(self.t, self.backward * self.remainder)
        return self.t, self.backward_end


class PartialRanks:
    """A few ranks of a :class:`ChargedBackward` stepped bucket by bucket on plain floats while
    the block of :meth:`ChargedBackward.ahead` runs on the rest (:meth:`ChargedBackward.partial`).

    Each rank keeps its own state (compute time, backward end, last issue, its chains of
    collectives, the slowdown's seconds); the arithmetic is :class:`InFlight`'s column by column
    (:func:`_through_chains_float`, the thermal clock's float path), so the results are the
    bucket-by-bucket path's. A chain that ended before the floor of every later compute is
    dropped: it slows nothing (the vector form adds exact zeros for it)."""

    def __init__(self, charged: ChargedBackward, ranks: np.ndarray):
        self.charged = charged
        self.ranks = [int(r) for r in ranks]
        flight = charged.in_flight
        clocks = dict(flight.scalar_clocks or ())
        stretch = flight.stretch
        self.state = []
        for r in self.ranks:
            # [begin, end, begin in work units, end in work units]: the units (a throttled rank's
            # clock) computed once per chain end, not once per bucket (None: not yet)
            chains = [[b, e, None, None] for b, e in zip(flight.begin[:, r].tolist(), flight.end[:, r].tolist())]
            self.state.append([float(charged.t[r]), float(charged.backward_end[r]), float(charged.issued[r]),
                               chains, float(flight.last[r]),
                               float(stretch[r]) if isinstance(stretch, np.ndarray) else float(stretch),
                               clocks.get(r), float(charged.backward[r])])
        self.rows = 0
        self._share = charged.share.tolist()  # Python floats: a numpy scalar per bucket costs more

    def bucket(self, j: int) -> list:
        """:meth:`ChargedBackward.bucket` j on these ranks: their issue times."""
        ch = self.charged
        share, copy = self._share[j], ch.copy_in[j]
        overhead, slowdown = ch.costs.bucket_overhead, ch.costs.overlap_slowdown
        out = []
        for st in self.state:
            t = st[0]
            if share > 0:
                w = st[7] * share
                chains, clock = st[3], st[6]
                if clock is None:
                    t, extra = _through_chain_list_float(t, w, chains, 0, 1, slowdown)
                else:
                    wd = clock.work_done_float
                    units = wd(t)
                    # only the newest chains lack their units (ran_values appends chains and
                    # extends the last one): fill from the end, not over every chain per bucket
                    for c in reversed(chains):
                        if c[2] is not None and c[3] is not None:
                            break
                        if c[2] is None:
                            c[2] = wd(c[0])
                        if c[3] is None:
                            c[3] = wd(c[1])
                    done, _ = _through_chain_list_float(units, w, chains, 2, 3, slowdown)
                    t = clock.time_for_work_float(done)
                    extra = t - clock.time_for_work_float(units + w)
                st[5] += extra
                st[1] = t
            if copy > 0:
                t = t + copy
            st[0] = t
            st[2] = (t if t > st[2] else st[2]) + overhead
            out.append(st[2])
        return out

    def ran(self, issue: np.ndarray, previous: np.ndarray, finish: np.ndarray) -> None:
        """:meth:`ChargedBackward.ran` on these ranks: the collective issued at `issue` after the
        previous one's finish `previous` finished at `finish` (every rank's)."""
        self.ran_values([float(issue[r]) for r in self.ranks], [float(previous[r]) for r in self.ranks],
                        [float(finish[r]) for r in self.ranks])

    def ran_values(self, issue: Sequence[float], previous: Sequence[float], finish: Sequence[float]) -> None:
        """:meth:`ran` given these ranks' values only (in :attr:`ranks` order)."""
        for st, b, p, e in zip(self.state, issue, previous, finish):
            b = b if b > p else p  # its launch
            if b > st[4]:  # a new chain: the stream was idle before this launch
                # drop the chains ended by the floor: the oldest ones (chains are disjoint, in
                # order, so their ends increase), in place rather than a new list per bucket
                floor, chains = st[0], st[3]
                k = 0
                while k < len(chains) and chains[k][1] <= floor:
                    k += 1
                if k:
                    del chains[:k]
                chains.append([b, e, None, None])
            else:
                c = st[3][-1]
                c[1], c[3] = e, None  # its end in work units is stale
            st[4] = e
        self.rows += 1

    def write_back(self) -> None:
        """Put these ranks' state into the :class:`ChargedBackward` and its :class:`InFlight`."""
        ch, flight = self.charged, self.charged.in_flight
        ch.t = ch.t.copy()
        ch.backward_end = ch.backward_end.copy()
        ch.issued = ch.issued.copy()
        if not isinstance(flight.stretch, np.ndarray):
            flight.stretch = np.full(len(ch.t), float(flight.stretch))
        flight.last = flight.last.copy()
        rows = max(len(st[3]) for st in self.state)
        if rows > len(flight.begin):
            pad = np.full((rows - len(flight.begin), len(ch.t)), -1.0)
            flight.begin, flight.end = np.vstack([pad, flight.begin]), np.vstack([pad, flight.end])
        rows = len(flight.begin)
        for r, st in zip(self.ranks, self.state):
            ch.t[r], ch.backward_end[r], ch.issued[r] = st[0], st[1], st[2]
            chains = st[3]
            m = len(chains)
            flight.begin[:rows - m, r] = -1.0
            flight.end[:rows - m, r] = -1.0
            flight.begin[rows - m:, r] = [c[0] for c in chains]
            flight.end[rows - m:, r] = [c[1] for c in chains]
            flight.last[r] = st[4]
            flight.stretch[r] = st[5]
