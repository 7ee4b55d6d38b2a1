"""k collective streams per rank (``ddp.comm_streams`` > 1): DDP's bucket all-reduces run up to k
at once on each rank and share the bandwidth while they do.

Why: NCCL runs a communicator's collectives in order on one stream (the engine's schedule,
``comm_streams: 1``), but torch's ProcessGroupGloo serves its queue of work with a pool of worker
threads (2 by default; ``ProcessGroupGloo::Options::threads``), each taking the next queued
collective as soon as it is free: two DDP buckets' all-reduces then overlap (on the gloo
validator, 55 of 75 ``gloo:all_reduce`` profiler spans start before the previous one ends; with
one thread none do).

Semantics (plain DDP, ``ddp.sharding: none``):

- Issue: as in the engine (:mod:`commsim.sim.ddp_costs`): the backward is cut at each bucket's
  ready point, the bucket is copied into its buffer on the compute stream, and its all-reduce is
  issued ``bucket_overhead`` after that copy and after the rank's previous issue.
- Launch: a rank takes its issued collectives in order (a FIFO queue, as the work queue of
  ProcessGroupGloo) and launches the next one once fewer than k of its collectives are in flight.
- Start: a collective starts once every rank has launched it (every rank's result depends on
  every rank's data), at the latest launch.
- Duration: each collective's time T alone, from its kernel on the scenario's fabric when all
  ranks launch together (``uniform_time``), is split into a fixed part F, the same kernel's
  time for 0 bytes on the fabric priced at the collective's size (its latency terms), and a
  bandwidth part W = T - F. After its start it spends F, unshared; then its bandwidth part
  runs under generalized processor sharing with capacity c (``ddp.comm_capacity``, default 1):
  while m collectives are in their bandwidth part, each progresses at min(1, c/m) of its rate
  alone (Cohen, "The multiple phase service network with generalized processor sharing", Acta
  Informatica 12, 1979: a total service rate min(m, c) split equally; c = 1 is Kleinrock's
  egalitarian processor sharing, Queueing Systems Vol. 2, Sec. 4.4: one link that concurrent
  collectives split; c > 1, up to c run at full rate, as gloo's worker threads on as many free
  CPU cores). It finishes on every rank at the same moment. One collective alone takes exactly
  T; m equal ones started together all end at F + m W / min(m, c), so m at once give
  m (F + W) / (F + m W / min(m, c)) times one's throughput (:func:`concurrency_gain`): at c = 1
  between 1 (all bandwidth) and m (all latency).
- ``ddp.comm_shared: all`` shares the fixed part too (the whole T runs under the sharing, no
  free part): on a CPU backend the fixed part is work on the same cores (gloo's per-collective
  hand-off, syscalls and copies), not waiting on a link; m equal ones at once then end at
  T / min(1, c/m), a gain of min(m, c) at every size.
- Compute runs ``1 / (1 + overlap_slowdown)`` slower while at least one of the rank's own
  collectives is in flight (launched there and not finished), as in the engine.
- The optimizer waits for every bucket (the copy back first, with DDP's costs).

With k = 1 the engine's own schedule runs, bit for bit: this module is not used. Not modeled
here (refused where the scenario is read, at ``ddp.comm_streams``): sharded data parallelism
(ZeRO-2, FSDP), the NCCL cost models, thermal throttling, the ``mitigation:`` remedies, and
more than :data:`commsim.scenario.schema.MAX_STREAMS_WORLD_SIZE` ranks (the step is simulated
event by event, O(buckets x ranks x log ranks): :meth:`ConcurrentStreams._backward`). Per-rank
differences in a kernel's finish times (a ring's skew under skewed launches) are not kept: every
rank finishes a collective together.

The sharing arithmetic is pure functions (:func:`split_time`, :func:`shared_advance`,
:func:`shared_rate`, :func:`shared_next`, :func:`shared_finish_times`, :func:`queued_finish_times`,
:func:`concurrency_gain`); :class:`ConcurrentStreams` is the event loop of a whole run.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from commsim.collectives.contract import Kernel
from commsim.collectives.kernels import make_kernel
from commsim.network.fabric import Fabric
from commsim.scenario.spec import Scenario
from commsim.sim.ddp_costs import bucket_copy_in_time, charges, copy_back_time
from commsim.sim.stragglers import Perturbations

__all__ = ["split_time", "shared_rate", "shared_advance", "shared_next", "shared_finish_times", "queued_finish_times",
           "concurrency_gain", "fixed_and_bandwidth", "StreamsRecords", "ConcurrentStreams"]

# a bandwidth part this close to done (relative to the clock) is done: the rounding of the
# subtractions that advance it, not work left
_DONE_ULPS = 16 * float(np.finfo(float).eps)


# -- the sharing arithmetic ------------------------------------------------------------------

def split_time(total: float, fixed: float) -> Tuple[float, float]:
    """(fixed part, bandwidth part) of a collective taking `total` seconds alone whose
    0-byte counterpart takes `fixed`: the fixed part at most the whole."""
    f = min(max(float(fixed), 0.0), float(total))
    return f, float(total) - f


def shared_rate(m: int, capacity: float = 1.0) -> float:
    """The rate (of its rate alone) at which each of m bandwidth parts in progress advances:
    min(1, c / m) (generalized processor sharing with capacity c; module docstring)."""
    return min(1.0, capacity / m) if m else 1.0


def shared_advance(remaining: np.ndarray, dt: float, capacity: float = 1.0) -> np.ndarray:
    """The bandwidth parts left after `dt` seconds of sharing: each of the m progresses
    dt min(1, c/m) (dt / m under processor sharing, c = 1)."""
    remaining = np.asarray(remaining, dtype=float)
    if not remaining.size:
        return remaining.copy()
    return remaining - dt * shared_rate(remaining.size, capacity)


def shared_next(remaining: np.ndarray, capacity: float = 1.0) -> float:
    """Seconds until the first of these bandwidth parts is done (m of them, the smallest r:
    r / min(1, c/m); m r under processor sharing); inf with none."""
    remaining = np.asarray(remaining, dtype=float)
    return float(remaining.min() / shared_rate(remaining.size, capacity)) if remaining.size else float("inf")


def shared_finish_times(start: Sequence[float], fixed: Sequence[float], work: Sequence[float],
                        capacity: float = 1.0) -> np.ndarray:
    """Finish times of collectives that start at `start`, spend `fixed` seconds each alone and
    then `work` seconds of bandwidth (alone) shared with capacity `capacity`, all at once (no
    slot limit). A direct event loop over the moments a part joins or leaves."""
    start, fixed, work = (np.asarray(x, dtype=float) for x in (start, fixed, work))
    return queued_finish_times(start, fixed, work, max(len(start), 1), capacity)


def queued_finish_times(issue: Sequence[float], fixed: Sequence[float], work: Sequence[float],
                        streams: int, capacity: float = 1.0) -> np.ndarray:
    """Finish times of collectives issued at `issue` (in this order, non-decreasing), taken in
    order by `streams` slots (one starts when it is issued and fewer than `streams` are in
    flight), each `fixed` seconds alone then `work` seconds of bandwidth under processor sharing:
    one rank's queue of all-reduces issued back to back (the validator's pipelined sweep);
    `capacity`: the sharing's (:func:`shared_rate`)."""
    issue, fixed, work = (np.asarray(x, dtype=float) for x in (issue, fixed, work))
    n = len(issue)
    finish = np.full(n, np.nan)
    nxt = 0  # the next collective to start
    in_flight = 0
    joins: List[Tuple[float, int]] = []  # (time its fixed part ends, index)
    pool: dict = {}  # index -> bandwidth part left
    now = float(issue[0]) if n else 0.0
    while nxt < n or joins or pool:
        # start what the slots allow now
        while nxt < n and in_flight < streams and issue[nxt] <= now:
            heapq.heappush(joins, (now + fixed[nxt], nxt))
            in_flight += 1
            nxt += 1
        rem = np.fromiter(pool.values(), float, len(pool))
        t_pool = now + shared_next(rem, capacity)
        t_join = joins[0][0] if joins else np.inf
        t_issue = issue[nxt] if nxt < n and in_flight < streams else np.inf
        t = min(t_pool, t_join, t_issue)
        if t_pool <= t:  # the smallest part is done: subtract it, not dt / m (exact ties)
            low = float(rem.min())
            for j in list(pool):
                pool[j] -= low
                if pool[j] <= _DONE_ULPS * max(abs(t), 1.0):
                    del pool[j]
                    finish[j] = t
                    in_flight -= 1
        elif pool:
            step = (t - now) * shared_rate(len(pool), capacity)
            for j in pool:
                pool[j] -= step
        now = t
        while joins and joins[0][0] <= now:
            _, j = heapq.heappop(joins)
            if work[j] > 0:
                pool[j] = float(work[j])
            else:
                finish[j] = now
                in_flight -= 1
    return finish


