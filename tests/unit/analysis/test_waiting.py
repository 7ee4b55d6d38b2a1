"""The per-rank waiting split: exposed communication (the straggler-free baseline's waiting)
and waiting on late ranks, against the summary's exposed_comm_s and straggler_cost_s."""

from __future__ import annotations

import numpy as np
import pytest

from commsim.analysis.report import summarize
from commsim.analysis.waiting import waiting_split
from commsim.scenario.loader import load_scenario
from commsim.scenario.spec import Jitter, SlowRank
from commsim.sim.engine import simulate
from tests.conftest import make_scenario


def run(sc):
    result, baseline = simulate(sc), simulate(sc.without_stragglers())
    return result, baseline, summarize(sc, result, baseline)


def test_a_slow_rank_costs_every_other_rank_exactly_the_straggler_cost():
    """Deterministic slow rank: each healthy rank's compute is the baseline's, so once the run
    is in its steady state (from the second step: in the first, the ranks end the step apart
    by the slow rank's longer optimizer) what it waits beyond the baseline is the step's
    extra duration, the straggler cost, to rounding."""
    sc = make_scenario(nodes=2, gpus_per_node=4, steps=6, stragglers=[SlowRank((3,), 1.5)])
    result, baseline, summary = run(sc)
    split = waiting_split(result, summary, baseline)
    cost = summary["straggler_cost_s"]
    assert cost > 0.01
    healthy = [r for r in range(8) if r != 3]
    steady = split.total[1:, healthy] - np.asarray(baseline.rank_wait)[1:, healthy]
    assert steady == pytest.approx(np.full((5, 7), cost), rel=1e-9)
    # over all steps, the first one's offset is spread over the 6 steps
    assert split.straggler_mean[healthy] == pytest.approx(np.full(7, cost), rel=0.02)
    # the slow rank waits less than the baseline did: its own compute took the time
    assert np.all(split.straggler[:, 3] < 0)
    # the two parts add up to what the rank waited
    assert split.exposed_comm[None, :] + split.straggler == pytest.approx(np.asarray(result.rank_wait))
    # the baseline's steady-state waiting is the summary's exposed communication; its first
    # step (ring skew between ranks) moves the 6-step mean by under 5%
    assert np.asarray(baseline.rank_wait)[1:] == pytest.approx(np.full((5, 8), summary["exposed_comm_s"]), rel=1e-6)
    assert split.mean_exposed_comm == pytest.approx(summary["exposed_comm_s"], rel=0.05)


def test_without_the_baseline_the_summary_exposed_comm_is_used():
    sc = make_scenario(steps=6, stragglers=[SlowRank((1,), 1.3)])
    result, baseline, summary = run(sc)
    split = waiting_split(result, summary)
    assert split.exposed_source == "summary exposed_comm_s"
    assert np.all(split.exposed_comm == summary["exposed_comm_s"])
    # every rank runs the same compute in the baseline: the two splits differ only by the
    # ring's skew between ranks in the first step, spread over the steps
    with_base = waiting_split(result, summary, baseline)
    assert split.straggler_mean == pytest.approx(with_base.straggler_mean, abs=0.02 * summary["straggler_cost_s"])


def test_jitter_straggler_waiting_averages_to_the_straggler_cost():
    """With jitter on every rank a rank's own draw has mean 1: its waiting beyond the baseline
    averages to the straggler cost over steps and ranks (the cost, not exposed + cost)."""
    sc = make_scenario(nodes=4, gpus_per_node=4, steps=40, seed=3, stragglers=[Jitter(0.05)])
    result, baseline, summary = run(sc)
    split = waiting_split(result, summary, baseline)
    cost, exposed = summary["straggler_cost_s"], summary["exposed_comm_s"]
    # own-jitter noise of the mean: cv * compute / sqrt(steps * ranks)
    noise = 0.05 * summary["compute_time_s"] / np.sqrt(40 * 16)
    assert abs(split.mean_straggler_wait - cost) < 4 * noise
    assert split.mean_exposed_comm == pytest.approx(exposed, rel=0.01)
    assert np.asarray(result.rank_wait).mean() == pytest.approx(exposed + cost, rel=0.05)
    low, high = split.straggler_band()
    assert np.all(low <= split.straggler_mean) and np.all(split.straggler_mean <= high)


def test_scaling_1024_waiting_is_637_ms_of_exposed_communication_and_17_9_ms_of_straggler_cost():
    """The issue's figure: about 650 ms of waiting at 1,024 ranks, of which the straggler cost
    is 17.9 ms (17.6 before DDP's own costs); the split must show the two apart."""
    sc = load_scenario("scenarios/scaling_1024.yaml")
    result, baseline, summary = run(sc)
    split = waiting_split(result, summary, baseline)
    assert np.asarray(result.rank_wait).mean() == pytest.approx(0.655, abs=0.002)
    assert split.mean_straggler_wait == pytest.approx(summary["straggler_cost_s"], rel=0.01)
    assert split.mean_straggler_wait == pytest.approx(0.0179, abs=0.0005)
    assert split.mean_exposed_comm == pytest.approx(summary["exposed_comm_s"], rel=1e-6)
    assert split.mean_exposed_comm == pytest.approx(0.637, abs=0.001)


def test_baseline_of_another_size_is_refused():
    a = make_scenario(steps=2)
    b = make_scenario(nodes=1, steps=2)
    result, _, summary = run(a)
    with pytest.raises(ValueError, match="ranks"):
        waiting_split(result, summary, simulate(b))
