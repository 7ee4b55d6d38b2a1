"""Straggler inputs: jitter statistics against theory, the thermal clock, stalls (slow links: test_links.py)."""

import numpy as np
import pytest

from commsim.scenario.spec import Jitter, SlowRank, Stall, Throttle
from commsim.sim.stragglers import RankStreams, ThermalClock, jitter_draws, perturbations
from tests.conftest import make_scenario


@pytest.mark.parametrize("distribution", ["lognormal", "normal", "gamma", "exponential"])
@pytest.mark.parametrize("cv", [0.05, 0.3])
def test_jitter_has_mean_one_and_requested_cv(distribution, cv):
    x = jitter_draws(RankStreams(1, 0, np.arange(200_000)), distribution, cv, 3)
    # standard error of the mean is cv/sqrt(N) ~ 7e-4 at cv = 0.3: allow 5 sigma
    assert x.mean() == pytest.approx(1.0, abs=5 * cv / np.sqrt(x.size))
    assert x.std() / x.mean() == pytest.approx(cv, rel=0.02)


def test_zero_cv_is_no_jitter():
    assert np.all(jitter_draws(RankStreams(0, 0, range(10)), "gamma", 0.0, 0) == 1.0)


def test_exponential_jitter_needs_cv_at_most_one():
    with pytest.raises(ValueError):
        jitter_draws(RankStreams(0, 0, range(3)), "exponential", 1.5, 0)


def test_same_rank_draws_same_jitter_at_any_scale():
    small = perturbations(make_scenario(nodes=1, gpus_per_node=4, stragglers=[Jitter(0.1)], steps=7, seed=5))
    large = perturbations(make_scenario(nodes=4, gpus_per_node=4, stragglers=[Jitter(0.1)], steps=7, seed=5))
    np.testing.assert_array_equal(small.factor, large.factor[:, :4])
    other_seed = perturbations(make_scenario(nodes=1, gpus_per_node=4, stragglers=[Jitter(0.1)], steps=7, seed=6))
    assert not np.array_equal(small.factor, other_seed.factor)


def test_slow_rank_and_stall_every():
    p = perturbations(make_scenario(steps=6, stragglers=[SlowRank((2,), 1.5), Stall((1,), 0.2, every=3)]))
    assert np.all(p.factor[:, 2] == 1.5) and np.all(np.delete(p.factor, 2, axis=1) == 1.0)
    assert p.stall[:, 1].tolist() == [0, 0, 0.2, 0, 0, 0.2]
    assert p.deterministic_steps is False


def test_stall_probability_frequency():
    p = perturbations(make_scenario(steps=4000, stragglers=[Stall((0,), 0.1, probability=0.25)]))
    hits = (p.stall[:, 0] > 0).mean()
    assert hits == pytest.approx(0.25, abs=5 * np.sqrt(0.25 * 0.75 / 4000))


def test_thermal_clock_against_numeric_integration():
    clock = ThermalClock(heat_up=2.0, throttled_time=1.0, clock_fraction=0.5, phase=0.7)
    dt = 1e-4
    ts = np.arange(0, 20, dt) + dt / 2
    speed = np.where(((ts + 0.7) % 3.0) < 2.0, 1.0, 0.5)
    work = np.cumsum(speed) * dt
    for start, amount in [(0.0, 1.0), (1.1, 2.5), (3.3, 0.2), (5.0, 7.0)]:
        i0 = int(start / dt)
        target = (work[i0 - 1] if i0 else 0.0) + amount
        numeric = ts[np.searchsorted(work, target)]
        assert float(clock.finish(start, amount)) == pytest.approx(numeric, abs=3e-4)


def test_thermal_clock_round_trip_and_average_speed():
    clock = ThermalClock(heat_up=30.0, throttled_time=10.0, clock_fraction=0.4)
    t = np.linspace(0, 500, 1001)
    np.testing.assert_allclose(clock.time_for_work(clock.work_done(t)), t, atol=1e-9)
    assert clock.work_done(40.0) == pytest.approx(30 + 4)


def test_throttle_twice_on_one_rank_is_rejected():
    sc = make_scenario(stragglers=[Throttle((1,), 1, 1, 0.5), Throttle((1,), 2, 2, 0.5)])
    with pytest.raises(ValueError, match="rank 1"):
        perturbations(sc)