def concurrency_gain(fixed: float, work: float, m: int, capacity: float = 1.0) -> float:
    """Throughput of m equal collectives started together relative to one alone:
    m (F + W) / (F + W / min(1, c/m)) (all end together; F + m W under processor sharing)."""
    total = fixed + work / shared_rate(m, capacity)
    return m * (fixed + work) / total if total > 0 else 1.0


def fixed_and_bandwidth(kernel: Kernel, fabric: Fabric, algorithm: str, model: str) -> Tuple[float, float]:
    """(fixed part, bandwidth part) of a planned collective: its time alone and the same
    algorithm's (``auto``: the one it chose) time for 0 bytes on the fabric priced at its size."""
    name = kernel.chosen if algorithm == "auto" else algorithm
    zero = make_kernel(name, fabric.at_size(kernel.size), 0.0, model)
    return split_time(kernel.uniform_time(), zero.uniform_time())


# -- the run ---------------------------------------------------------------------------------

@dataclass
class StreamsRecords:
    """What :class:`ConcurrentStreams` fills in (the engine's RunResult fields, same shapes)."""

    step_end: np.ndarray
    rank_end: np.ndarray
    rank_backward_end: np.ndarray
    rank_comm_end: np.ndarray
    rank_busy: np.ndarray
    rank_stall: np.ndarray
    last_rank: np.ndarray
    launch_spread: np.ndarray
    comm_time: np.ndarray
    coll_issue: Optional[np.ndarray]
    coll_start: Optional[np.ndarray]
    coll_finish: Optional[np.ndarray]


