"""Blame of a simulated run from the engine's recorded arrivals (simulate(collectives=True)): exact."""

import numpy as np
import pytest

from commsim.analysis import blame as blame_module
from commsim.analysis.blame import blame_run, records_every_collective, simulate_for_blame
from commsim.scenario.spec import Jitter, SlowRank, Stall
from commsim.sim.engine import simulate
from tests.conftest import make_scenario, replace


def _two_stalls(steps=6):
    # one node (every hop alike: all ranks end each all-reduce together and start the next step
    # together); rank 1 pauses 50 ms before every forward, rank 2 20 ms
    return make_scenario(nodes=1, gpus_per_node=4, parameters=20_000_000, steps=steps,
                         stragglers=[Stall((1,), 0.05, every=1), Stall((2,), 0.02, every=1)])


def test_stalled_rank_is_blamed_with_the_exact_lateness():
    sc = _two_stalls()
    rep = blame_run(simulate(sc, collectives=True))
    rows = rep["per_collective"]
    assert len(rows) == sc.steps * 5  # 5 buckets a step
    # rank 1 issues every bucket 50 ms after ranks 0 and 3 and 30 ms after rank 2: its lateness
    # is 30 ms (last minus second-latest), the others' wait 50 + 50 + 30 ms
    assert all(r["last_rank"] == 1 and r["late"] for r in rows)
    np.testing.assert_allclose([r["lateness_s"] for r in rows], 0.03, rtol=1e-9)
    np.testing.assert_allclose([r["waited_on_s"] for r in rows], 0.13, rtol=1e-9)
    np.testing.assert_allclose(rows[0]["arrival_s"], [0.0, 0.05, 0.02, 0.0], atol=1e-12)
    assert [c["rank"] for c in rep["culprits"]] == [1]
    assert rep["culprits"][0]["delay_estimate_s"] == pytest.approx(0.03, rel=1e-9)
    assert all(st["set_by"] == "rank" and st["rank"] == 1 for st in rep["per_step"])
    assert "exact" in rep["notes"][0]


def test_lateness_is_the_engines_last_minus_second_latest_issue():
    sc = make_scenario(nodes=2, gpus_per_node=4, parameters=20_000_000, steps=8, seed=3,
                       stragglers=[SlowRank((6,), 1.3), Jitter(0.02)])
    result = simulate(sc, collectives=True)
    rep = blame_run(result)
    issue = np.sort(result.coll_issue.reshape(-1, sc.world_size), axis=1)
    np.testing.assert_allclose([r["lateness_s"] for r in rep["per_collective"]], issue[:, -1] - issue[:, -2],
                               rtol=1e-9)
    assert [c["rank"] for c in rep["culprits"]] == [6]


def test_without_records_blame_falls_back_to_the_spread_and_says_so():
    sc = _two_stalls()
    rep = blame_run(simulate(sc))
    # the engine's aggregate: last minus first issue, 50 ms; the wait an upper bound 3 x 50 ms
    np.testing.assert_allclose([r["lateness_s"] for r in rep["per_collective"]], 0.05, rtol=1e-9)
    np.testing.assert_allclose([r["waited_on_s"] for r in rep["per_collective"]], 0.15, rtol=1e-9)
    assert "without per-collective records" in rep["notes"][0]


def test_simulate_for_blame_records_only_what_fits(monkeypatch):
    sc = _two_stalls(steps=3)
    result, baseline = simulate_for_blame(sc)
    assert result.coll_issue.shape == (3, 5, 4) and baseline.rank_end.shape == (3, 0)
    assert records_every_collective(sc)
    monkeypatch.setattr(blame_module, "MAX_RECORDED", 3 * 5 * 4 - 1)
    assert not records_every_collective(sc)
    result, _ = simulate_for_blame(sc)
    assert result.coll_issue is None


def test_simulated_run_without_stragglers_blames_nobody_from_records():
    sc = make_scenario(nodes=2, gpus_per_node=4, steps=6)
    rep = blame_run(simulate(sc, collectives=True))
    assert rep["culprits"] == [] and not any(c["late"] for c in rep["per_collective"])
    # with jitter every rank is sometimes last: no culprit either
    jit = blame_run(simulate(replace(sc, steps=30, stragglers=(Jitter(0.05),)), collectives=True))
    assert jit["culprits"] == []
