"""Blame: exact small cases, the critical-path walk, noise and culprits statistically, simulated runs."""

import math

import numpy as np
import pytest

from commsim.analysis.blame import BlameInput, binomial_tail, blame, blame_run, noise_sigma
from commsim.scenario.spec import Jitter, SlowRank, Stall
from commsim.sim.engine import simulate
from tests.conftest import make_scenario


def one(arrival, end=None, **kw):
    arrival = np.asarray(arrival, dtype=float)
    C = len(arrival)
    return BlameInput(world_size=arrival.shape[1], kind=["all_reduce"] * C, nbytes=np.ones(C),
                      step=np.full(C, -1), arrival=arrival,
                      end=np.full(C, np.nan) if end is None else np.asarray(end, dtype=float), **kw)


def test_last_rank_lateness_and_wait_exactly():
    rep = blame(one([[0.0, 1.0, 4.0, 2.0], [3.0, 0.5, 0.0, 0.0]]))
    a, b = rep["per_collective"]
    assert (a["last_rank"], a["lateness_s"], a["waited_on_s"]) == (2, 2.0, 4.0 + 3.0 + 2.0)
    assert (b["last_rank"], b["lateness_s"], b["waited_on_s"]) == (0, 2.5, 2.5 + 3.0 + 3.0)
    assert a["arrival_s"] == [0.0, 1.0, 4.0, 2.0]


def test_ranks_outside_a_group_are_ignored():
    rep = blame(one([[0.0, np.nan, 1.0], [np.nan, 2.0, 5.0]]))
    assert [c["last_rank"] for c in rep["per_collective"]] == [2, 2]
    assert [c["lateness_s"] for c in rep["per_collective"]] == [1.0, 3.0]


def test_binomial_tail_against_the_sum():
    for n, p in ((10, 0.5), (7, 0.25)):
        for k in range(n + 2):
            want = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))
            assert binomial_tail(k, n, p) == pytest.approx(want)


def _steps(arrival, end, n_steps, per_step, step_end, compute_end, comm_end):
    C = n_steps * per_step
    return BlameInput(world_size=arrival.shape[1], kind=["all_reduce"] * C, nbytes=np.ones(C),
                      step=np.repeat(np.arange(n_steps), per_step), position=np.tile(np.arange(per_step), n_steps),
                      arrival=arrival, end=end, step_end=step_end, compute_end=compute_end, comm_end=comm_end)


def test_critical_path_walks_back_through_a_stream_bound_chain():
    """Step of 3 collectives on 2 ranks: rank 1 arrives late at collective 1, collective 2
    is issued while 1 still runs (stream-bound): the chain starts at 1, rank 1's arrival."""
    arrival = np.array([[0.0, 0.001], [0.002, 0.050], [0.003, 0.051]])
    end = np.array([0.005, 0.060, 0.070])
    inp = _steps(arrival, end, 1, 3, step_end=np.array([[0.08, 0.08]]), compute_end=np.array([[0.01, 0.055]]),
                 comm_end=np.array([[0.07, 0.07]]))
    rep = blame(inp)
    st = rep["per_step"][0]
    assert (st["set_by"], st["rank"], st["collective"], st["chain"]) == ("rank", 1, 1, 2)
    assert st["lateness_s"] == pytest.approx(0.048)


def test_a_balanced_chain_is_communication():
    arrival = np.array([[0.0, 0.0], [0.001, 0.001], [0.002, 0.002]])
    end = np.array([0.010, 0.020, 0.030])
    inp = _steps(arrival, end, 1, 3, np.array([[0.04, 0.04]]), np.array([[0.003, 0.003]]), np.array([[0.03, 0.03]]))
    st = blame(inp)["per_step"][0]
    assert (st["set_by"], st["rank"], st["chain"]) == ("communication", None, 3)