# event kinds on the heap, in the order ties are taken (any order gives the same times)
_JOIN, _ISSUE = 0, 1


class ConcurrentStreams:
    """Plain DDP with ``scenario.ddp.comm_streams`` collective streams per rank (module
    docstring), step by step, event by event. `kernels`: one per bucket (the engine's plan),
    `fabric`: the one they were planned on."""

    def __init__(self, scenario: Scenario, perturb: Perturbations, kernels: Sequence[Kernel], fabric: Fabric,
                 buckets: np.ndarray, ready_fraction: np.ndarray, kept: np.ndarray, collectives: bool = False,
                 log: Optional[list] = None, on_step: Optional[Callable[[int, int], None]] = None):
        sc = scenario
        if sc.ddp.sharding != "none":
            raise ValueError(f"comm_streams > 1 is modeled for ddp.sharding none, got {sc.ddp.sharding}")
        if perturb.clocks:
            raise ValueError("comm_streams > 1 does not model thermal clocks (throttle stragglers)")
        self.sc, self.perturb, self.kept = sc, perturb, np.asarray(kept, dtype=np.int64)
        self.collectives, self.log, self.on_step = collectives, log, on_step
        self.n, self.k, self.capacity = sc.world_size, sc.ddp.comm_streams, sc.ddp.comm_capacity
        self.buckets = np.asarray(buckets, dtype=float)
        nb = len(self.buckets)
        parts = {}
        self.fixed, self.work = np.zeros(nb), np.zeros(nb)
        for j, kernel in enumerate(kernels):
            if id(kernel) not in parts:
                parts[id(kernel)] = fixed_and_bandwidth(kernel, fabric, sc.collective.algorithm, sc.collective.model)
            self.fixed[j], self.work[j] = parts[id(kernel)]
        if sc.ddp.comm_shared == "all":  # the whole collective is shared work: no part of it runs free
            self.fixed, self.work = np.zeros(nb), self.fixed + self.work
        fractions = np.asarray(ready_fraction, dtype=float) if sc.ddp.overlap else np.ones(nb)
        self.share = np.diff(fractions, prepend=0.0)
        self.remainder = 1.0 - (float(fractions[-1]) if nb else 0.0)
        costs = sc.ddp.costs
        on = charges(costs, self.n)
        self.copy_in = [bucket_copy_in_time(float(b), costs) if on else 0.0 for b in self.buckets]
        self.copy_back = copy_back_time(float(self.buckets.sum()), costs) if on else 0.0
        self.overhead = costs.bucket_overhead if on else 0.0
        self.slowdown = costs.overlap_slowdown if on else 0.0

    def run(self) -> StreamsRecords:
        sc, n = self.sc, self.n
        steps, nb, kept = sc.steps, len(self.buckets), len(self.kept)
        shape = (steps, nb, kept) if self.collectives else (0, nb, kept)
        rec = StreamsRecords(np.zeros(steps), *(np.zeros((steps, kept)) for _ in range(5)),
                             np.zeros((steps, nb), dtype=np.int64), np.zeros((steps, nb)), np.zeros(nb),
                             *(np.zeros(shape) if self.collectives else None for _ in range(3)))
        c, m = sc.compute, sc.ddp.gradient_accumulation
        work_before = m * c.forward + (m - 1) * c.backward
        start = np.zeros(n)
        for s in range(steps):
            f = self.perturb.factor_at(s)
            stall = self.perturb.stall_at(s)
            t0 = start + stall
            backward_start = t0 + f * work_before  # nothing in flight before the last backward
            issue, launch, finish, compute_end, backward_end = self._backward(backward_start, f * c.backward)
            reduced = finish.max(axis=0) if nb else compute_end
            reduced_on = np.full(n, reduced) if nb else compute_end
            optimizer_start = np.maximum(reduced_on, compute_end) + self.copy_back
            end = optimizer_start + f * c.optimizer
            busy = (backward_start - t0) + f * c.backward + (end - optimizer_start) + stall
            keep = self.kept
            rec.step_end[s] = end.max()
            rec.rank_end[s], rec.rank_backward_end[s] = end[keep], backward_end[keep]
            rec.rank_comm_end[s], rec.rank_busy[s], rec.rank_stall[s] = reduced_on[keep], busy[keep], stall[keep]
            if nb:
                rec.last_rank[s] = issue.argmax(axis=1)
                rec.launch_spread[s] = issue.max(axis=1) - issue.min(axis=1)
                rec.comm_time[:] = finish[:, 0] - launch.max(axis=1)  # from the start: the last launch
            if self.collectives:
                rec.coll_issue[s], rec.coll_start[s], rec.coll_finish[s] = issue[:, keep], launch[:, keep], finish[:, keep]
            if self.log is not None:
                done = sorted((float(finish[j, 0]), j) for j in range(nb))
                self.log.extend((t, s, f"all_reduce {j}") for t, j in done)
                self.log.append((float(end.max()), s, "end"))
            if self.on_step is not None:
                self.on_step(s + 1, steps)
            start = end
        return rec

    def _backward(self, start: np.ndarray, backward: np.ndarray):
        """One step's last backward and its bucket all-reduces on every rank, event by event.
        Returns (buckets, n) issue, launch and finish times and per rank the compute stream's
        end (backward and its copies) and the backward compute's end.

        Each rank's next compute event (its segment's or copy's end) sits on a heap of its own,
        keyed (time, rank), and is re-planned only where that rank's state changes: the rank
        whose compute event it is (its entry replaced at the top), the rank an issue launches on
        (a new entry; the old one, stale, is dropped when it surfaces) and, at a collective's end,
        every rank (the heap rebuilt). The event heap holds each rank's next issue only (its later
        ones, later in time and sequence, wait in order), so it stays O(ranks) deep. O(log ranks) an event, not a scan of every rank, so a step
        is O(buckets x ranks x log ranks). The events, their order (ties: the pool, then the event
        heap, then the lowest rank) and every subtraction are those of the scan
        (tests/unit/sim/streams_scan.py), so the times are the same bit for bit."""
        n, nb, k = self.n, len(self.buckets), self.k
        issue = np.zeros((nb, n))
        launch = np.full((nb, n), np.nan)
        finish = np.full((nb, n), np.nan)
        slow = 1.0 + self.slowdown
        slowed = 1.0 / slow
        capacity = self.capacity
        share_of = self.share.tolist() + [self.remainder]  # bucket j's share; nb: the remainder
        copy_in, fixed, work, overhead = list(self.copy_in), self.fixed.tolist(), self.work.tolist(), self.overhead
        backward = [float(b) for b in backward]
        inf = float("inf")
        heappush, heappop, heapreplace = heapq.heappush, heapq.heappop, heapq.heapreplace
        # compute side, per rank: the bucket it works towards (nb: the remainder), whether it is
        # copying, the full-rate work left of the segment (as of `mark`) or the copy's end
        bucket = [0] * n
        copying = [False] * n
        left = [0.0] * n
        mark = [float(t) for t in start]
        done_at = [np.nan] * n  # compute stream's end
        done = [False] * n
        backward_end = [float(t) for t in start]
        last_issue = [-inf] * n
        in_flight = [0] * n
        queue = [deque() for _ in range(n)]
        joined = [0] * nb
        heap: List[Tuple[float, int, int, int, int]] = []  # (time, kind, seq, rank, bucket)
        seq = 0
        # a rank's issues come in order (time and seq both grow), so only its next one need be on
        # the heap, the rest wait here: the heap's first entry is the same, and it stays O(ranks)
        # deep where a bucket_overhead above a bucket's compute queued every rank's issues there
        # (30,000 buckets: a million entries, 4 us a pop)
        later = [deque() for _ in range(n)]
        on_heap = [False] * n
        pool: dict = {}  # bucket -> bandwidth part left
        pool_mark = 0.0
        finished = 0
        ranks_done = 0
        # the compute events: (time, rank, version), the rank's entry valid while its version is
        ranks: List[Tuple[float, int, int]] = []
        version = [0] * n

        def planned(r):
            # the scan's next_compute: r's copy end, or its segment's end at its rate now
            return mark[r] if copying[r] else mark[r] + left[r] / (slowed if in_flight[r] else 1.0)

        def replan_all():
            # every rank's state may have changed (a collective's end): a fresh heap, no stale entries
            ranks[:] = [(planned(r), r, version[r]) for r in range(n) if not done[r]]
            heapq.heapify(ranks)

        def set_in_flight(r, t, delta):
            # re-plan r's compute at a change of its rate: the work done so far at the old rate
            if not copying[r] and not done[r]:
                left[r] = max(left[r] - (t - mark[r]) * (slowed if in_flight[r] else 1.0), 0.0)
                mark[r] = t
            in_flight[r] += delta

        def finish_compute(r, t):
            nonlocal ranks_done
            done_at[r] = t
            done[r] = True
            ranks_done += 1

        def begin_segment(r, t):
            # r is at bucket[r]'s cut (or the remainder): start its compute, or pass through zero work
            while True:
                j = bucket[r]
                share = share_of[j]
                if share > 0:
                    left[r], mark[r], copying[r] = backward[r] * share, t, False
                    return
                if j >= nb:
                    finish_compute(r, t)
                    return
                segment_done(r, t)
                if copying[r]:
                    return

        def segment_done(r, t):
            # bucket[r]'s compute is done at t: copy it in, or issue it
            j = bucket[r]
            if j >= nb:
                finish_compute(r, t)
                return
            if copy_in[j] > 0:
                copying[r], mark[r] = True, t + copy_in[j]
                return
            issued(r, t)

        def issued(r, t):
            # bucket[r] is copied at t: the host issues it (after its previous issue), r moves on
            nonlocal seq
            j = bucket[r]
            last_issue[r] = at = max(t, last_issue[r]) + overhead
            issue[j, r] = at
            if on_heap[r]:
                later[r].append((at, _ISSUE, seq, r, j))
            else:
                heappush(heap, (at, _ISSUE, seq, r, j))
                on_heap[r] = True
            seq += 1
            copying[r] = False
            bucket[r] = j + 1

        def try_launch(r, t):
            # True where r launched one (its rate, so its compute event, may have changed)
            nonlocal seq
            q = queue[r]
            launched = False
            while q and in_flight[r] < k:
                j = q.popleft()
                launch[j, r] = t
                set_in_flight(r, t, +1)
                launched = True
                joined[j] += 1
                if joined[j] == n:  # the last launch: the collective starts
                    heappush(heap, (t + fixed[j], _JOIN, seq, -1, j))
                    seq += 1
            return launched

        def collective_done(j, t):
            # the caller re-plans every rank (replan_all)
            nonlocal finished
            finish[j] = t
            finished += 1
            for r in range(n):
                set_in_flight(r, t, -1)
                try_launch(r, t)

        for r in range(n):
            begin_segment(r, mark[r])
        replan_all()
        while finished < nb or ranks_done < n:
            while ranks and ranks[0][2] != version[ranks[0][1]]:
                heappop(ranks)
            t_rank = ranks[0][0] if ranks else inf
            t_heap = heap[0][0] if heap else inf
            # the first bandwidth part done (shared_next, in plain floats: the same min and division)
            t_pool = pool_mark + (min(pool.values()) / (min(1.0, capacity / len(pool))) if pool else inf)
            t = min(t_rank, t_heap, t_pool)
            if t == inf:
                raise RuntimeError("concurrent streams: no event left before the step is done")
            # the bandwidth parts progress to t
            if t_pool <= t:
                low = min(pool.values())
                ended = []
                for j in list(pool):
                    pool[j] -= low
                    if pool[j] <= _DONE_ULPS * max(abs(t), 1.0):
                        del pool[j]
                        ended.append(j)
                pool_mark = t
                for j in ended:
                    collective_done(j, t)
                replan_all()
                continue
            if pool:
                step = (t - pool_mark) * min(1.0, capacity / len(pool))
                for j in pool:
                    pool[j] -= step
            pool_mark = t
            if t_heap <= t:
                _, kind, _, r, j = heappop(heap)
                if kind == _JOIN:
                    if work[j] > 0:
                        pool[j] = work[j]
                    else:
                        collective_done(j, t)
                        replan_all()
                else:
                    if later[r]:  # r's next issue takes its place
                        heappush(heap, later[r].popleft())
                    else:
                        on_heap[r] = False
                    queue[r].append(j)
                    if try_launch(r, t) and not done[r]:
                        version[r] += 1
                        heappush(ranks, (planned(r), r, version[r]))
                continue
            r = ranks[0][1]
            if copying[r]:
                issued(r, t)
                begin_segment(r, t)
            else:
                backward_end[r] = t
                segment_done(r, t)
                if not copying[r] and not done[r]:
                    begin_segment(r, t)
            # only r changed: its entry, at the top, replaced
            if done[r]:
                heappop(ranks)
            else:
                heapreplace(ranks, (planned(r), r, version[r]))
        return issue, launch, finish, np.asarray(done_at), np.asarray(backward_end)
