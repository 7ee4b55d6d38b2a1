"""The engine: closed forms, straggler effects, statistics against theory, and the reference model."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commsim.analysis.report import summarize
from commsim.collectives.kernels import make_kernel
from commsim.network.costs import ring_allreduce_time
from commsim.output.run_files import summary_json
from pathlib import Path

import commsim.sim.engine as engine_module
from commsim.scenario.loader import load_scenario
from commsim.scenario.spec import Collective, DDPCosts, Jitter, SlowLink, SlowRank, Stall, Throttle
from commsim.sim.ddp_costs import charges
from commsim.sim.engine import Engine, simulate
from commsim.sim.links import scenario_fabric
from commsim.sim.reference import ReferenceModel
from tests.conftest import NO_DDP_COSTS, make_scenario, replace

SCENARIOS = sorted((Path(__file__).resolve().parents[3] / "scenarios").glob("*.yaml"))
COSTS_OFF = ["ddp.bucket_overhead=0", "ddp.overlap_slowdown=0", "ddp.gradient_as_bucket_view=true"]

ONE_BUCKET = dict(bucket_cap=4e9, first_bucket=4e9, overlap=False)


def test_uniform_ring_single_bucket_equals_closed_form():
    sc = make_scenario(nodes=8, gpus_per_node=1, parameters=1_000_000_000, forward=0.2, backward=0.3,
                       optimizer=0.0, inter=(12.5e9, 5e-6), **ONE_BUCKET)
    r = simulate(sc)
    ring = ring_allreduce_time(4e9, 8, 5e-6, 12.5e9)
    np.testing.assert_allclose(r.step_time, 0.5 + ring, rtol=1e-9)
    assert r.comm_time.sum() == pytest.approx(ring, rel=1e-9)


def test_overlap_hides_communication_behind_backward():
    kw = dict(nodes=2, gpus_per_node=4, parameters=100_000_000, forward=0.1, backward=0.2, optimizer=0.0)
    no = simulate(make_scenario(overlap=False, **kw)).step_time.mean()
    yes = simulate(make_scenario(overlap=True, **kw)).step_time.mean()
    assert yes < no
    assert yes >= 0.3  # never faster than compute


def test_slow_rank_delays_everyone_by_its_extra_compute():
    # one node: every hop alike, so every rank finishes the all-reduce at the same time
    base = make_scenario(nodes=1, optimizer=0.0, **ONE_BUCKET)
    slow = make_scenario(nodes=1, optimizer=0.0, stragglers=[SlowRank((3,), 1.5)], **ONE_BUCKET)
    extra = simulate(slow).step_time - simulate(base).step_time
    np.testing.assert_allclose(extra, 0.5 * (0.05 + 0.1), rtol=1e-9)
    summary = summarize(slow)
    assert summary["stragglers_top"] == [{"rank": 3, "fraction": 1.0}]
    assert summary["slowdown"] > 1


def test_gradient_accumulation_computes_all_micro_batches_and_reduces_once():
    one = simulate(make_scenario(optimizer=0.0, **ONE_BUCKET))
    four = simulate(make_scenario(optimizer=0.0, accumulation=4, **ONE_BUCKET))
    np.testing.assert_allclose(four.step_time - one.step_time, 3 * (0.05 + 0.1), rtol=1e-9)


def _expected_max_lognormal(n, cv):
    """E[max of n iid lognormal(mean 1, cv)] = integral of 1 - F(x)^n over x >= 0."""
    s2 = math.log1p(cv * cv)
    mu, s = -s2 / 2, math.sqrt(s2)
    x = np.linspace(1e-9, 1 + 12 * cv, 200_001)
    cdf = 0.5 * (1 + np.vectorize(math.erf)((np.log(x) - mu) / (s * math.sqrt(2))))
    return float(np.trapezoid(1 - cdf ** n, x))


@pytest.mark.parametrize("n", [4, 32])
def test_jitter_barrier_cost_matches_expected_maximum(n):
    cv, steps, fb = 0.1, 3000, 0.15
    sc = make_scenario(nodes=1, gpus_per_node=n, optimizer=0.0, steps=steps, stragglers=[Jitter(cv)], **ONE_BUCKET)
    r = simulate(sc)
    ring = simulate(sc.without_stragglers()).step_time.mean() - fb
    per_step_max = r.step_time - ring  # = max over ranks of jitter * (forward + backward)
    expected = _expected_max_lognormal(n, cv) * fb
    stderr = per_step_max.std() / math.sqrt(steps)
    assert per_step_max.mean() == pytest.approx(expected, abs=4 * stderr)
    assert expected > fb  # the barrier always costs more than the mean


def test_same_scenario_same_bytes():
    sc = make_scenario(stragglers=[Jitter(0.05), Stall((1,), 0.01, probability=0.3)], steps=8, seed=11)
    assert summary_json(summarize(sc)) == summary_json(summarize(sc))
    other = make_scenario(stragglers=[Jitter(0.05), Stall((1,), 0.01, probability=0.3)], steps=8, seed=12)
    assert summary_json(summarize(sc)) != summary_json(summarize(other))


def test_single_gpu_has_no_communication():
    r = simulate(make_scenario(nodes=1, gpus_per_node=1, optimizer=0.01))
    np.testing.assert_allclose(r.step_time, 0.16, rtol=1e-12)


@st.composite
def small_scenarios(draw):
    nodes = draw(st.integers(1, 4))
    gpn = draw(st.integers(1, 4))
    n = nodes * gpn
    rank = st.integers(0, n - 1)
    ranks = st.lists(rank, min_size=1, max_size=3, unique=True).map(tuple)
    kinds = draw(st.lists(st.sampled_from(["slow_rank", "jitter", "stall_every", "stall_p", "throttle", "slow_link"]),
                          max_size=4))
    stragglers, throttled = [], set()
    for kind in kinds:
        if kind == "slow_rank":
            stragglers.append(SlowRank(draw(ranks), draw(st.floats(1.0, 3.0))))
        elif kind == "jitter":
            stragglers.append(Jitter(draw(st.floats(0.0, 0.3)), draw(st.sampled_from(["lognormal", "normal", "gamma", "exponential"]))))
        elif kind == "stall_every":
            stragglers.append(Stall(draw(ranks), draw(st.floats(0.001, 0.1)), every=draw(st.integers(1, 3))))
        elif kind == "stall_p":
            stragglers.append(Stall(draw(ranks), draw(st.floats(0.001, 0.1)), probability=draw(st.floats(0, 1))))
        elif kind == "throttle":
            rs = tuple(r for r in draw(ranks) if r not in throttled)
            if rs:
                throttled.update(rs)
                stragglers.append(Throttle(rs, draw(st.floats(0.01, 0.3)), draw(st.floats(0.01, 0.3)),
                                           draw(st.floats(0.2, 1.0)), draw(st.floats(0, 0.3))))
        elif draw(st.booleans()):
            stragglers.append(SlowLink(draw(st.floats(0.05, 1.0)), rank=draw(rank)))
        else:
            stragglers.append(SlowLink(draw(st.floats(0.05, 1.0)), node=draw(st.integers(0, nodes - 1))))
    cap = draw(st.sampled_from([2e6, 5e6, 25e6]))
    sharding = draw(st.sampled_from(["none", "zero2", "fsdp"]))
    costs = draw(st.one_of(st.just(NO_DDP_COSTS), st.just(DDPCosts()), st.builds(
        DDPCosts, bucket_overhead=st.floats(0, 2e-3), memory_bandwidth=st.floats(1e9, 2e12),
        gradient_as_bucket_view=st.booleans(), overlap_slowdown=st.floats(0, 2))))
    return make_scenario(
        sharding=sharding, costs=costs,
        nodes=nodes, gpus_per_node=gpn,
        parameters=draw(st.integers(1, 5_000_000)),
        forward=draw(st.floats(0.001, 0.1)), backward=draw(st.floats(0.001, 0.2)), optimizer=draw(st.floats(0, 0.02)),
        intra=(draw(st.floats(1e9, 500e9)), draw(st.floats(0, 1e-5))),
        inter=(draw(st.floats(1e8, 50e9)), draw(st.floats(0, 5e-5))),
        bucket_cap=cap, first_bucket=draw(st.sampled_from([0.5e6, 1e6, cap])),
        overlap=draw(st.booleans()), accumulation=draw(st.integers(1, 3)) if sharding == "none" else 1,
        steps=draw(st.integers(1, 4)), seed=draw(st.integers(0, 2**31)), stragglers=stragglers,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_scenarios())
def test_engine_equals_per_chunk_reference(sc):
    fast = simulate(sc).rank_end
    slow = ReferenceModel(sc).run()
    np.testing.assert_allclose(fast, slow, rtol=1e-9)


@pytest.mark.parametrize("algorithm, model", [("tree", "alpha-beta"), ("hierarchical", "alpha-beta"),
                                              ("halving_doubling", "alpha-beta"), ("auto", "alpha-beta"),
                                              ("ring", "nccl-2.19"), ("tree", "nccl-2.30")])
def test_engine_runs_every_algorithm_from_the_scenario(algorithm, model):
    base = make_scenario(nodes=4, gpus_per_node=4, parameters=50_000_000, stragglers=[Jitter(0.05)], steps=4, **ONE_BUCKET)
    sc = replace(base, collective=Collective(algorithm=algorithm, model=model))
    ring = simulate(base)
    other = simulate(sc)
    assert np.all(other.step_time > 0.15)  # never faster than compute
    assert not np.allclose(other.step_time, ring.step_time)  # the algorithm matters
    # the engine's kernel is the registry's kernel for that algorithm and model on the scenario's fabric
    launch = np.linspace(0.0, 0.01, 16)
    expected = make_kernel(algorithm, scenario_fabric(sc), 200e6, model).finish_times(launch)
    np.testing.assert_allclose(Engine(sc).kernels[0].finish_times(launch), expected, rtol=1e-12)


def test_ring_and_auto_picking_the_ring_agree_rank_by_rank():
    """1 node x 4 GPUs, slow_link on rank 1: the ring's hops and auto's ring are one fabric's."""
    B = 2.0 ** 38  # powers of two: the ring and halving-doubling tie exactly, and ties go to the ring
    sc = make_scenario(nodes=1, gpus_per_node=4, parameters=2 ** 24, intra=(B, 0.0), steps=6, seed=3,
                       stragglers=[SlowLink(0.5, rank=1), Jitter(0.1)], **ONE_BUCKET)
    auto = replace(sc, collective=Collective(algorithm="auto"))
    assert Engine(auto).kernels[0].chosen == "ring"
    ring_run, auto_run = simulate(sc), simulate(auto)
    np.testing.assert_array_equal(ring_run.rank_end, auto_run.rank_end)
    np.testing.assert_array_equal(ring_run.rank_comm_end, auto_run.rank_comm_end)
    # and the slow link is the hop 1 -> 2 only: the hop 0 -> 1 runs at full speed
    launch = np.array([0.0, 0.0, 0.0, 0.0])
    t = 2 ** 26 / 4 / B  # one step of S/n bytes at full speed
    k = Engine(sc).kernels[0]
    np.testing.assert_array_equal(k.hop_time, [t, t, 2 * t, t])
    assert k.finish_times(launch).max() == 6 * 2 * t


