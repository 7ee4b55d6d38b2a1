"""The engine's k-stream path against a slow, obvious SimPy model of the same semantics, on
random small cases.

The reference is gloo's structure, written the direct way: per rank a compute process (stall,
forward, backward cut at the ready points, each bucket copied in, its all-reduce put into the
rank's FIFO queue ``bucket_overhead`` after the copy and after the previous one, the copy back,
the optimizer), k worker processes per rank that take the next queued all-reduce when free and
hold it until it is done (ProcessGroupGloo's worker threads), per collective a process that
waits for every rank's worker, spends the fixed part, then hands the bandwidth part to one
link process that shares itself equally among the m parts it holds (each at min(1, c/m) of its
rate alone, c the capacity), re-planned at every arrival.
Compute runs 1 / (1 + slowdown) slower while any worker of its rank holds a collective,
re-planned whenever that changes. Nothing here shares the engine's event loop."""

import dataclasses

import numpy as np
import pytest
import simpy

from commsim.collectives.kernels import make_kernel
from commsim.scenario.spec import DDPCosts, Jitter, SlowRank, Stall
from commsim.sim.concurrent_streams import fixed_and_bandwidth
from commsim.sim.ddp_costs import bucket_copy_in_time, charges, copy_back_time
from commsim.sim.engine import simulate
from commsim.sim.links import scenario_fabric
from commsim.sim.stragglers import perturbations
from tests.conftest import NO_DDP_COSTS, make_scenario


class Reference:
    def __init__(self, sc):
        self.sc, self.n, self.k = sc, sc.world_size, sc.ddp.comm_streams
        self.p = perturbations(sc)
        self.buckets = [float(b) for b in sc.gradient_buckets()]
        self.ready = [float(x) for x in sc.bucket_ready_points()] if sc.ddp.overlap else [1.0] * len(self.buckets)
        fabric = scenario_fabric(sc)
        self.parts = [fixed_and_bandwidth(make_kernel(sc.collective.algorithm, fabric, b), fabric,
                                          sc.collective.algorithm, "alpha-beta") for b in self.buckets]
        if sc.ddp.comm_shared == "all":  # nothing runs free: the whole time is shared
            self.parts = [(0.0, f + w) for f, w in self.parts]
        self.costs = sc.ddp.costs if charges(sc.ddp.costs, self.n) else NO_DDP_COSTS
        self.env = simpy.Environment()
        self.holding = [0] * self.n
        self.changed = [self.env.event() for _ in range(self.n)]
        self.queues = [simpy.Store(self.env) for _ in range(self.n)]
        self.joined, self.done = {}, {}
        self.link = {}  # (step, bucket) -> bandwidth part left
        self.arrival = self.env.event()
        self.rank_end = np.zeros((sc.steps, self.n))

    def _event(self, table, key):
        return table.setdefault(key, self.env.event())

    def _hold(self, r, delta):
        self.holding[r] += delta
        ev, self.changed[r] = self.changed[r], self.env.event()
        ev.succeed()

    def _compute(self, r, work):
        left, slow = work, 1.0 + (self.costs.overlap_slowdown if charges(self.sc.ddp.costs, self.n) else 0.0)
        while left > 1e-15:
            rate = 1.0 / slow if self.holding[r] else 1.0
            t = self.env.now
            timer = self.env.timeout(left / rate)
            yield timer | self.changed[r]
            if timer.processed:
                return
            left -= (self.env.now - t) * rate

    def _issue_later(self, r, at, item):
        yield self.env.timeout(at - self.env.now)
        yield self.queues[r].put(item)

    def rank(self, r):
        sc, c = self.sc, self.sc.compute
        m = sc.ddp.gradient_accumulation
        for s in range(sc.steps):
            f = float(self.p.factor[s, r])
            yield self.env.timeout(float(self.p.stall[s, r]))
            yield from self._compute(r, f * (m * c.forward + (m - 1) * c.backward))
            done, last = 0.0, -np.inf
            for j, b in enumerate(self.buckets):
                if self.ready[j] > done:
                    yield from self._compute(r, f * c.backward * (self.ready[j] - done))
                    done = self.ready[j]
                yield self.env.timeout(bucket_copy_in_time(b, self.costs))
                last = max(self.env.now, last) + self.costs.bucket_overhead
                self.env.process(self._issue_later(r, last, (s, j)))
            if done < 1.0:
                yield from self._compute(r, f * c.backward * (1.0 - done))
            for j in range(len(self.buckets)):
                yield self._event(self.done, (s, j))
            yield self.env.timeout(copy_back_time(sum(self.buckets), self.costs))
            yield from self._compute(r, f * c.optimizer)
            self.rank_end[s, r] = self.env.now

    def worker(self, r):
        while True:
            s, j = yield self.queues[r].get()
            self._hold(r, +1)
            count = self.joined[(s, j)] = self.joined.get((s, j), 0) + 1
            if count == self.n:
                self.env.process(self.collective(s, j))
            yield self._event(self.done, (s, j))
            self._hold(r, -1)

    def collective(self, s, j):
        fixed, work = self.parts[j]
        yield self.env.timeout(fixed)
        self.link[(s, j)] = work
        ev, self.arrival = self.arrival, self.env.event()
        ev.succeed()

    def shared_link(self):
        while True:
            if not self.link:
                yield self.arrival
                continue
            t, holding = self.env.now, list(self.link)  # (an arrival while it waits has not progressed)
            rate = min(1.0, self.sc.ddp.comm_capacity / len(holding))  # each part's, of its rate alone
            timer = self.env.timeout(min(self.link.values()) / rate)
            yield timer | self.arrival
            for key in holding:
                self.link[key] -= (self.env.now - t) * rate
                if self.link[key] <= 1e-13:
                    del self.link[key]
                    self._event(self.done, key).succeed()

    def run(self):
        for r in range(self.n):
            self.env.process(self.rank(r))
            for _ in range(self.k):
                self.env.process(self.worker(r))
        self.env.process(self.shared_link())
        self.env.run(until=1e6)
        return self.rank_end


