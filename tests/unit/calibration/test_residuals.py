"""The measured-residual correction: interpolation only within the model's (algorithm,
protocol) regime, held across a switch, none in a regime no adjacent measured size ran."""

import os
from dataclasses import replace

import numpy as np
import pytest

from commsim.calibration.physical_fit import Measurement, fit_physical
from commsim.calibration.residuals import residual_correction
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import preset

SIZES = np.array([2.0 ** k for k in range(10, 31, 2)])  # measured: 1 KB .. 1 GB, 4x apart
RING, TREE = ("ring", "Simple"), ("tree", "LL")


def test_one_regime_is_linear_interpolation_in_log_size():
    rng = np.random.default_rng(3)
    for _ in range(20):
        r = rng.normal(0, 0.3, SIZES.size)
        asked = np.exp(rng.uniform(np.log(SIZES[0]), np.log(SIZES[-1]), 15))
        corr, ok = residual_correction(asked, [RING] * asked.size, SIZES, r, [RING] * SIZES.size)
        assert ok.all()
        np.testing.assert_allclose(corr, np.interp(np.log(asked), np.log(SIZES), r), rtol=0, atol=1e-12)


def test_a_residual_does_not_cross_a_switch_of_the_model_s_pick():
    r = np.array([0.1, 0.1, 0.8, -1.5, -1.5, -1.5, 0, 0, 0, 0, 0])
    picks = [TREE] * 3 + [RING] * 8
    mid = np.sqrt(SIZES[2] * SIZES[3])            # between the last tree size and the first ring one
    corr, ok = residual_correction([mid, mid], [TREE, RING], SIZES, r, picks)
    assert ok.all()
    assert corr.tolist() == [0.8, -1.5]           # each side's own residual, held
    inner = np.sqrt(SIZES[1] * SIZES[2])          # inside the tree run: plain interpolation
    corr, _ = residual_correction([inner], [TREE], SIZES, r, picks)
    assert corr[0] == pytest.approx(0.45)


def test_a_regime_no_adjacent_measured_size_ran_is_not_corrected():
    r = np.linspace(-0.5, 0.5, SIZES.size)
    picks = [TREE] * 5 + [RING] * 6
    mid = np.sqrt(SIZES[4] * SIZES[5])
    corr, ok = residual_correction([mid], [("tree", "Simple")], SIZES, r, picks)
    assert corr[0] == 0.0 and not ok[0]


def test_measured_sizes_take_their_own_residual_and_outside_the_range_nothing():
    r = np.arange(SIZES.size, dtype=float) / 10
    picks = [TREE, RING] * 5 + [TREE]              # alternating: every measured size its own regime
    asked = np.concatenate([SIZES, [SIZES[0] / 2, SIZES[-1] * 2]])
    corr, ok = residual_correction(asked, picks + [TREE, TREE], SIZES, r, picks)
    np.testing.assert_array_equal(corr[:-2], r)
    assert ok[:-2].all() and not ok[-2:].any() and (corr[-2:] == 0).all()


def test_the_measured_sizes_may_come_in_any_order():
    r = np.linspace(0.3, -0.2, SIZES.size)
    picks = [TREE] * 4 + [RING] * 7
    asked = np.sqrt(SIZES[:-1] * SIZES[1:])
    asked_picks = [TREE] * 4 + [RING] * 6
    a = residual_correction(asked, asked_picks, SIZES, r, picks)
    perm = np.random.default_rng(0).permutation(SIZES.size)
    b = residual_correction(asked, asked_picks, SIZES[perm], r[perm], [picks[i] for i in perm])
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_asked_sizes_and_picks_must_match():
    with pytest.raises(ValueError):
        residual_correction([1e3, 2e3], [RING], SIZES, np.zeros(SIZES.size), [RING] * SIZES.size)


# --- through PhysicalFit.predict ---------------------------------------------------------------

