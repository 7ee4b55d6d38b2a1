"""commsim.analysis.ddp_fit.decide_paired_sign: the sign of paired differences is decided only
when the exact sign test and the bootstrap interval of the median both exclude no effect."""

import math

import numpy as np
import pytest

from commsim.analysis.ddp_fit import decide_paired_sign, sign_test_p


def test_sign_test_exact_small_cases():
    assert sign_test_p(6, 6) == pytest.approx(2 / 64)  # all 6 agree: 2 * (1/2)^6
    assert sign_test_p(10, 12) == pytest.approx(2 * (1 + 12 + 66) / 4096)
    assert sign_test_p(0, 6) == sign_test_p(6, 6)  # two-sided: the minority count gives the same
    assert sign_test_p(3, 6) == 1.0 and sign_test_p(0, 0) == 1.0


def test_sign_test_equals_the_binomial_sum():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 30))
        k = int(rng.integers(0, n + 1))
        kk = max(k, n - k)
        want = min(1.0, 2 * sum(math.comb(n, j) for j in range(kk, n + 1)) / 2 ** n)
        assert sign_test_p(k, n) == pytest.approx(want)


def test_a_clear_positive_effect_is_decided():
    rng = np.random.default_rng(0)
    d = 5e-3 + 1e-3 * rng.standard_normal(12)  # effect 5x the noise
    out = decide_paired_sign(d)
    assert out.decided and out.sign == 1 and out.agreeing == 12 and out.p_value == pytest.approx(2 / 4096)
    assert out.interval[0] > 0 and out.interval[0] <= out.median <= out.interval[1]


def test_a_clear_negative_effect_is_decided():
    out = decide_paired_sign([-3.0, -2.5, -4.0, -3.2, -2.9, -3.1, -3.3, -2.7, 0.5])
    assert out.decided and out.sign == -1 and out.agreeing == 8 and out.nonzero == 9


def test_seven_of_eight_is_not_enough():
    out = decide_paired_sign([-3.0, -2.5, -4.0, -3.2, -2.9, -3.1, -3.3, 0.5])
    assert out.p_value == pytest.approx(2 * 9 / 256) and not out.decided


def test_noise_without_effect_is_not_decided():
    out = decide_paired_sign([0.4, -0.3, 0.2, -0.5, 0.1, -0.2, 0.3, -0.1, 0.6, -0.4, 0.05, -0.6])
    assert not out.decided and out.sign == 0
    assert out.interval[0] < 0 < out.interval[1]


def test_false_decisions_under_no_effect_stay_below_the_sign_tests_level():
    # 12 rounds of pure noise: the sign test alone decides with probability
    # P(>= 10 or <= 2 of 12) = 2 * 79 / 4096 = 3.86%; the interval can only lower it
    rng = np.random.default_rng(7)
    trials = 1000
    decided = sum(decide_paired_sign(rng.standard_normal(12), resamples=500, seed=i).decided for i in range(trials))
    p = 2 * 79 / 4096
    assert decided / trials <= p + 3 * math.sqrt(p * (1 - p) / trials)


def test_few_large_rounds_do_not_decide_against_the_sign_test():
    # the median is positive and the interval may exclude 0, but 4 of 6 is no evidence
    out = decide_paired_sign([1.0, 1.1, 0.9, 1.2, -0.1, -0.2])
    assert out.p_value > 0.05 and not out.decided


def test_too_few_rounds_cannot_decide():
    out = decide_paired_sign([1.0, 1.0, 1.0, 1.0])  # 4 of 4: p = 1/8
    assert out.p_value == pytest.approx(0.125) and not out.decided


def test_the_decision_is_reproducible():
    d = [0.3, -0.1, 0.4, 0.2, 0.5, 0.1, 0.2, 0.3, -0.05, 0.25]
    assert decide_paired_sign(d) == decide_paired_sign(d)


def test_no_differences_is_refused():
    with pytest.raises(ValueError):
        decide_paired_sign([])


def test_the_round_bootstrap_widens_the_interval_when_a_rounds_pairs_move_together():
    rng = np.random.default_rng(5)
    burst = np.repeat(rng.standard_normal(8), 10)  # each round's 10 pairs share one load burst
    d = 0.3 + burst + 0.05 * rng.standard_normal(80)
    rounds = np.repeat(np.arange(8), 10).tolist()
    iid, clustered = decide_paired_sign(d), decide_paired_sign(d, rounds=rounds)
    assert iid.median == clustered.median and iid.p_value == clustered.p_value
    width = lambda x: x.interval[1] - x.interval[0]  # noqa: E731
    assert width(clustered) > 2 * width(iid)


def test_rounds_must_label_every_difference():
    with pytest.raises(ValueError):
        decide_paired_sign([1.0, 2.0, 3.0], rounds=[0, 1])
