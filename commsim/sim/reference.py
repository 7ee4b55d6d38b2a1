"""The slow, obvious reference model: one SimPy process per rank and one event per ring chunk.

It implements the same semantics as :mod:`commsim.sim.engine` the direct way: every rank is a
process that stalls, computes, and marks each gradient bucket ready; a communication process
per rank runs the buckets in order, and each of the 2(n-1) ring steps of a bucket waits for
the rank's own previous step and its predecessor's previous step, then takes the hop's
time (the ring's max-plus recurrence f[i,k] = max(f[i,k-1], f[i-1,k-1]) + t_i, event by event).
That is O(n^2) events per all-reduce: fine for checking the fast engine on small cases,
hopeless at scale (benchmarks/ measures how hopeless). It models the ring only (the engine's
other algorithms are checked kernel by kernel against :mod:`commsim.collectives.reference`);
its hop times come from the same fabric as the engine's.

With ``ddp.sharding`` (zero2, fsdp: :mod:`commsim.sim.sharding`) the communication process runs
the step's collectives in :func:`commsim.sim.sharding.stream_order`, each a ring of 2(n-1)
(all-reduce) or n-1 (reduce-scatter, all-gather) chunk steps, every one waiting for the event
its compute process signals when the rank issues it; FSDP's compute process waits for each
unit's all-gather before computing that unit, and signals the next unit's gather as it starts.

DDP's own costs (``ddp`` costs, :mod:`commsim.sim.ddp_costs`; plain DDP) the direct way too: the
compute process copies each bucket in (a timeout) after the backward segment that completes it,
issues the bucket's all-reduce ``bucket_overhead`` after the copy and after its previous issue,
and copies the buckets back before the optimizer; every compute runs at ``1 / (1 + slowdown)`` of
its rate while the rank's communication process is inside a collective: the compute process
re-plans its finish whenever that process starts or ends one (an event), integrating the thermal
clock piece by piece. Nothing here shares the engine's interval algebra.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import simpy

from commsim.collectives import ring
from commsim.scenario.spec import Scenario
from commsim.sim.ddp_costs import bucket_copy_in_time, charges, copy_back_time
from commsim.sim.links import scenario_fabric
from commsim.sim.sharding import collective_steps, optimizer_time, stream_order, unit_shares
from commsim.sim.stragglers import Perturbations, perturbations


class ReferenceModel:
    """Per-rank, per-chunk SimPy model of a whole scenario. Returns per-step rank end times."""

    def __init__(self, scenario: Scenario, perturb: Optional[Perturbations] = None):
        self.sc = scenario
        self.n = scenario.world_size
        self.perturb = perturb if perturb is not None else perturbations(scenario)
        self.buckets = np.asarray(scenario.gradient_buckets(), dtype=float)
        # an explicit layout's ready points; else each bucket's share of the bytes, summed here
        self.ready_points = scenario.ddp.bucket_ready
        fabric = scenario_fabric(scenario)  # the engine's fabric: its ring hops, slow links included
        self.hop = [ring.hop_times(fabric.at_size(size), size) for size in self.buckets]
        self.sharding = scenario.ddp.sharding
        self.ops = stream_order(self.sharding, len(self.buckets), scenario.ddp.overlap)
        self.op_index = {(op.kind, op.bucket, op.phase): o for o, op in enumerate(self.ops)}
        self.env = simpy.Environment()
        self.rank_end = np.zeros((scenario.steps, self.n))
        self.charged = charges(scenario.ddp.costs, self.n)
        self.last_issue = [-np.inf] * self.n  # when each rank's host last issued a collective
        self.busy = [False] * self.n  # rank's communication process is inside a collective
        self.changed = [self.env.event() for _ in range(self.n)]  # succeeds when busy[r] flips


    def _ready(self, j: int) -> float:
        """Share of the last backward done when bucket j's gradients all are."""
        if self.ready_points is not None:
            return float(self.ready_points[j])
        return float(self.buckets[: j + 1].sum() / self.buckets.sum())
    def _set_busy(self, r: int, busy: bool) -> None:
        self.busy[r] = busy
        event, self.changed[r] = self.changed[r], self.env.event()
        event.succeed()

    def _slowed(self, r: int, work: float):
        """Compute `work` full-clock seconds on rank r from now (a generator), at
        ``1 / (1 + overlap_slowdown)`` of the rate while r's communication process is busy."""
        env, slowdown = self.env, self.sc.ddp.costs.overlap_slowdown
        clock = self.perturb.clocks.get(r)
        left = work
        while left > 1e-15 * max(1.0, work):
            rate = 1.0 / (1.0 + slowdown) if self.busy[r] else 1.0
            now = env.now
            end = float(clock.finish(now, left / rate)) if clock else now + left / rate
            timer, change = env.timeout(max(end - now, 0.0)), self.changed[r]
            yield timer | change
            if timer.processed:
                return
            elapsed = float(clock.work_done(env.now) - clock.work_done(now)) if clock else env.now - now
            left -= rate * elapsed

    def _later(self, delay: float, event) -> None:
        """Succeed `event` `delay` seconds from now, without blocking the caller."""
        self.env.timeout(delay).callbacks.append(lambda _: event.succeed())

    def _event(self, table, key):
        if key not in table:
            table[key] = self.env.event()
        return table[key]

    def _work(self, rank: int, work: float):
        """Time to do `work` full-clock seconds starting now on `rank` (its thermal clock, if any)."""
        clock = self.perturb.clocks.get(rank)
        now = self.env.now
        return max(float(clock.finish(now, work)) - now, 0.0) if clock else work

    def _issue(self, r: int, s: int, kind: str, bucket: int, phase: str = "backward") -> None:
        """Rank r issues one of step s's collectives: its communication process may start it
        (with DDP's costs: ``bucket_overhead`` after now and after r's previous issue)."""
        event = self._event(self.ready, (r, s, self.op_index[(kind, bucket, phase)]))
        if not self.charged:
            event.succeed()
            return
        self.last_issue[r] = max(self.env.now, self.last_issue[r]) + self.sc.ddp.costs.bucket_overhead
        self._later(self.last_issue[r] - self.env.now, event)

    def _run(self, r: int, work: float):
        """Compute `work` full-clock seconds on rank r (a generator): slowed while its collectives
        run when DDP's costs are charged."""
        if self.charged:
            yield from self._slowed(r, work)
        else:
            yield self.env.timeout(self._work(r, work))

    def _done(self, r: int, s: int, o: int):
        """The event: rank r finished the last chunk step of step s's collective number o."""
        return self._event(self.chunk, (r, s, o, collective_steps(self.ops[o].kind, self.n)))

    def _compute(self, r: int):
        if self.charged:
            yield from self._compute_charged(r)
            return
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
                frac = self._ready(j) if sc.ddp.overlap else 1.0
                if frac > done_frac:
                    yield env.timeout(self._work(r, f * c.backward * (frac - done_frac)))
                    done_frac = frac
                self._event(self.ready, (r, s, j)).succeed()
            if done_frac < 1.0:
                yield env.timeout(self._work(r, f * c.backward * (1.0 - done_frac)))
            if len(self.buckets) and self.n > 1:
                yield self._event(self.chunk, (r, s, len(self.buckets) - 1, collective_steps("all_reduce", self.n)))
            yield env.timeout(self._work(r, f * c.optimizer))
            self.rank_end[s, r] = env.now

    def _compute_charged(self, r: int):
        """Plain DDP with DDP's own costs (module docstring)."""
        sc, env = self.sc, self.env
        c, m, costs = sc.compute, sc.ddp.gradient_accumulation, sc.ddp.costs
        nb = len(self.buckets)
        for s in range(sc.steps):
            f = self.perturb.factor[s, r]
            yield env.timeout(self.perturb.stall[s, r])
            for _ in range(m - 1):
                yield from self._slowed(r, f * c.forward)
                yield from self._slowed(r, f * c.backward)
            yield from self._slowed(r, f * c.forward)
            done_frac, last_issue = 0.0, -np.inf
            for j, size in enumerate(self.buckets):
                frac = self._ready(j) if sc.ddp.overlap else 1.0
                if frac > done_frac:
                    yield from self._slowed(r, f * c.backward * (frac - done_frac))
                    done_frac = frac
                yield env.timeout(bucket_copy_in_time(float(size), costs))
                last_issue = max(env.now, last_issue) + costs.bucket_overhead
                self._later(last_issue - env.now, self._event(self.ready, (r, s, j)))
            if done_frac < 1.0:
                yield from self._slowed(r, f * c.backward * (1.0 - done_frac))
            if nb:
                yield self._event(self.chunk, (r, s, nb - 1, collective_steps("all_reduce", self.n)))
            yield env.timeout(copy_back_time(float(self.buckets.sum()), costs))
            yield from self._slowed(r, f * c.optimizer)
            self.rank_end[s, r] = env.now

    def _compute_zero2(self, r: int):
        """ZeRO-2: backward as in DDP (reduce-scatters issued at the ready points), the 1/n
        optimizer after the last one, then every all-gather; the step ends when they are done.
        With DDP's costs: each bucket copied in before its reduce-scatter is issued, no copy back."""
        sc, env = self.sc, self.env
        c, nb = sc.compute, len(self.buckets)
        for s in range(sc.steps):
            f = self.perturb.factor[s, r]
            yield env.timeout(self.perturb.stall[s, r])
            yield from self._run(r, f * c.forward)
            done_frac = 0.0
            for j in range(nb):
                frac = self._ready(j) if sc.ddp.overlap else 1.0
                if frac > done_frac:
                    yield from self._run(r, f * c.backward * (frac - done_frac))
                    done_frac = frac
                if self.charged:
                    yield env.timeout(bucket_copy_in_time(float(self.buckets[j]), sc.ddp.costs))
                self._issue(r, s, "reduce_scatter", j)
            if done_frac < 1.0:
                yield from self._run(r, f * c.backward * (1.0 - done_frac))
            yield self._done(r, s, nb - 1)  # the last reduce-scatter
            yield from self._run(r, f * optimizer_time(c.optimizer, "zero2", self.n))
            for op in self.ops:  # in stream order (forward order): with a host cost, issued one after another
                if op.kind == "all_gather":
                    self._issue(r, s, op.kind, op.bucket, op.phase)
            yield self._done(r, s, len(self.ops) - 1)
            self.rank_end[s, r] = env.now

    def _compute_fsdp(self, r: int):
        """FSDP: each unit's forward, then each unit's backward, after its all-gather (with DDP's
        costs: every collective issued later by the host cost, no gradient copies)."""
        sc, env = self.sc, self.env
        c, nb = sc.compute, len(self.buckets)
        share = unit_shares(self.buckets)
        segments = [("forward", u, c.forward * share[u]) for u in reversed(range(nb))]
        segments += [("backward", u, c.backward * share[u]) for u in range(nb)]
        for s in range(sc.steps):
            f = self.perturb.factor[s, r]
            yield env.timeout(self.perturb.stall[s, r])
            if segments:
                self._issue(r, s, "all_gather", segments[0][1], segments[0][0])
            for x, (phase, unit, work) in enumerate(segments):
                yield self._done(r, s, self.op_index[("all_gather", unit, phase)])
                if x + 1 < len(segments):  # prefetch the next unit's parameters
                    self._issue(r, s, "all_gather", segments[x + 1][1], segments[x + 1][0])
                yield from self._run(r, f * work)
                if phase == "backward" and sc.ddp.overlap:
                    self._issue(r, s, "reduce_scatter", unit)
            if not sc.ddp.overlap:
                for u in range(nb):
                    self._issue(r, s, "reduce_scatter", u)
            if self.ops:
                yield self._done(r, s, len(self.ops) - 1)
            yield from self._run(r, f * optimizer_time(c.optimizer, "fsdp", self.n))
            self.rank_end[s, r] = env.now

    def _communicate(self, r: int):
        for s in range(self.sc.steps):
            for o, op in enumerate(self.ops):
                yield self._event(self.ready, (r, s, o))  # previous collective: done, we are sequential
                self._event(self.chunk, (r, s, o, 0)).succeed()
                if self.charged:
                    self._set_busy(r, True)
                hop = self.hop[op.bucket]
                for k in range(1, collective_steps(op.kind, self.n) + 1):
                    prev = (r - 1) % self.n
                    yield self._event(self.chunk, (r, s, o, k - 1)) & self._event(self.chunk, (prev, s, o, k - 1))
                    yield self.env.timeout(hop[r])
                    self._event(self.chunk, (r, s, o, k)).succeed()
                if self.charged:
                    self._set_busy(r, False)

    def run(self) -> np.ndarray:
        """Simulate; returns (steps, n) per-rank step end times."""
        self.ready, self.chunk = {}, {}
        compute = {"none": self._compute, "zero2": self._compute_zero2, "fsdp": self._compute_fsdp}[self.sharding]
        for r in range(self.n):
            self.env.process(compute(r))
            if self.n > 1 or self.sharding != "none":  # one rank: sharded collectives are instant
                self.env.process(self._communicate(r))
        self.env.run()
        return self.rank_end
