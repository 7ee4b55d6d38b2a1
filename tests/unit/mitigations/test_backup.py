"""Backup workers against order-statistic theory over seeded trials."""

import math

import numpy as np

from commsim.mitigations.backup import aggregation_time, run_backup
from commsim.scenario.spec import Jitter, SlowRank

from tests.unit.mitigations.helpers import tiny


def _lognormal_cdf(x, cv):
    s2 = math.log1p(cv * cv)
    return 0.5 * (1 + math.erf((math.log(x) + s2 / 2) / math.sqrt(2 * s2)))


def expected_order_statistic(k, N, cv):
    """E[X_(k:N)] for iid lognormal X with mean 1 and CV cv: the integral of
    P(X_(k:N) > x) = sum_{j<k} C(N,j) F^j (1-F)^(N-j) over x > 0 (trapezoid on a fine grid)."""
    xs = np.linspace(1e-6, 1 + 12 * cv, 40001)
    F = np.array([_lognormal_cdf(x, cv) for x in xs])
    survival = sum(math.comb(N, j) * F ** j * (1 - F) ** (N - j) for j in range(k))
    return float(np.trapezoid(survival, xs)) + 1e-6


def test_step_time_is_the_nth_order_statistic_of_the_arrivals():
    n, b, cv = 6, 2, 0.2
    work = 0.01 + 0.02
    samples = []
    for seed in range(30):
        sc = tiny(nodes=3, gpus=2, params=1_000_000, steps=200, seed=seed, stragglers=[Jitter(cv=cv)])
        run = run_backup(sc, b)
        samples.append((run.step_time - aggregation_time(sc) - sc.compute.optimizer) / work)
    x = np.concatenate(samples)
    theory = expected_order_statistic(n, n + b, cv)
    stderr = x.std() / math.sqrt(x.size)
    assert abs(x.mean() - theory) < 4 * stderr, (x.mean(), theory, stderr)
    # and it is below the all-n maximum that plain synchronous SGD waits for
    assert theory < expected_order_statistic(n, n, cv)


def test_iid_workers_drop_b_over_n_plus_b_of_their_gradients():
    sc = tiny(nodes=2, gpus=2, steps=4000, stragglers=[Jitter(cv=0.1)])
    frac = run_backup(sc, 1).dropped_fraction
    assert frac.shape == (5,)
    np.testing.assert_allclose(frac, 1 / 5, atol=4 * math.sqrt(0.2 * 0.8 / 4000))
    np.testing.assert_allclose(frac.sum(), 1.0)


def test_a_slow_rank_is_always_the_dropped_one_and_costs_nothing():
    sc = tiny(nodes=2, gpus=2, steps=50, stragglers=[SlowRank(ranks=(1,), factor=3.0)])
    run = run_backup(sc, 1)
    assert run.dropped[:, 1].all() and not run.dropped[:, [0, 2, 3, 4]].any()
    np.testing.assert_allclose(run.step_time, 0.03 + aggregation_time(sc) + 0.001, rtol=1e-12)
    assert run_backup(sc, 0).step_time.mean() > 3 * 0.03
