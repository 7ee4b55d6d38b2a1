"""Compute drawn from measured per-rank samples: rows drawn whole with the seed; E[max] follows."""

import numpy as np
import pytest

from commsim.mitigations.hooked import run_hooked
from commsim.mitigations.sampled import factor_rows, row_picks, sampled_perturbations
from commsim.scenario.spec import SlowRank
from commsim.sim.stragglers import perturbations

from tests.unit.mitigations.helpers import tiny


def test_factor_rows_are_each_sample_over_the_mean_of_all():
    rows = factor_rows([[1.0, 3.0], [2.0, 2.0]])  # rank 0's two samples, rank 1's two
    np.testing.assert_allclose(rows, [[0.5, 1.0], [1.5, 1.0]], rtol=1e-12)


def test_each_step_draws_one_whole_row_with_the_seed():
    sc = tiny(nodes=2, gpus=1, steps=200, seed=3)
    rows = np.array([[1.0, 2.0], [3.0, 0.5], [0.25, 4.0]])
    p = sampled_perturbations(sc, rows)
    for s in range(sc.steps):  # the ranks' factors of a step are one row: measured at one moment
        assert any(np.array_equal(p.factor[s], r) for r in rows)
    assert set(p.picks.tolist()) == {0, 1, 2}
    np.testing.assert_array_equal(p.picks, sampled_perturbations(sc, rows).picks)  # deterministic
    assert not np.array_equal(p.picks, row_picks(4, sc.steps, 3))  # another seed, other draws


def test_rows_multiply_the_scenarios_own_factors():
    sc = tiny(nodes=2, gpus=1, steps=5, stragglers=[SlowRank(ranks=(1,), factor=2.0)])
    p = sampled_perturbations(sc, [[1.0, 3.0]])
    np.testing.assert_allclose(p.factor, np.tile([1.0, 6.0], (5, 1)), rtol=1e-12)
    np.testing.assert_array_equal(p.stall, perturbations(sc).stall)


def test_step_time_is_the_mean_of_the_rows_max_not_the_max_of_the_means():
    # two moments, one rank slow in each (a shared core): the mean factor is 1 on each rank, yet
    # every step waits for the slow one; the plain all-reduce's time is the same in both
    sc = tiny(nodes=2, gpus=1, params=1_000_000, bucket_cap=1e9, first_bucket=1e9, steps=2000, fwd=0.01, bwd=0.02,
              opt=1e-9)
    rows = [[0.5, 1.5], [1.5, 0.5]]
    run = run_hooked(sc, perturb=sampled_perturbations(sc, rows))
    plain = run_hooked(sc).step_time.mean()
    # a step's compute at 1.5 x, whichever rank is slow (the optimizer's 1e-9 aside)
    assert run.step_time.mean() - plain == pytest.approx(0.5 * 0.03, rel=1e-6)


@pytest.mark.parametrize("rows", [[[1.0]], [[1.0, 0.0]], [[1.0, float("nan")]], np.ones((0, 2))])
def test_bad_rows_are_refused(rows):
    with pytest.raises(ValueError):
        sampled_perturbations(tiny(nodes=2, gpus=1), rows)