def synthetic_job(rng, n, steps, per_step=6, delay=0.0, who=1, jitter=0.002):
    """Arrivals of a DDP-like job: bucket j at 5 ms * j plus jitter; `who` delayed by
    `delay` from the middle bucket on; collectives take 1 ms, one after another."""
    arrival = np.zeros((steps * per_step, n))
    end = np.zeros(steps * per_step)
    step_end = np.zeros((steps, n))
    compute_end = np.zeros((steps, n))
    t = 0.0
    for s in range(steps):
        prev = -np.inf
        for j in range(per_step):
            c = s * per_step + j
            arrival[c] = t + 0.005 * j + rng.normal(0, jitter, n)
            if j >= per_step // 2:
                arrival[c, who] += delay
            end[c] = max(arrival[c].max(), prev) + 0.001
            prev = end[c]
        compute_end[s] = arrival[s * per_step + per_step - 1]
        step_end[s] = prev + 0.002
        t = prev + 0.003
    return _steps(arrival, end, steps, per_step, step_end, compute_end, step_end - 0.002)


@pytest.mark.parametrize("n", [2, 4, 16])
def test_an_injected_delay_is_named_and_estimated(n):
    rng = np.random.default_rng(n)
    rep = blame(synthetic_job(rng, n, 40, delay=0.030, who=n - 1))
    named = [st["rank"] for st in rep["per_step"] if st["set_by"] == "rank"]
    assert named.count(n - 1) >= 0.95 * 40
    assert [c["rank"] for c in rep["culprits"]] == [n - 1]
    # lateness = delay + (late rank's jitter - the next latest's): within 10% of it
    assert rep["culprits"][0]["delay_estimate_s"] == pytest.approx(0.030, rel=0.10)


@pytest.mark.parametrize("seed", range(20))
def test_no_delay_no_culprit(seed):
    """False alarms: over 20 healthy jobs of 4 ranks (noise only), none names a culprit."""
    rep = blame(synthetic_job(np.random.default_rng(100 + seed), 4, 40))
    assert rep["culprits"] == []
    assert "no rank is late above noise" in rep["verdict"]


def test_noise_sigma_ignores_a_rank_that_is_always_late_at_a_position():
    rng = np.random.default_rng(0)
    inp = synthetic_job(rng, 4, 50, delay=0.030, jitter=0.002)
    # the per-rank offsets' residual spread is the jitter's (about sigma * sqrt(3/4) for 4 ranks)
    assert noise_sigma(inp.arrival, inp.position) == pytest.approx(0.002, rel=0.35)
    # with two ranks and no positions, a delay on half the buckets looks like noise
    two = synthetic_job(np.random.default_rng(1), 2, 50, delay=0.030, jitter=0.002)
    assert noise_sigma(two.arrival, two.position) < 0.003 < 0.010 < noise_sigma(two.arrival, None)


def test_simulated_slow_rank_is_named():
    sc = make_scenario(nodes=1, gpus_per_node=4, steps=10, stragglers=[SlowRank(ranks=(2,), factor=1.3)])
    rep = blame_run(simulate(sc))
    assert [c["rank"] for c in rep["culprits"]] == [2]
    assert all(st["rank"] == 2 for st in rep["per_step"] if st["set_by"] == "rank")
    assert rep["source"] == "simulation"


def test_simulated_run_without_stragglers_blames_nobody():
    rep = blame_run(simulate(make_scenario(nodes=2, gpus_per_node=4, steps=6)))
    assert rep["culprits"] == []
    assert all(not c["late"] for c in rep["per_collective"])


def test_simulated_stall_and_jitter():
    sc = make_scenario(nodes=1, gpus_per_node=8, steps=30,
                       stragglers=[Stall(ranks=(5,), duration=0.5, every=3), Jitter(cv=0.01)])
    rep = blame_run(simulate(sc))
    assert [c["rank"] for c in rep["culprits"]] == [5]
    assert rep["ranks"][5]["steps_named"] >= 10
