"""benchmarks/numpy_bound.py computes the engine's model: on uniform links (one link class) its
step end times equal :func:`commsim.sim.engine.simulate`'s at 1e-9, with DDP's own costs off
and on, for the algorithms whose collectives finish at ``max(launch) + uniform_time`` on every
rank (the module docstring says which, and what the bound leaves out for the others)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from commsim.scenario.spec import DDP, Cluster, Collective, Compute, DDPCosts, Jitter, Link, Model, Scenario, Stall, Throttle
from commsim.sim.ddp_costs import NONE
from commsim.sim.engine import simulate
from tests.conftest import load_benchmark

numpy_bound = load_benchmark("numpy_bound")

LINK = Link(100e9, 3e-6)
COSTS = {
    "off": NONE,
    "default": DDPCosts(),
    # a host cost longer than a backward segment (issues queue behind each other), copies at a
    # slow memory, half-speed compute under communication
    "heavy": DDPCosts(bucket_overhead=3e-4, memory_bandwidth=5e10, overlap_slowdown=0.5),
    "view": DDPCosts(bucket_overhead=1e-5, gradient_as_bucket_view=True, overlap_slowdown=0.2),
}
SHAPES = [(1, 8), (4, 4), (1, 5)]  # one node; nodes whose network link is the NVLink's; an odd world


def scenario(nodes: int, gpus: int, algorithm: str, costs: DDPCosts, parameters: int = 20_000_000,
             overlap: bool = True, accumulation: int = 1, stall: bool = False, steps: int = 6) -> Scenario:
    stragglers = (Jitter(0.05), Throttle((1,), heat_up=0.02, throttled_time=0.03, clock_fraction=0.5))
    if stall:
        stragglers += (Stall((2,), 0.004, every=2),)
    fsdp = algorithm == "fsdp"
    return Scenario(
        cluster=Cluster(nodes, gpus, LINK, LINK),
        model=Model(parameters, "fp32"),
        compute=Compute(forward=0.01, backward=0.02, optimizer=0.002, batch_size=8),
        ddp=DDP(bucket_cap=4e6, first_bucket=1e6, sharding="fsdp" if fsdp else "none", costs=costs,
                overlap=overlap, gradient_accumulation=accumulation),
        collective=Collective(algorithm="ring" if fsdp else algorithm),
        steps=steps, seed=3, stragglers=stragglers)


def assert_equal_to_engine(sc: Scenario) -> None:
    engine = simulate(sc, ranks=np.arange(0)).step_end
    bound = numpy_bound.bound_run(sc)
    np.testing.assert_allclose(bound, engine, rtol=1e-9, atol=0)


@pytest.mark.parametrize("costs", sorted(COSTS))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("algorithm", ["ring", "fsdp", "hierarchical"])
def test_equals_engine_on_uniform_links(algorithm, shape, costs):
    assert_equal_to_engine(scenario(*shape, algorithm, COSTS[costs]))


@pytest.mark.parametrize("costs", sorted(COSTS))
@pytest.mark.parametrize("algorithm", ["halving_doubling", "auto"])
def test_equals_engine_power_of_two(algorithm, costs):
    for shape in [(1, 8), (4, 4)]:
        assert_equal_to_engine(scenario(*shape, algorithm, COSTS[costs]))


@pytest.mark.parametrize("costs", ["off", "default", "heavy"])
@pytest.mark.parametrize("algorithm", ["ring", "fsdp"])
def test_equals_engine_communication_bound(algorithm, costs):
    # 200 M parameters in 4 MB buckets on 25 GB/s: every collective outlasts its backward
    # segment, the stream backs up (the closed form of Busy.compute: all compute slowed)
    slow = Link(25e9, 5e-6)
    sc = scenario(2, 4, algorithm, COSTS[costs], parameters=200_000_000, steps=3)
    sc = dataclasses.replace(sc, cluster=Cluster(2, 4, slow, slow))
    assert_equal_to_engine(sc)


@pytest.mark.parametrize("costs", ["off", "default", "heavy"])
@pytest.mark.parametrize("algorithm", ["ring", "fsdp"])
def test_equals_engine_without_overlap(algorithm, costs):
    assert_equal_to_engine(scenario(1, 8, algorithm, COSTS[costs], overlap=False))


@pytest.mark.parametrize("costs", ["off", "heavy"])
def test_equals_engine_with_stalls_and_accumulation(costs):
    assert_equal_to_engine(scenario(1, 8, "ring", COSTS[costs], accumulation=2, stall=True))
    assert_equal_to_engine(scenario(4, 4, "fsdp", COSTS[costs], stall=True))



@pytest.mark.parametrize("costs", ["off", "heavy"])
def test_equals_engine_with_an_explicit_bucket_layout(costs):
    # a real job's layout: the big first bucket ready late in backward
    sc = scenario(1, 8, "ring", COSTS[costs], parameters=2_000_000)
    ddp = dataclasses.replace(sc.ddp, bucket_sizes=(6e6, 1e6, 1e6), bucket_ready=(0.9, 0.95, 1.0))
    assert_equal_to_engine(dataclasses.replace(sc, ddp=ddp))

def test_busy_paths_are_exercised():
    # the engine equalities above go through the slowed compute, in vectors and on the
    # throttled rank (in its work units), else they would not test it
    calls = {"vector": 0, "throttled": 0}
    busy = numpy_bound.Busy
    walk, throttled = busy._walk, busy._throttled

    def counting_walk(self, *a):
        calls["vector"] += 1
        return walk(self, *a)

    def counting_throttled(self, *a):
        calls["throttled"] += 1
        return throttled(self, *a)

    mp = pytest.MonkeyPatch()
    mp.setattr(busy, "_walk", counting_walk)
    mp.setattr(busy, "_throttled", counting_throttled)
    try:
        test_equals_engine_communication_bound("ring", "heavy")
        test_equals_engine_on_uniform_links("fsdp", (1, 8), "heavy")
    finally:
        mp.undo()
    assert min(calls.values()) > 0, calls


def test_busy_compute_matches_stretched_finish():
    # Busy.compute against the scalar reference of the slowdown (ddp_costs.stretched_finish)
    # on random disjoint intervals ending at common times
    from commsim.sim.ddp_costs import stretched_finish

    rng = np.random.default_rng(7)
    n, count, slowdown = 6, 5, 0.3
    b = numpy_bound.Busy(n, count, slowdown, {})
    finish = 0.0
    for _ in range(count):
        launch = finish + rng.random(n) * 0.5
        launch[rng.random(n) < 0.3] = finish  # queued behind the previous one on some ranks
        finish = float(launch.max()) + rng.random() * 0.5
        b.add(launch, finish)
    t, work = rng.random(n) * finish, rng.random(n) * 2.0
    got = b.compute(t, work)
    want = [stretched_finish(t[r], work[r], list(zip(b.L[:, r], b.F)), slowdown) for r in range(n)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_tree_is_an_upper_bound_not_the_engine():
    # the tree's ranks finish at different times (its uniform time is the latest's), so the bound,
    # which gives every rank that latest finish, is above the engine (kernels are monotone and
    # shift-invariant: finish(L) <= max(L) + uniform_time), not equal to it
    sc = scenario(1, 8, "tree", NONE)
    engine = simulate(sc, ranks=np.arange(0)).step_end
    bound = numpy_bound.bound_run(sc)
    assert np.all(bound >= engine * (1 - 1e-12))
    assert np.max(bound / engine - 1) > 1e-6


def test_busy_closed_form_inside_a_chain_matches_stretched_finish():
    # collectives back to back on every rank (each launched at the previous finish), compute
    # starting inside the chain on every rank and ending before it does: Busy.compute's closed
    # form (a step's end does not show it there: the stream, not compute, sets it)
    from commsim.sim.ddp_costs import stretched_finish

    rng = np.random.default_rng(11)
    n, count, slowdown = 6, 6, 0.25
    b = numpy_bound.Busy(n, count, slowdown, {})
    b.add(rng.random(n) * 0.1, 1.0)
    for k in range(1, count):
        b.add(np.full(n, b.F[k - 1]), b.F[k - 1] + 1.0)
    assert b.chain_from == 0
    t, work = 1.0 + rng.random(n) * 2.0, rng.random(n) * 0.5
    got = b.compute(t, work)
    np.testing.assert_array_equal(got, t + work * (1.0 + slowdown))
    want = [stretched_finish(t[r], work[r], list(zip(b.L[:, r], b.F)), slowdown) for r in range(n)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # a gap on one rank breaks the chain: the walk, still the reference's result
    c = numpy_bound.Busy(n, count, slowdown, {})
    for k in range(count):
        launch = np.full(n, c.F[k - 1] if k else 0.0)
        launch[k % n] += 0.3 if k else 0.0
        c.add(launch, float(launch.max()) + 1.0)
    t = rng.random(n) * c.F[-1]
    got = c.compute(t, work)
    want = [stretched_finish(t[r], work[r], list(zip(c.L[:, r], c.F)), slowdown) for r in range(n)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