def random_case(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    nb = int(rng.integers(1, 7))
    sizes = tuple(float(x) for x in rng.integers(1, 40, nb) * 1e5)
    costs = [NO_DDP_COSTS, DDPCosts(), DDPCosts(bucket_overhead=float(rng.uniform(0, 5e-4)),
                                               overlap_slowdown=float(rng.uniform(0, 1)),
                                               memory_bandwidth=float(rng.uniform(1e9, 1e11)))][seed % 3]
    stragglers = []
    if rng.random() < 0.5:
        stragglers.append(Jitter(0.1))
    if rng.random() < 0.4:
        stragglers.append(SlowRank((int(rng.integers(0, n)),), float(rng.uniform(1.2, 2))))
    if rng.random() < 0.3:
        stragglers.append(Stall((0,), 0.004, every=2))
    sc = make_scenario(nodes=1, gpus_per_node=n, parameters=int(sum(sizes) // 4), intra=(float(rng.uniform(1e9, 2e10)),
                                                                                         float(rng.uniform(1e-5, 5e-4))),
                       forward=float(rng.uniform(1e-3, 1e-2)), backward=float(rng.uniform(2e-3, 3e-2)),
                       optimizer=float(rng.uniform(0, 2e-3)), overlap=bool(rng.random() < 0.8),
                       accumulation=int(rng.integers(1, 3)), steps=3, seed=seed, stragglers=stragglers, costs=costs)
    ready = np.cumsum(rng.uniform(0.1, 1, nb))
    ready = tuple(float(x) for x in np.minimum(ready / ready[-1] * rng.uniform(0.7, 1.0), 1.0))
    capacity = [1.0, 1.0, float(rng.uniform(1.0, 3.0))][seed % 4 % 3]
    ddp = dataclasses.replace(sc.ddp, bucket_sizes=sizes, bucket_ready=ready, comm_streams=int(rng.integers(2, 4)),
                              comm_capacity=capacity, comm_shared=["bandwidth", "all"][seed % 5 == 3])
    return dataclasses.replace(sc, ddp=ddp)


@pytest.mark.parametrize("seed", range(24))
def test_engine_streams_equal_the_reference(seed):
    sc = random_case(seed)
    expected = Reference(sc).run()
    got = simulate(sc).rank_end
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_the_reference_sees_concurrency():
    # the check above means something only where collectives do overlap: some cases must differ from k = 1
    differ = 0
    for seed in range(24):
        sc = random_case(seed)
        one = simulate(dataclasses.replace(sc, ddp=dataclasses.replace(sc.ddp, comm_streams=1))).rank_end
        differ += not np.allclose(one, simulate(sc).rank_end, rtol=1e-9)
    assert differ >= 8
