"""The concurrent-streams event loop as it was before its compute events went onto a heap: every
event scans every rank's next compute event (and every rank's done flag), O(events x ranks) =
O(buckets x ranks^2) a step. Kept as the reference the fast loop in
:mod:`commsim.sim.concurrent_streams` must equal (tests/unit/sim/test_concurrent_streams_fast.py)
and that benchmarks/streams_speed.py times it against; only ``_backward``, where the scan is,
differs: the rest of the run is the class it derives from."""

from __future__ import annotations

import heapq
from collections import deque
from typing import List, Tuple

import numpy as np

from commsim.sim.concurrent_streams import _DONE_ULPS, _ISSUE, _JOIN, ConcurrentStreams, shared_next, shared_rate


class ScanStreams(ConcurrentStreams):
    """:class:`ConcurrentStreams` with the old, scanning ``_backward`` (module docstring)."""

    def _backward(self, start: np.ndarray, backward: np.ndarray):
        """One step's last backward and its bucket all-reduces on every rank, event by event.
        Returns (buckets, n) issue, launch and finish times and per rank the compute stream's
        end (backward and its copies) and the backward compute's end."""
        n, nb, k = self.n, len(self.buckets), self.k
        issue = np.zeros((nb, n))
        launch = np.full((nb, n), np.nan)
        finish = np.full((nb, n), np.nan)
        slow = 1.0 + self.slowdown
        # compute side, per rank: the bucket it works towards (nb: the remainder), whether it is
        # copying, the full-rate work left of the segment (as of `mark`) or the copy's end
        bucket = [0] * n
        copying = [False] * n
        left = [0.0] * n
        mark = [float(t) for t in start]
        done_at = [np.nan] * n  # compute stream's end
        backward_end = [float(t) for t in start]
        last_issue = [-np.inf] * n
        in_flight = [0] * n
        queue = [deque() for _ in range(n)]
        joined = [0] * nb
        heap: List[Tuple[float, int, int, int, int]] = []  # (time, kind, seq, rank, bucket)
        seq = 0
        pool: dict = {}  # bucket -> bandwidth part left
        pool_mark = 0.0
        finished = 0

        def rate(r):
            return 1.0 / slow if in_flight[r] else 1.0

        def set_in_flight(r, t, delta):
            # re-plan r's compute at a change of its rate: the work done so far at the old rate
            if not copying[r] and np.isnan(done_at[r]):
                left[r] = max(left[r] - (t - mark[r]) * rate(r), 0.0)
                mark[r] = t
            in_flight[r] += delta

        def begin_segment(r, t):
            # r is at bucket[r]'s cut (or the remainder): start its compute, or pass through zero work
            while True:
                j = bucket[r]
                share = self.share[j] if j < nb else self.remainder
                if share > 0:
                    left[r], mark[r], copying[r] = float(backward[r] * share), t, False
                    return
                if j >= nb:
                    done_at[r] = t
                    return
                segment_done(r, t)
                if copying[r]:
                    return

        def segment_done(r, t):
            # bucket[r]'s compute is done at t: copy it in, or issue it
            j = bucket[r]
            if j >= nb:
                done_at[r] = t
                return
            if self.copy_in[j] > 0:
                copying[r], mark[r] = True, t + self.copy_in[j]
                return
            issued(r, t)

        def issued(r, t):
            # bucket[r] is copied at t: the host issues it (after its previous issue), r moves on
            nonlocal seq
            j = bucket[r]
            last_issue[r] = max(t, last_issue[r]) + self.overhead
            issue[j, r] = last_issue[r]
            heapq.heappush(heap, (last_issue[r], _ISSUE, seq, r, j))
            seq += 1
            copying[r] = False
            bucket[r] = j + 1

        def next_compute(r):
            if not np.isnan(done_at[r]):
                return np.inf
            if copying[r]:
                return mark[r]
            return mark[r] + left[r] / rate(r)

        def try_launch(r, t):
            nonlocal seq
            while queue[r] and in_flight[r] < k:
                j = queue[r].popleft()
                launch[j, r] = t
                set_in_flight(r, t, +1)
                joined[j] += 1
                if joined[j] == n:  # the last launch: the collective starts
                    heapq.heappush(heap, (t + self.fixed[j], _JOIN, seq, -1, j))
                    seq += 1

        def collective_done(j, t):
            nonlocal finished
            finish[j] = t
            finished += 1
            for r in range(n):
                set_in_flight(r, t, -1)
                try_launch(r, t)

        for r in range(n):
            begin_segment(r, mark[r])
        while finished < nb or any(np.isnan(d) for d in done_at):
            t_compute = [next_compute(r) for r in range(n)]
            r_min = int(np.argmin(t_compute))
            t_rank = t_compute[r_min]
            t_heap = heap[0][0] if heap else np.inf
            rem = np.fromiter(pool.values(), float, len(pool))
            t_pool = pool_mark + shared_next(rem, self.capacity)
            t = min(t_rank, t_heap, t_pool)
            if t == np.inf:
                raise RuntimeError("concurrent streams: no event left before the step is done")
            # the bandwidth parts progress to t
            if t_pool <= t:
                low = float(rem.min())
                ended = []
                for j in list(pool):
                    pool[j] -= low
                    if pool[j] <= _DONE_ULPS * max(abs(t), 1.0):
                        del pool[j]
                        ended.append(j)
                pool_mark = t
                for j in ended:
                    collective_done(j, t)
                continue
            if pool:
                step = (t - pool_mark) * shared_rate(len(pool), self.capacity)
                for j in pool:
                    pool[j] -= step
            pool_mark = t
            if t_heap <= t:
                _, kind, _, r, j = heapq.heappop(heap)
                if kind == _JOIN:
                    if self.work[j] > 0:
                        pool[j] = float(self.work[j])
                    else:
                        collective_done(j, t)
                else:
                    queue[r].append(j)
                    try_launch(r, t)
                continue
            r = r_min
            if copying[r]:
                issued(r, t)
            else:
                backward_end[r] = t
                segment_done(r, t)
                if not copying[r] and np.isnan(done_at[r]):
                    begin_segment(r, t)
                continue
            begin_segment(r, t)
        return issue, launch, finish, np.asarray(done_at), np.asarray(backward_end)
