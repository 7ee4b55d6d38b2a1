"""The slow, obvious reference model: one SimPy process per rank and one event per ring chunk.

It implements the same semantics as :mod:`commsim.engine` the direct way: every rank is a
process that stalls, computes, and marks each gradient bucket ready; a communication process
per rank runs the buckets in order, and each of the 2(n-1) ring steps of a bucket waits for
the rank's own previous step and its predecessor's previous step, then takes the hop's
time (DESIGN.md's recurrence f[i,k] = max(f[i,k-1], f[i-1,k-1]) + t_i, event by event).
That is O(n^2) events per all-reduce: fine for checking the fast engine on small cases,
hopeless at scale (benchmarks/ measures how hopeless).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import simpy

from .costs import ddp_buckets, ring_hop_links
from .ring import hop_times, ring_steps
from .spec import Scenario
from .stragglers import Perturbations, link_bandwidth_factors, perturbations


def reference_ring_finish(launch: np.ndarray, hop_time: np.ndarray) -> np.ndarray:
    """Finish times of one ring all-reduce, chunk step by chunk step, as SimPy events."""
    env = simpy.Environment()
    n = len(launch)
    K = ring_steps(n)
    done = [[env.event() for _ in range(K + 1)] for _ in range(n)]
    finish = np.zeros(n)

    def rank(i):
        yield env.timeout(launch[i])
        done[i][0].succeed()
        for k in range(1, K + 1):
            yield done[i][k - 1] & done[i - 1][k - 1]
            yield env.timeout(hop_time[i])
            done[i][k].succeed()
        finish[i] = env.now

    for i in range(n):
        env.process(rank(i))
    env.run()
    return finish


class ReferenceModel:
    """Per-rank, per-chunk SimPy model of a whole scenario. Returns per-step rank end times."""

    def __init__(self, scenario: Scenario, perturb: Optional[Perturbations] = None):
        self.sc = scenario
        self.n = scenario.world_size
        self.perturb = perturb if perturb is not None else perturbations(scenario)
        self.buckets = ddp_buckets(scenario.model.grad_bytes, scenario.ddp.first_bucket, scenario.ddp.bucket_cap)
        alpha, bandwidth = ring_hop_links(scenario.cluster, link_bandwidth_factors(scenario))
        self.hop = [hop_times(size, alpha, bandwidth) for size in self.buckets]
        self.env = simpy.Environment()
        self.rank_end = np.zeros((scenario.steps, self.n))

    def _event(self, table, key):
        if key not in table:
            table[key] = self.env.event()
        return table[key]

    def _work(self, rank: int, work: float):
        """Time to do `work` full-clock seconds starting now on `rank` (its thermal clock, if any)."""
        clock = self.perturb.clocks.get(rank)
        now = self.env.now
        return max(float(clock.finish(now, work)) - now, 0.0) if clock else work

    def _compute(self, r: int):
        sc, env = self.sc, self.env
        c, m = sc.compute, sc.ddp.gradient_accumulation
        for s in range(sc.steps):
            f = self.perturb.factor[s, r]
            yield env.timeout(self.perturb.stall[s, r])
            for _ in range(m - 1):  # no_sync micro-batches: compute only
                yield env.timeout(self._work(r, f * c.forward))
                yield env.timeout(self._work(r, f * c.backward))
            yield env.timeout(self._work(r, f * c.forward))
            # the last backward, cut at each bucket's ready point
            done_frac = 0.0
            for j, size in enumerate(self.buckets):
                frac = (self.buckets[: j + 1].sum() / self.buckets.sum()) if sc.ddp.overlap else 1.0
                if frac > done_frac:
                    yield env.timeout(self._work(r, f * c.backward * (frac - done_frac)))
                    done_frac = frac
                self._event(self.ready, (r, s, j)).succeed()
            if done_frac < 1.0:
                yield env.timeout(self._work(r, f * c.backward * (1.0 - done_frac)))
            if len(self.buckets) and self.n > 1:
                yield self._event(self.chunk, (r, s, len(self.buckets) - 1, ring_steps(self.n)))
            yield env.timeout(self._work(r, f * c.optimizer))
            self.rank_end[s, r] = env.now

    def _communicate(self, r: int):
        K = ring_steps(self.n)
        for s in range(self.sc.steps):
            for j in range(len(self.buckets)):
                yield self._event(self.ready, (r, s, j))  # previous bucket: done, we are sequential
                self._event(self.chunk, (r, s, j, 0)).succeed()
                for k in range(1, K + 1):
                    prev = (r - 1) % self.n
                    yield self._event(self.chunk, (r, s, j, k - 1)) & self._event(self.chunk, (prev, s, j, k - 1))
                    yield self.env.timeout(self.hop[j][r])
                    self._event(self.chunk, (r, s, j, k)).succeed()

    def run(self) -> np.ndarray:
        """Simulate; returns (steps, n) per-rank step end times."""
        self.ready, self.chunk = {}, {}
        for r in range(self.n):
            self.env.process(self._compute(r))
            if self.n > 1:
                self.env.process(self._communicate(r))
        self.env.run()
        return self.rank_end
