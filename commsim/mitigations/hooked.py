"""DDP with a communication hook: the engine's step, with each bucket's all-reduce replaced by
the hook's stages.

A DDP communication hook (``DistributedDataParallel.register_comm_hook``) receives each bucket
when it is ready and returns a future of the reduced bucket; what it runs in between is here a
list of stages, run in order on the rank's one communication stream:

- :class:`Work`: seconds of work on the rank (a cast, a matmul) at its nominal rate, times the
  rank's compute factor of the step (``Perturbations.factor``: slow ranks and jitter, as its
  forward and backward): the same slowed core runs the hook's kernels, so the sync after them
  waits for the slower rank (E[max] over the ranks' draws); thermal clocks and stalls are not
  applied to them (an approximation: the hooks' kernels are short);
- :class:`Reduce`: an all-reduce of ``size`` bytes over the whole job (``scope="world"``, priced by
  the scenario's collective kernel: :func:`commsim.collectives.kernels.make_kernel` on
  :func:`commsim.sim.links.scenario_fabric`) or within each node (``scope="node"``, the intra-node
  ring of one node: every rank of a node finishes at the node's last launch plus that ring's
  time, on the same fabric cut to the node: priced by the scenario's calibration when it has one,
  the node's ``slow_link`` ranks slowing their intra-node hops).

Everything else is the engine's schedule (:mod:`commsim.sim.engine`, the same compute
perturbations from :func:`commsim.sim.stragglers.perturbations`, so the same seed gives the same
stragglers as ``commsim run``): buckets ready through the last backward, in order on one
stream, the optimizer after the last bucket; ``after_step`` stages run after the optimizer
(post-local SGD's model averaging). With :class:`PlainHook` (one world all-reduce per bucket)
the result equals :func:`commsim.sim.engine.simulate`'s step ends (tests/unit/mitigations).
Plain DDP only (``ddp.sharding: none``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from commsim.collectives.kernels import algorithm_for, make_kernel
from commsim.scenario.spec import Scenario, SlowLink
from commsim.sim.ddp_costs import ChargedBackward, charges
from commsim.sim.engine import bucket_layout
from commsim.sim.links import scenario_fabric, with_slow_links
from commsim.sim.stragglers import Perturbations, perturbations


@dataclass(frozen=True)
class Work:
    """Seconds of work on every rank at its nominal rate (times the rank's compute factor of the step)."""

    seconds: float


@dataclass(frozen=True)
class Reduce:
    """An all-reduce of `size` bytes over the job (``world``) or within each node (``node``).

    `priced_bytes`: the bytes of the scenario's all-reduce whose time a world-scope one takes
    (None: `size`, a byte-bound all-reduce). A 16-bit all-reduce whose summation, not its wire,
    bounds it (gloo on a CPU) sends `size` bytes in the time of more."""

    size: float
    scope: str = "world"
    priced_bytes: Optional[float] = None


Stage = Union[Work, Reduce]


class PlainHook:
    """DDP's default: one all-reduce of the bucket over the job. Subclasses override the two methods."""

    def stages(self, step: int, bucket: int, size: float) -> Sequence[Stage]:
        return (Reduce(size),)

    def after_step(self, step: int) -> Sequence[Stage]:
        return ()


@dataclass(frozen=True)
class HookedRun:
    """Per-step records of a hooked run (times in seconds from the job's start)."""

    rank_end: np.ndarray      # (steps, n)
    step_end: np.ndarray      # (steps,)
    reduced_bytes: np.ndarray  # (steps,) payload all-reduced per rank (world and node scope)
    world_bytes: np.ndarray    # (steps,) of which over the whole job

    @property
    def step_time(self) -> np.ndarray:
        return np.diff(np.concatenate(([0.0], self.step_end)))


class _Clock:
    """Work to finish times per rank, honoring thermal clocks (as the engine does)."""

    def __init__(self, perturb: Perturbations):
        self.clocks = perturb.clocks

    def finish(self, start: np.ndarray, work: np.ndarray) -> np.ndarray:
        end = start + work
        for r, clock in self.clocks.items():
            end[r] = clock.finish(start[r], work[r])
        return end

    def ready(self, start: np.ndarray, work: np.ndarray, fraction: float) -> np.ndarray:
        return self.finish(start, work * fraction)


class _Reducer:
    """Finish times of Reduce stages, kernels planned once per (scope, size)."""

    def __init__(self, scenario: Scenario):
        self.sc = scenario
        self.fabric = scenario_fabric(scenario)
        self.algorithm = algorithm_for("all_reduce", scenario.collective.algorithm)
        g = scenario.cluster.gpus_per_node
        self.g = g
        self.kernels: Dict[Tuple[str, float], object] = {}
        self.node_times: Dict[float, np.ndarray] = {}
        # one node's fabric, priced as the job's (the calibration when there is one: measured on
        # the same machine as the world scope), with each node's slow ranks on its own copy
        one = replace(scenario, cluster=replace(scenario.cluster, nodes=1), stragglers=())
        self.node_fabric = scenario_fabric(one) if g > 1 else None
        slow = [s for s in scenario.stragglers if isinstance(s, SlowLink) and s.rank is not None]
        self.node_slow: Dict[int, list] = {}
        for s in slow:
            self.node_slow.setdefault(s.rank // g, []).append(replace(s, rank=s.rank % g))

    def _node_times(self, size: float) -> np.ndarray:
        """(nodes,) seconds of a node ring of `size` bytes on each node."""
        times = self.node_times.get(size)
        if times is None:
            ring = make_kernel("ring", self.node_fabric, size, "alpha-beta").uniform_time()
            times = np.full(self.sc.cluster.nodes, ring)
            for k, slow in self.node_slow.items():
                if slow:
                    times[k] = make_kernel("ring", with_slow_links(self.node_fabric, slow), size,
                                           "alpha-beta").uniform_time()
            self.node_times[size] = times
        return times

    def finish(self, stage: Reduce, launch: np.ndarray) -> np.ndarray:
        if stage.size <= 0:
            return launch
        if stage.scope == "node":
            if self.g == 1:
                return launch
            per_node = launch.reshape(-1, self.g).max(axis=1) + self._node_times(stage.size)
            return np.repeat(per_node, self.g)
        priced = stage.size if stage.priced_bytes is None else stage.priced_bytes
        kernel = self.kernels.get(("world", priced))
        if kernel is None:
            kernel = make_kernel(self.algorithm, self.fabric, priced, self.sc.collective.model)
            self.kernels[("world", priced)] = kernel
        return kernel.finish_times(launch)


def run_hooked(scenario: Scenario, hook=None, perturb: Perturbations = None) -> HookedRun:
    """Simulate `scenario` with DDP communication hook `hook` (default :class:`PlainHook`)."""
    if scenario.ddp.sharding != "none":
        raise ValueError("communication hooks are modeled for plain DDP (ddp.sharding none)")
    hook = hook if hook is not None else PlainHook()
    sc, c = scenario, scenario.compute
    n, steps, m = sc.world_size, sc.steps, sc.ddp.gradient_accumulation
    perturb = perturb if perturb is not None else perturbations(sc)
    clock = _Clock(perturb)
    reducer = _Reducer(sc)
    buckets, ready = bucket_layout(sc)
    fractions = ready if sc.ddp.overlap else np.ones(len(buckets))
    rank_end = np.zeros((steps, n))
    reduced = np.zeros(steps)
    world = np.zeros(steps)
    work_before = m * c.forward + (m - 1) * c.backward
    start = np.zeros(n)
    single = n == 1

    def run_stages(stages, t, s, f):
        for st in stages:
            if isinstance(st, Work):
                t = t + st.seconds * f
            else:
                t = reducer.finish(st, t)
                if st.scope == "world" or reducer.g > 1:  # a one-GPU node's group sends nothing
                    reduced[s] += st.size
                if st.scope == "world":
                    world[s] += st.size
        return t

    # DDP's own costs (commsim/sim/ddp_costs.py), charged as the engine does; the hook's stages
    # take the all-reduce's place on the stream (its span slows backward)
    charged = (ChargedBackward(buckets, sc.ddp.overlap, sc.ddp.costs, perturb.clocks, ready)
               if charges(sc.ddp.costs, n) else None)
    for s in range(steps):
        f = perturb.factor[s]
        t0 = start + perturb.stall[s]
        backward_start = clock.finish(t0, f * work_before)
        backward = f * c.backward
        stream = None
        if charged is not None:
            charged.begin(backward, backward_start)
            for j, size in enumerate(buckets):
                issue = charged.bucket(j)
                launch = issue if stream is None else np.maximum(issue, stream)
                stream = run_stages(hook.stages(s, j, float(size)), launch, s, f)
                charged.ran(launch, stream)
            t, _ = charged.end()
            reduced_at = t if stream is None else stream
            end = clock.finish(np.maximum(reduced_at, t) + charged.copy_back, f * c.optimizer)
            end = run_stages(hook.after_step(s), end, s, f)
            rank_end[s] = end
            start = end
            continue
        if not single:  # one rank: DDP all-reduces nothing (the engine's rule)
            for j, size in enumerate(buckets):
                ready = clock.ready(backward_start, backward, fractions[j])
                launch = ready if stream is None else np.maximum(ready, stream)
                stream = run_stages(hook.stages(s, j, float(size)), launch, s, f)
        backward_end = clock.finish(backward_start, backward)
        finish = backward_end if stream is None else stream
        end = clock.finish(np.maximum(finish, backward_end), f * c.optimizer)
        if not single:
            end = run_stages(hook.after_step(s), end, s, f)
        rank_end[s] = end
        start = end
    return HookedRun(rank_end=rank_end, step_end=rank_end.max(axis=1), reduced_bytes=reduced, world_bytes=world)


def plain_bytes(scenario: Scenario) -> float:
    """Payload plain DDP all-reduces per step (the gradient, once)."""
    return float(scenario.model.grad_bytes) if scenario.world_size > 1 else 0.0


def bucket_sizes(scenario: Scenario) -> List[float]:
    """The scenario's DDP buckets (bytes, backward order)."""
    return list(scenario.gradient_buckets())