# -- exact event logs (SimPy style): every point the engine's clock advances to -------------

def _two_ranks(**kw):
    """1 node x 2 GPUs, no latency, S = 4 MiB at 32 MiB/s: an all-reduce step (S/2 over a hop)
    takes 1/16 s; forward 0.25 s, backward 0.5 s, optimizer 0.125 s (all exact in binary)."""
    args = dict(nodes=1, gpus_per_node=2, parameters=2 ** 20, forward=0.25, backward=0.5, optimizer=0.125,
                intra=(2.0 ** 25, 0.0), steps=3)
    args.update(kw)
    return make_scenario(**args)


def test_event_log_one_bucket():
    log = []
    r = simulate(_two_ranks(**ONE_BUCKET), log=log)
    # backward ends at 0.75, the all-reduce takes 2 x 1/16, the optimizer 0.125; step 1 repeats
    # step 0, so the engine stops stepping and fills step 2 in (not logged)
    assert log == [(0.875, 0, "all_reduce 0"), (1.0, 0, "end"), (1.875, 1, "all_reduce 0"), (2.0, 1, "end")]
    assert r.rank_end.tolist() == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]] and r.steps_simulated == 2


def test_event_log_two_buckets_overlapping_backward_with_a_slow_rank():
    log = []
    sc = _two_ranks(first_bucket=2 ** 21, bucket_cap=2 ** 21, overlap=True, steps=5,
                    stragglers=[SlowRank((1,), 2.0)])
    r = simulate(sc, log=log)
    # each all-reduce: 2 steps of 1/32. Step 0: rank 1 (twice as slow) has bucket 0 ready at 1.0
    # and bucket 1 at 1.5; its optimizer ends at 1.8125, rank 0's at 1.6875. No barrier: step 1
    # starts on each rank when it is done, and is a repeat of step 0.
    assert log == [(1.0625, 0, "all_reduce 0"), (1.5625, 0, "all_reduce 1"), (1.8125, 0, "end"),
                   (2.875, 1, "all_reduce 0"), (3.375, 1, "all_reduce 1"), (3.625, 1, "end")]
    assert r.rank_end[:, 0].tolist() == [1.6875 + 1.8125 * k for k in range(5)]
    assert r.last_rank[0].tolist() == [1, 1]


