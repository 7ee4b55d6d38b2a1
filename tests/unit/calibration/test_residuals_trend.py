"""The measured-residual correction across a switch: a trend three measured sizes long is
carried over the gap, a bump is held; and a network step's floor (proxy step, rendezvous)
that starts binding between two measured sizes is a regime of its own."""

import os
from dataclasses import replace

import numpy as np
import pytest

from commsim.calibration.physical_fit import Measurement, fit_physical
from commsim.calibration.residuals import LINE_TOL, regimes, residual_correction
from commsim.network.system import preset

SIZES = np.array([2.0 ** k for k in range(10, 31, 2)])  # 1 KB .. 1 GB, 4x apart
RING, TREE = ("ring", "Simple"), ("tree", "Simple")


def _gap(i):
    return np.sqrt(SIZES[i] * SIZES[i + 1])


def test_a_trend_three_sizes_long_is_carried_over_the_gap_from_below():
    r = np.array([0.1, 0.3, 0.5, 0.7, -0.2, -0.2, -0.2, -0.2, -0.2, -0.2, -0.2])
    picks = [TREE] * 4 + [RING] * 7
    corr, ok = residual_correction([_gap(3)], [TREE], SIZES, r, picks)
    assert ok[0] and corr[0] == pytest.approx(0.8)  # +0.2 a gap of 4x, +0.1 half way (held: 0.7)


def test_a_trend_three_sizes_long_is_carried_over_the_gap_from_above():
    r = np.array([0.0, 0.0, 0.0, -1.2, -0.9, -0.6, -0.3, 0.0, 0.0, 0.0, 0.0])
    picks = [TREE] * 3 + [RING] * 8
    corr, ok = residual_correction([_gap(2)], [RING], SIZES, r, picks)
    assert ok[0] and corr[0] == pytest.approx(-1.35)  # held: -1.2


def test_a_bump_or_a_short_run_is_held():
    picks = [TREE] * 4 + [RING] * 7
    bump = np.array([0.0, 0.1, 0.6, 0.2, 0, 0, 0, 0, 0, 0, 0])      # not on one line: held
    corr, _ = residual_correction([_gap(3)], [TREE], SIZES, bump, picks)
    assert corr[0] == pytest.approx(0.2)
    near = np.array([0.1, 0.3, 0.5 + 0.99 * LINE_TOL, 0.7, 0, 0, 0, 0, 0, 0, 0])
    corr, _ = residual_correction([_gap(3)], [TREE], SIZES, near, picks)
    assert corr[0] == pytest.approx(0.7 + 0.5 * (0.7 - 0.5 - 0.99 * LINE_TOL))
    far = np.array([0.1, 0.3, 0.5 + 1.01 * LINE_TOL, 0.7, 0, 0, 0, 0, 0, 0, 0])
    corr, _ = residual_correction([_gap(3)], [TREE], SIZES, far, picks)
    assert corr[0] == pytest.approx(0.7)
    short = np.array([0.0, 0.0, 0.5, 0.7, 0, 0, 0, 0, 0, 0, 0])     # two sizes of the regime only
    corr, _ = residual_correction([_gap(3)], [TREE], SIZES, short, [RING] * 2 + [TREE] * 2 + [RING] * 7)
    assert corr[0] == pytest.approx(0.7)


def test_regimes_split_where_a_floor_starts_to_bind():
    """t = max(S / bw, floor): the floor's constant prices the small sizes only."""
    consts = {"bw": 10.0, "net_step_us": 50.0}

    def price(name, f, X):
        c = dict(consts, **{name: consts[name] * f})
        return np.maximum(np.asarray(X) / c["bw"], c["net_step_us"])

    X = np.array([100.0, 400.0, 1000.0, 4000.0])
    keys = regimes([RING] * 4, X, price, names=("net_step_us",))
    assert keys[0] == keys[1] == (RING, frozenset({"net_step_us"}))
    assert keys[2] == keys[3] == (RING, frozenset())
    # a residual measured where the floor binds is not carried into a size where it does not
    r = np.array([0.5, 0.5, -0.1, -0.1])
    corr, ok = residual_correction([700.0], regimes([RING], [700.0], price, names=("net_step_us",)), X, r, keys)
    assert ok[0] and corr[0] == pytest.approx(-0.1)


DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "nccl-tests-multiscale")
LOG = "Polaris-A100_8x4_alcf-nccl2.18-allgather.txt"


@pytest.mark.skipif(not os.path.exists(os.path.join(DATA, LOG)), reason="Polaris log not in tests/data")
def test_polaris_8x4_all_gather_mb_sizes_interpolate_within_10_percent():
    """Every other size of Polaris 8 x 4 all_gather (NCCL 2.18) kept: the model runs ring/LL at
    2 MB and ring/Simple from 4 MB, where the proxy's per-step floor and the rendezvous messages
    price the steps. Each left-out size from 1 MB on is predicted within 10% (the residuals held
    within their regime: across the LL -> Simple switch at 2 MB nothing of the LL side carries)."""
    from commsim.calibration.nccl_tables import load_tables
    lt = load_tables(os.path.join(DATA, LOG), world_size=32)
    (tab,) = lt.tables
    S = np.array([r[0] for r in tab.rows], dtype=float)
    T = np.array([r[1] for r in tab.rows], dtype=float)
    keep = np.arange(S.size) % 2 == 0
    keep[-1] = True
    nominal = replace(preset("polaris"), nccl_version="2.18")
    fit = fit_physical([Measurement("polaris", tab.kind, 8, 4, S[keep], T[keep], "polaris")], nominal)
    p = fit.plan(tab.kind, 8, 4)
    k4 = int(np.flatnonzero(S == 2.0 ** 22)[0])
    assert p.choose(S[[k4 - 1, k4, k4 + 1]]) == [("ring", "LL"), ("ring", "Simple"), ("ring", "Simple")]
    out = ~keep & (S >= 2.0 ** 20)
    got = fit.predict(tab.kind, 8, 4, S[out]).time_us
    assert np.all(np.abs(got / T[out] - 1) < 0.10)
