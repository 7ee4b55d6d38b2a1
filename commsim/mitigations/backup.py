"""Backup workers (Chen, Pan, Monga, Bengio, Jozefowicz 2016, "Revisiting Distributed Synchronous
SGD"): n + b workers compute each step, the step goes on with the first n gradients and drops
the other b.

The model, per step: every worker starts from the previous step's parameters at its end (a
dropped worker abandons its gradient); worker i's gradient is ready after its stall and its
forward and backward passes (all micro-batches), slowed by its straggler factor and thermal
clock (:func:`commsim.sim.stragglers.perturbations` of the scenario widened to n + b ranks: ranks
0..n-1 draw exactly what ``commsim run`` draws, the backups n..n+b-1 their own streams); the
step then waits for the n-th arrival (the n-th order statistic), aggregates the full gradient
and runs the optimizer (a healthy rank's time). Aggregation is priced as the scenario's DDP
all-reduces of every bucket, one after the other, on the scenario's n-rank fabric
(:func:`commsim.sim.links.scenario_fabric`): a gradient counts only once it is complete, so
backup workers give up DDP's overlap of communication with backward. :func:`run_backup` with
b = 0 is the same aggregation without backups, the like-for-like reference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from commsim.collectives.kernels import algorithm_for, make_kernel
from commsim.mitigations.hooked import bucket_sizes
from commsim.scenario.spec import Scenario
from commsim.sim.links import scenario_fabric
from commsim.sim.stragglers import perturbations


@dataclass(frozen=True)
class BackupRun:
    step_time: np.ndarray        # (steps,)
    arrival: np.ndarray          # (steps, n + b) gradient ready time after the step's start
    dropped: np.ndarray          # (steps, n + b) bool: the gradient was not among the first n
    aggregation_s: float         # communication after the n-th arrival
    workers: int                 # n + b

    @property
    def dropped_fraction(self) -> np.ndarray:
        """(n + b,) fraction of steps whose gradient each worker had dropped."""
        return self.dropped.mean(axis=0)


def aggregation_time(scenario: Scenario) -> float:
    """Seconds to all-reduce every bucket in turn once all contributors are ready (no overlap)."""
    if scenario.world_size == 1:
        return 0.0
    fabric = scenario_fabric(scenario)
    name = algorithm_for("all_reduce", scenario.collective.algorithm)
    times = {}
    total = 0.0
    for size in bucket_sizes(scenario):
        if size not in times:
            times[size] = make_kernel(name, fabric, size, scenario.collective.model).uniform_time()
        total += times[size]
    return total


def run_backup(scenario: Scenario, b: int) -> BackupRun:
    """Simulate n = world_size workers plus `b` backups (module docstring)."""
    n = scenario.world_size
    workers = n + b
    wide = replace(scenario, cluster=replace(scenario.cluster, nodes=1, gpus_per_node=workers))
    perturb = perturbations(wide)
    c, m = scenario.compute, scenario.ddp.gradient_accumulation
    work = m * (c.forward + c.backward)
    comm = aggregation_time(scenario)
    steps = scenario.steps
    arrival = np.zeros((steps, workers))
    dropped = np.zeros((steps, workers), dtype=bool)
    step_time = np.zeros(steps)
    t = 0.0
    for s in range(steps):
        start = np.full(workers, t) + perturb.stall[s]
        ready = start + perturb.factor[s] * work
        for r, clock in perturb.clocks.items():
            ready[r] = clock.finish(start[r], perturb.factor[s, r] * work)
        order = np.argsort(ready, kind="stable")
        nth = ready[order[n - 1]]
        dropped[s, order[n:]] = True
        arrival[s] = ready - t
        end = nth + comm + c.optimizer
        step_time[s] = end - t
        t = end
    return BackupRun(step_time=step_time, arrival=arrival, dropped=dropped, aggregation_s=comm, workers=workers)