def test_event_log_zero2():
    log = []
    simulate(_two_ranks(sharding="zero2", steps=1, **ONE_BUCKET), log=log)
    # a reduce-scatter (1 step of 1/16) after backward, the 1/2 optimizer, an all-gather (1/16)
    assert log == [(0.8125, 0, "reduce_scatter 0"), (0.9375, 0, "all_gather 1"), (0.9375, 0, "end")]


def test_the_engine_plans_one_kernel_per_kind_and_size():
    sc = make_scenario(sharding="fsdp", parameters=20_000_000, bucket_cap=25e6, first_bucket=1e6)
    e = Engine(sc)
    assert len(e.kernels) == len(e.ops)
    distinct = {id(k) for k in e.kernels}
    assert len(distinct) == len({(op.kind, e.buckets[op.bucket]) for op in e.ops}) == 6  # 3 sizes x 2 kinds
    assert all(k.kind == op.kind for k, op in zip(e.kernels, e.ops))


# -- per-rank records only for the ranks asked for -------------------------------------------

@pytest.mark.parametrize("sharding", ["none", "zero2", "fsdp"])
def test_kept_ranks_are_the_full_runs_columns_and_aggregates_do_not_change(sharding):
    sc = make_scenario(nodes=2, gpus_per_node=4, parameters=20_000_000, steps=5, seed=2, sharding=sharding,
                       stragglers=[Jitter(0.1), Stall((3,), 0.01, every=2), Throttle((5,), 0.3, 0.3, 0.5)])
    full = simulate(sc)
    for kept in (np.arange(0), np.array([6, 1]), np.arange(8)):
        part = simulate(sc, ranks=kept)
        np.testing.assert_array_equal(part.ranks, kept)
        for name in ("rank_end", "rank_backward_end", "rank_comm_end", "rank_stall", "rank_busy"):
            np.testing.assert_array_equal(getattr(part, name), getattr(full, name)[:, kept])
        for name in ("step_start", "step_end", "last_rank", "launch_spread", "comm_time"):
            np.testing.assert_array_equal(getattr(part, name), getattr(full, name))
    assert summary_json(summarize(sc, simulate(sc, ranks=np.arange(0)), simulate(sc.without_stragglers(), ranks=[]))) \
        == summary_json(summarize(sc, full, simulate(sc.without_stragglers())))