@pytest.mark.parametrize("distribution", ["lognormal", "gamma", "exponential", "normal"])
@pytest.mark.parametrize("cv", [0.0, 1e-160, 4.384378151162787e-159, 1e-300])
def test_a_cv_whose_square_underflows_draws_no_spread(distribution, cv):
    # gamma's shape 1/cv^2 is inf once cv^2 is subnormal: the draws must be exactly 1, not NaN
    draws = jitter_draws(RankStreams(0, 0, range(5)), distribution, cv, 0)
    assert draws.tolist() == [1.0] * 5


@pytest.mark.parametrize("distribution", ["lognormal", "normal", "gamma", "exponential"])
def test_jitter_draws_over_steps_of_one_rank_have_the_requested_law(distribution):
    # the stream of one rank across steps (what a run sees) is as well distributed as across ranks
    streams = RankStreams(7, 2, [11])
    x = np.array([jitter_draws(streams, distribution, 0.3, s)[0] for s in range(20_000)])
    assert x.mean() == pytest.approx(1.0, abs=5 * 0.3 / np.sqrt(x.size))
    assert x.std() / x.mean() == pytest.approx(0.3, rel=0.05)


@pytest.mark.parametrize("cv", [1.5, 3.0])
def test_gamma_jitter_with_shape_below_one(cv):
    x = jitter_draws(RankStreams(3, 0, np.arange(200_000)), "gamma", cv, 0)
    assert np.all(x > 0)
    assert x.mean() == pytest.approx(1.0, abs=5 * cv / np.sqrt(x.size))
    assert x.std() / x.mean() == pytest.approx(cv, rel=0.05)


def test_uniforms_are_uniform_and_independent_of_neighbours():
    u = RankStreams(0, 0, np.arange(100_000)).uniform(5)
    assert np.all((u > 0) & (u < 1))
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    expected = len(u) / 20
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 50  # 19 degrees of freedom: p ~ 1e-4
    # adjacent ranks and adjacent counters are uncorrelated
    v = RankStreams(0, 0, np.arange(100_000)).uniform(6)
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.02
    assert abs(np.corrcoef(u, v)[0, 1]) < 0.02


def test_draws_do_not_depend_on_steps_or_entries_around_them():
    short = perturbations(make_scenario(nodes=1, gpus_per_node=4, stragglers=[Jitter(0.1)], steps=3, seed=5))
    long = perturbations(make_scenario(nodes=1, gpus_per_node=4, stragglers=[Jitter(0.1)], steps=9, seed=5))
    np.testing.assert_array_equal(short.factor, long.factor[:3])
    both = perturbations(make_scenario(nodes=1, gpus_per_node=4, stragglers=[Jitter(0.1), Jitter(0.2)], steps=3, seed=5))
    second = perturbations(make_scenario(nodes=1, gpus_per_node=4, stragglers=[SlowRank((0,), 1.0), Jitter(0.2)],
                                         steps=3, seed=5))
    np.testing.assert_allclose(both.factor / short.factor, second.factor, rtol=1e-15)


def test_thermal_clock_float_path_is_bit_identical_to_the_array_path():
    rng = np.random.default_rng(7)
    for i in range(3000):
        params = rng.uniform([0.1, 0.1, 0.05, 0.0], [30.0, 30.0, 1.0, 40.0])
        if i % 2:  # integer parameters, as a YAML file may give them
            params = [int(1 + rng.integers(30)), int(1 + rng.integers(30)), float(params[2]), int(rng.integers(40))]
        clock = ThermalClock(*(p if isinstance(p, int) else float(p) for p in params))
        start, work = float(rng.uniform(0, 1e4 if i % 3 else 50)), float(rng.uniform(0, 20))
        got = clock.finish(start, work)
        assert type(got) is float  # the scalar path, not a 0-d array
        assert got == float(clock.time_for_work(clock.work_done(np.float64(start)) + work))
        assert clock.work_done_float(start) == float(clock.work_done(start))
        assert clock.time_for_work_float(start) == float(clock.time_for_work(start))
