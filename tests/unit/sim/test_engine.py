"""The engine: closed forms, straggler effects, statistics against theory, and the reference model."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commsim.network.costs import ring_allreduce_time
from commsim.sim.engine import simulate
from commsim.sim.reference import ReferenceModel
from commsim.analysis.report import summarize
from commsim.scenario.spec import Jitter, SlowLink, SlowRank, Stall, Throttle
from commsim.output.run_files import summary_json
from tests.conftest import make_scenario

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
    return make_scenario(
        sharding=sharding,
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
    from dataclasses import replace

    from commsim.scenario.spec import Collective

    base = make_scenario(nodes=4, gpus_per_node=4, parameters=50_000_000, stragglers=[Jitter(0.05)], steps=4, **ONE_BUCKET)
    sc = replace(base, collective=Collective(algorithm=algorithm, model=model))
    ring = simulate(base)
    other = simulate(sc)
    assert np.all(other.step_time > 0.15)  # never faster than compute
    assert not np.allclose(other.step_time, ring.step_time)  # the algorithm matters
    # the engine's kernel is the collectives package's kernel for that algorithm and model
    from commsim.sim.links import scenario_fabric
    from commsim.collectives.kernels import make_kernel

    launch = np.linspace(0.0, 0.01, 16)
    expected = make_kernel(algorithm, scenario_fabric(sc), 200e6, model).finish_times(launch)
    from commsim.sim.engine import Engine

    np.testing.assert_allclose(Engine(sc).kernels[0].finish_times(launch), expected, rtol=1e-12)