def test_steady_state_repeats_fill_kept_ranks_and_step_ends():
    sc = make_scenario(nodes=1, gpus_per_node=2, steps=6, stragglers=[SlowRank((1,), 2.0)])
    full, none = simulate(sc), simulate(sc, ranks=[])
    assert full.steps_simulated < sc.steps  # the deterministic run stopped stepping early
    np.testing.assert_array_equal(none.step_end, full.rank_end.max(axis=1))
    assert none.rank_end.shape == (6, 0)


def test_kept_ranks_out_of_range_are_refused():
    with pytest.raises(ValueError, match="ranks must lie in"):
        simulate(make_scenario(nodes=1, gpus_per_node=2, steps=1), ranks=[2])


# -- DDP's own costs (commsim/sim/ddp_costs.py) -------------------------------------------------

def _two_ranks_two_buckets(costs, steps=3, **kw):
    """2 ranks, two 1 MB buckets (ring all-reduce 1 ms each), forward 2 ms, backward 4 ms, optimizer 1 ms."""
    return make_scenario(nodes=2, gpus_per_node=1, parameters=500_000, forward=2e-3, backward=4e-3, optimizer=1e-3,
                         inter=(1e9, 0.0), bucket_cap=1e6, first_bucket=1e6, steps=steps, costs=costs, **kw)


