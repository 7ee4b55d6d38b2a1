"""Asynchronous SGD with parameter servers (Dean et al. 2012, "Large Scale Distributed Deep
Networks", Downpour SGD; Li et al. 2014, "Scaling Distributed Machine Learning with the
Parameter Server"), as SimPy processes and resources.

The parameters are split evenly over S servers. Each worker (a SimPy process per rank) loops:
compute a gradient (its stall, then forward and backward of every micro-batch, slowed by its
straggler factor and thermal clock: :func:`commsim.sim.stragglers.perturbations`, the same draws
as ``commsim run``), push one shard to every server at once, then pull every server's shard of
the parameters; it waits for nobody but the links. Each server has an ingress and an egress
link (:class:`simpy.Resource` of capacity 1, FIFO): a transfer of a shard holds the link for
``latency + shard / bandwidth`` (the server's link shared by its workers; full duplex). A server
applies a pushed shard the moment it has arrived (the update's own arithmetic is not timed)
and sends a pull the parameters as they are when its transfer starts.

Staleness of a gradient at a server: how many updates that server applied between the
snapshot the worker computed on and this gradient's own update. The run stops when the first
worker has done ``steps`` iterations (no tail in which a few slow workers run alone); rates
are over that window.

Theory the tests check: throughput cannot exceed any link's capacity,
S * bandwidth / gradient bytes per second (each server's ingress carries one shard per
gradient), and reaches it when communication dominates; Little's law, L = lambda W, ties the
mean staleness to the update rate lambda and the mean time W from snapshot to update
(mean staleness = lambda W - 1 in a closed system where every worker is always in flight).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

import numpy as np
import simpy

from commsim.mitigations.spec import AsyncPS
from commsim.scenario.spec import Scenario
from commsim.sim.stragglers import perturbations


# CPU seconds per (worker iteration, worker, server) of one run: two SimPy processes, two
# resource requests and two timeouts. Measured 50-75 us on the 2-core development machine
# (32 ranks, 5 steps, 1,000-4,000 servers); the upper end is taken.
SECONDS_PER_TRANSFER_PAIR = 75e-6


def estimated_seconds(scenario: Scenario, remedy: AsyncPS) -> float:
    """An upper bound on the CPU time of the async row: :func:`run_async` on the scenario and
    on its straggler-free baseline, each at most ``steps`` iterations of every worker with a
    push and a pull per server (the run stops when the first worker is done)."""
    return 2 * scenario.steps * scenario.world_size * remedy.servers * SECONDS_PER_TRANSFER_PAIR


@dataclass(frozen=True)
class AsyncRun:
    window_s: float               # simulated time until the first worker finished `steps` iterations
    gradients: float              # gradients applied in the window (updates per server, averaged)
    staleness: np.ndarray         # one value per (gradient, server) update
    sojourn: np.ndarray           # seconds from a gradient's snapshot to its update, per update
    iteration_s: np.ndarray       # durations of completed worker iterations
    servers: int
    link_capacity: float          # gradients per second the servers' ingress links allow

    @property
    def gradients_per_s(self) -> float:
        return self.gradients / self.window_s if self.window_s > 0 else 0.0


def run_async(scenario: Scenario, remedy: AsyncPS) -> AsyncRun:
    """Simulate asynchronous SGD on the scenario's workers with `remedy.servers` servers."""
    sc, c = scenario, scenario.compute
    n, steps, S = sc.world_size, sc.steps, remedy.servers
    bw = remedy.bandwidth if remedy.bandwidth is not None else sc.cluster.inter_node.bandwidth
    lat = remedy.latency if remedy.latency is not None else sc.cluster.inter_node.latency
    shard = sc.model.grad_bytes / S
    hold = lat + shard / bw
    work = sc.ddp.gradient_accumulation * (c.forward + c.backward)
    perturb = perturbations(sc)
    env = simpy.Environment()
    ingress = [simpy.Resource(env, capacity=1) for _ in range(S)]
    egress = [simpy.Resource(env, capacity=1) for _ in range(S)]
    version = [0] * S
    staleness: List[int] = []
    sojourn: List[float] = []
    iterations: List[float] = []
    done = env.event()

    def push(s, snapshot):
        read_version, read_time = snapshot
        with ingress[s].request() as req:
            yield req
            yield env.timeout(hold)
        staleness.append(version[s] - read_version)
        sojourn.append(env.now - read_time)
        version[s] += 1

    def pull(s, snapshots):
        with egress[s].request() as req:
            yield req
            snapshots[s] = (version[s], env.now)  # the parameters as the transfer starts
            yield env.timeout(hold)

    def worker(r):
        snapshots = [(0, 0.0)] * S
        clock = perturb.clocks.get(r)
        for k in range(steps):
            began = env.now
            if perturb.stall[k, r] > 0:
                yield env.timeout(perturb.stall[k, r])
            w = perturb.factor[k, r] * work
            end = clock.finish(env.now, w) if clock is not None else env.now + w
            yield env.timeout(float(end) - env.now)
            yield env.all_of([env.process(push(s, snapshots[s])) for s in range(S)])
            snapshots = list(snapshots)
            yield env.all_of([env.process(pull(s, snapshots)) for s in range(S)])
            iterations.append(env.now - began)
        if not done.triggered:
            done.succeed()

    for r in range(n):
        env.process(worker(r))
    env.run(until=done)
    window = env.now
    applied = sum(version) / S
    return AsyncRun(window_s=window, gradients=applied, staleness=np.asarray(staleness, dtype=float),
                    sojourn=np.asarray(sojourn), iteration_s=np.asarray(iterations), servers=S,
                    link_capacity=S * bw / sc.model.grad_bytes if sc.model.grad_bytes else float("inf"))


def staleness_summary(run: AsyncRun) -> dict:
    """mean, p50, p95 and max staleness, and Little's law's prediction lambda W - 1 of the mean."""
    st = run.staleness
    if not st.size:
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0, "littles_law_mean": 0.0}
    p50, p95 = np.percentile(st, [50, 95])
    return {"mean": float(st.mean()), "p50": float(p50), "p95": float(p95), "max": float(st.max()),
            "littles_law_mean": float(run.gradients_per_s * run.sojourn.mean() - 1.0)}