def _fit_with_regime_residuals():
    """A synthetic 1 x 8 all_reduce fit whose residuals are +0.4 under one of the model's picks
    and -0.4 under the others: the correction must carry each only within its regime."""
    nominal = replace(preset("dgx-h100"), nccl_version="2.29")
    sizes = np.array([2.0 ** k for k in range(10, 34, 2)])
    t = plan("all_reduce", nominal, 1, 8).time_us(sizes)
    fit = fit_physical([Measurement("synthetic_1x8", "all_reduce", 1, 8, sizes, t, "H100")], nominal)
    p = fit.plan("all_reduce", 1, 8)
    picks = p.choose(sizes)
    first = picks[0]
    r = np.where([g == first for g in picks], 0.4, -0.4)
    (label,) = fit.residuals
    return replace(fit, residuals={label: r}), p, sizes, picks, first


def test_predict_corrects_each_size_with_its_own_regime_s_residual():
    fit, p, sizes, picks, first = _fit_with_regime_residuals()
    assert len(set(picks)) > 1, "the synthetic table must span a switch of the model's pick"
    asked = np.sqrt(sizes[:-1] * sizes[1:])  # every gap between measured sizes, the switch's included
    got = fit.predict("all_reduce", 1, 8, asked).time_us
    raw = p.time_us(asked)
    want = np.where([g == first for g in p.choose(asked)], 0.4, -0.4)
    # the old interpolation averaged +0.4 and -0.4 across the switch (a correction of 0 there)
    np.testing.assert_allclose(np.log(got / raw), want, atol=1e-12)


DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "nccl-tests-multiscale")


@pytest.mark.skipif(not os.path.exists(os.path.join(DATA, "Polaris-A100-defaultenv_8x4_alcf-nccl2.18-allreduce.txt")),
                    reason="Polaris sockets log not in tests/data")
def test_polaris_sockets_128k_takes_the_tree_ll_residual_not_the_tree_simple_one():
    """Every other size of Polaris over sockets, 8 x 4, kept: the model runs tree/LL to 64 KB
    and at 128 KB, tree/Simple from 256 KB. The 256 KB residual (-0.43, tree/Simple) used to
    be averaged into 128 KB (+0.76 at 64 KB): predicted 254 us against 618 measured."""
    from commsim.calibration.nccl_tables import load_tables
    lt = load_tables(os.path.join(DATA, "Polaris-A100-defaultenv_8x4_alcf-nccl2.18-allreduce.txt"), world_size=32)
    (tab,) = lt.tables
    S = np.array([r[0] for r in tab.rows], dtype=float)
    T = np.array([r[1] for r in tab.rows], dtype=float)
    keep = np.arange(S.size) % 2 == 0
    keep[-1] = True
    nominal = replace(preset("polaris-socket"), nccl_version=lt.nccl_version or "2.18")
    fit = fit_physical([Measurement("polaris", tab.kind, 8, 4, S[keep], T[keep], "polaris")], nominal)
    p = fit.plan(tab.kind, 8, 4)
    k128, k64, k256 = (int(np.flatnonzero(S == 2.0 ** e)[0]) for e in (17, 16, 18))
    assert p.choose(S[[k64, k128, k256]]) == [("tree", "LL"), ("tree", "LL"), ("tree", "Simple")]
    got = fit.predict(tab.kind, 8, 4, S[[k128]]).time_us[0]
    (r,) = fit.residuals.values()
    r64 = r[int(np.flatnonzero(S[keep] == S[k64])[0])]
    assert got == pytest.approx(p.time_us(S[[k128]])[0] * np.exp(r64), rel=1e-12)
    # the old rule interpolated across the switch, between the 64 KB and 256 KB residuals
    across = p.time_us(S[[k128]])[0] * np.exp(np.interp(np.log(S[k128]), np.log(S[keep]), r))
    assert abs(T[k128] / got - 1) < abs(T[k128] / across - 1) - 0.1  # 0.48 against 0.72