def test_ddp_costs_two_ranks_two_buckets_by_hand():
    costs = DDPCosts(bucket_overhead=0.1e-3, memory_bandwidth=1e10, gradient_as_bucket_view=False, overlap_slowdown=0.5)
    ar = ring_allreduce_time(1e6, 2, 0.0, 1e9)
    assert ar == pytest.approx(1e-3, rel=1e-12)
    copy = 2 * 1e6 / 1e10  # read + write of one bucket: 0.2 ms
    # forward 0-2 ms, the first half of backward 2-4 ms, bucket 0 copied in by 4.2 ms, issued at 4.3 ms
    # (host cost), all-reduced 4.3-5.3 ms; the second half of backward starts at 4.2 ms: 0.1 ms at full
    # rate, then 1 ms at 1/1.5 of it while bucket 0 is reduced, the rest at full rate
    issue0 = 4e-3 + copy + 0.1e-3
    backward_end = issue0 + ar + (2e-3 - 0.1e-3 - ar / 1.5)
    issue1 = backward_end + copy + 0.1e-3
    comm_end = issue1 + ar
    step = comm_end + 2 * 2e6 / 1e10 + 1e-3  # copy back of both buckets, optimizer
    r = simulate(_two_ranks_two_buckets(costs))
    assert backward_end == pytest.approx(6.5333333e-3, rel=1e-7)
    np.testing.assert_allclose(r.rank_backward_end[0], backward_end, rtol=1e-12)
    np.testing.assert_allclose(r.rank_comm_end[0], comm_end, rtol=1e-12)
    np.testing.assert_allclose(r.step_time, step, rtol=1e-12)
    # busy is the compute at its rate (2 + 4 + 1 ms): the copies and the slowdown count as waiting
    np.testing.assert_allclose(r.rank_busy, 7e-3, rtol=1e-12)
    # without the costs: 2 + 4 ms, the last all-reduce 1 ms, the optimizer 1 ms
    np.testing.assert_allclose(simulate(_two_ranks_two_buckets(NO_DDP_COSTS)).step_time, 8e-3, rtol=1e-12)


def test_ddp_costs_stretch_a_throttled_rank_in_its_work_units():
    # rank 1 runs at half clock from 3 ms for 10 ms: the second half of its backward (from 4.2 ms)
    # is half as fast, and 1/1.5 of that while bucket 0 is reduced
    costs = DDPCosts(bucket_overhead=0.1e-3, memory_bandwidth=1e10, gradient_as_bucket_view=False, overlap_slowdown=0.5)
    r = simulate(_two_ranks_two_buckets(costs, stragglers=[Throttle((1,), 3e-3, 10e-3, 0.5)], steps=1))
    # rank 1: 2 ms forward, then 1 ms of backward at full clock (2-3 ms), 1 ms of work at half clock: 3-5 ms
    first = 5e-3
    issue0 = first + 0.2e-3 + 0.1e-3
    # second half (2 ms of work) from 5.2 ms: 0.1 ms at half clock (0.05 work), 1 ms at 0.5/1.5 (1/3 work),
    # then the rest (2 - 0.05 - 1/3 ms) at half clock
    end = issue0 + 1e-3 + (2e-3 - 0.05e-3 - 1e-3 / 3) / 0.5
    assert r.rank_backward_end[0, 1] == pytest.approx(end, rel=1e-12)


def test_ddp_costs_off_run_the_schedule_from_before_the_costs(monkeypatch):
    """All costs zero through the charged schedule equals the schedule without it (to rounding)."""
    sc = make_scenario(nodes=2, gpus_per_node=3, parameters=3_000_000, bucket_cap=2e6, steps=6,
                       stragglers=[Jitter(0.1), Throttle((2,), 0.02, 0.05, 0.4, 0.01), Stall((4,), 0.01, every=2)])
    assert not charges(sc.ddp.costs, sc.world_size)
    before = simulate(sc)
    monkeypatch.setattr(engine_module, "charges", lambda costs, n: n > 1)
    charged = simulate(sc)
    for field in ("rank_end", "rank_backward_end", "rank_comm_end", "rank_busy"):
        np.testing.assert_allclose(getattr(charged, field), getattr(before, field), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_scenario_file_with_its_costs_off_gives_the_cost_free_json(path):
    off = load_scenario(path, COSTS_OFF)
    assert not charges(off.ddp.costs, off.world_size)
    default = load_scenario(path)
    assert charges(default.ddp.costs, default.world_size)  # the literature's defaults are on
    assert summary_json(summarize(off)) == summary_json(summarize(replace(default, ddp=replace(default.ddp, costs=NO_DDP_COSTS))))


def test_ddp_costs_make_1mb_buckets_slower_than_25mb_where_measured():
    """The published DDP benchmark's regime (ResNet-50-sized gradients, 2 DGX-1 nodes of 8 V100, 4 x 100 Gb/s
    per node): measured, 1 MB buckets are slower than 25 MB; without a per-bucket cost the model says faster."""
    kw = dict(nodes=2, gpus_per_node=8, parameters=25_600_000, forward=0.027, backward=0.053, optimizer=0.002,
              intra=(150e9, 3.4e-6), inter=(50e9, 14e-6), first_bucket=1e6, steps=3)
    v100 = DDPCosts(memory_bandwidth=900e9)  # V100 SXM2 HBM2, 900 GB/s (datasheet)
    small, large = (simulate(make_scenario(bucket_cap=cap, costs=v100, **kw)).step_time.mean() for cap in (1e6, 25e6))
    assert small > large * 1.005
    small0, large0 = (simulate(make_scenario(bucket_cap=cap, **kw)).step_time.mean() for cap in (1e6, 25e6))
    assert small0 < large0
    assert large > large0  # and the costs make the step longer


def test_ddp_costs_same_scenario_same_bytes():
    kw = dict(stragglers=[Jitter(0.05), Throttle((3,), 0.02, 0.03, 0.5)], steps=6, costs=DDPCosts())
    a, b = make_scenario(seed=3, **kw), make_scenario(seed=3, **kw)
    assert summary_json(summarize(a)) == summary_json(summarize(b))


@pytest.mark.parametrize("sharding", ["none", "zero2", "fsdp"])
@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("costs", [DDPCosts(), DDPCosts(bucket_overhead=2e-3, memory_bandwidth=1e10, overlap_slowdown=0.5),
                                   DDPCosts(bucket_overhead=0.0, gradient_as_bucket_view=True, overlap_slowdown=2.0)],
                         ids=["defaults", "large", "slowdown-only"])
def test_ddp_costs_engine_equals_reference_for_every_sharding(sharding, overlap, costs):
    sc = make_scenario(nodes=2, gpus_per_node=2, parameters=5_000_000, bucket_cap=5e6, overlap=overlap, sharding=sharding,
                       stragglers=[Jitter(0.1), Throttle((1,), 0.01, 0.02, 0.5, 0.003), Stall((2,), 0.004, every=2)],
                       steps=3, costs=costs)
    np.testing.assert_allclose(simulate(sc).rank_end, ReferenceModel(sc).run(), rtol=1e-9)
    charged, free = (simulate(x).step_end[-1] for x in (sc, replace(sc, ddp=replace(sc.ddp, costs=NO_DDP_COSTS))))
    if overlap or sharding == "fsdp" or costs.bucket_overhead > 0:  # FSDP's prefetched gathers overlap compute
        assert charged > free
    else:  # nothing overlaps communication: a slowdown alone costs nothing
        assert charged == free


@pytest.mark.parametrize("sharding", ["none", "zero2", "fsdp"])
def test_ddp_costs_count_as_waiting_not_compute(sharding):
    """rank_busy is compute at its rate: the same with and without DDP's costs (no throttle here, so
    compute takes the same time wherever it starts); the costs only add to the waiting."""
    sc = make_scenario(nodes=2, gpus_per_node=2, parameters=5_000_000, bucket_cap=5e6, sharding=sharding, steps=4,
                       stragglers=[Jitter(0.1), Stall((2,), 0.004, every=2)],
                       costs=DDPCosts(bucket_overhead=1e-3, memory_bandwidth=1e10, overlap_slowdown=0.5))
    charged, free = simulate(sc), simulate(replace(sc, ddp=replace(sc.ddp, costs=NO_DDP_COSTS)))
    np.testing.assert_allclose(charged.rank_busy, free.rank_busy, rtol=1e-12)
    assert np.all(charged.rank_wait.sum(axis=0) > free.rank_wait.sum(axis=0))


@pytest.mark.parametrize("sharding", ["none", "zero2", "fsdp"])
def test_ddp_costs_honour_an_explicit_bucket_layout(sharding):
    # a real job's layout: the big last bucket (a tied embedding) is ready only at the end of
    # backward; with DDP's costs on, the engine must use these ready points as the reference does
    sizes, ready = (4e6, 6e6, 2e6, 8e6), (0.1, 0.3, 0.35, 1.0)
    sc = make_scenario(nodes=2, gpus_per_node=2, parameters=5_000_000, overlap=True, sharding=sharding,
                       stragglers=[Jitter(0.1), Throttle((1,), 0.01, 0.02, 0.5, 0.003)], steps=3,
                       costs=DDPCosts(bucket_overhead=1e-3, memory_bandwidth=1e10, overlap_slowdown=0.5))
    explicit = replace(sc, ddp=replace(sc.ddp, bucket_sizes=sizes, bucket_ready=ready))
    np.testing.assert_allclose(simulate(explicit).rank_end, ReferenceModel(explicit).run(), rtol=1e-9)
    if sharding == "fsdp":  # FSDP runs per unit; the ready points are DDP's and ZeRO-2's
        return
    uniform = replace(sc, ddp=replace(sc.ddp, bucket_sizes=sizes))  # ready at the bytes' cumulative share
    assert not np.allclose(simulate(explicit).rank_end, simulate(uniform).rank_end)
