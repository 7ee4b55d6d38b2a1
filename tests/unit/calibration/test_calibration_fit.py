"""Tests for commsim.calibration.fit: the alpha-beta fit, size ranges, fit errors, and the
refusal of sweeps whose sizes cannot determine the bandwidth."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commsim.calibration import CalibrationError, Measurement, fit_alpha_beta, fit_link, model_time
from commsim.calibration.fit import MIN_BANDWIDTH_SHARE, balance_size, transfer_share

SIZES = [8 * 2**k for k in range(28)]  # 8 B .. 1 GiB, an nccl-tests sweep


def synthetic(alpha, beta, n, sizes=SIZES, noise=None):
    times = np.array([model_time(alpha, beta, s, n) for s in sizes])
    if noise is not None:
        times = times * noise
    return [Measurement(int(s), float(t), n) for s, t in zip(sizes, times)]



def test_fit_recovers_exact_parameters():
    alpha, beta = 5e-6, 25e9
    ms = synthetic(alpha, beta, 8)
    a, b = fit_alpha_beta([m.size_bytes for m in ms], [m.time_s for m in ms], 8)
    assert a == pytest.approx(alpha, rel=1e-9)
    assert b == pytest.approx(beta, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    alpha=st.floats(1e-7, 1e-3),
    beta=st.floats(1e8, 1e12),
    n=st.integers(2, 1024),
)
def test_fit_recovers_parameters_property(alpha, beta, n):
    ms = synthetic(alpha, beta, n)
    a, b = fit_alpha_beta([m.size_bytes for m in ms], [m.time_s for m in ms], n)
    assert a == pytest.approx(alpha, rel=1e-6)
    assert b == pytest.approx(beta, rel=1e-6)


def test_joint_fit_over_several_world_sizes():
    alpha, beta = 2e-6, 10e9
    ms = synthetic(alpha, beta, 4) + synthetic(alpha, beta, 16)
    a, b = fit_alpha_beta([m.size_bytes for m in ms], [m.time_s for m in ms], [m.world_size for m in ms])
    assert (a, b) == (pytest.approx(alpha), pytest.approx(beta))


def test_relative_weighting_fits_small_sizes_too():
    # 10% multiplicative noise that is large at the top sizes: an unweighted fit would follow the
    # big absolute residuals there and get alpha wrong by orders of magnitude; relative does not.
    rng = np.random.default_rng(1)
    noise = 1.0 + 0.05 * rng.standard_normal(len(SIZES))
    ms = synthetic(10e-6, 5e9, 8, noise=noise)
    a, b = fit_alpha_beta([m.size_bytes for m in ms], [m.time_s for m in ms], 8)
    assert a == pytest.approx(10e-6, rel=0.1)
    assert b == pytest.approx(5e9, rel=0.1)
    small = [m for m in ms if m.size_bytes <= 1024]
    for m in small:  # latency-bound sizes are predicted in relative terms too
        assert model_time(a, b, m.size_bytes, 8) == pytest.approx(m.time_s, rel=0.2)


def test_negative_alpha_is_pinned_to_zero():
    # times that are pure bandwidth minus a little: the free fit would give alpha < 0
    sizes = [2**20, 2**21, 2**22]
    times = [s / 1e9 - 1e-6 for s in sizes]
    a, b = fit_alpha_beta(sizes, times, 2)
    assert a == 0.0 and b > 0


@pytest.mark.parametrize(
    "sizes,times,n,msg",
    [
        ([8], [1e-5], 2, "two or more distinct sizes"),
        ([8, 8], [1e-5, 1e-5], 2, "two or more distinct sizes"),
        ([8, 16], [1e-5, 0.0], 2, "> 0"),
        ([8, 16], [1e-5, 1e-5], 1, "world sizes >= 2"),
        ([2**20, 2**30], [1e-3, 1e-4], 4, "do not grow with size"),
    ],
)
def test_fit_rejects_bad_input(sizes, times, n, msg):
    with pytest.raises(CalibrationError, match=msg):
        fit_alpha_beta(sizes, times, n)


def test_fit_error_is_zero_for_exact_model_and_positive_otherwise():
    link = fit_link("flat", synthetic(3e-6, 20e9, 8))
    assert link.fit_error.median_pct == pytest.approx(0.0, abs=1e-6)
    assert link.line_fit_error.median_pct == pytest.approx(0.0, abs=1e-6)
    assert link.fit_error.points == sum(1 for s in SIZES if s >= 2**20)
    assert len(link.ranges) == 1  # a clean line stays one range
    # a plateau the single line cannot follow: busbw halves above 64 MiB
    ms = [Measurement(m.size_bytes, m.time_s * (2 if m.size_bytes > 2**26 else 1), 8)
          for m in synthetic(3e-6, 20e9, 8)]
    link = fit_link("flat", ms)
    assert link.line_fit_error.max_pct > 10
    assert link.fit_error.max_pct < 1  # ... but the size ranges do


def test_ranges_recover_piecewise_model():
    # three "protocols": low latency / low bandwidth, then two higher-bandwidth regimes
    small = synthetic(2e-6, 2e9, 8, sizes=SIZES[:10])
    mid = synthetic(8e-6, 40e9, 8, sizes=SIZES[10:19])
    large = synthetic(30e-6, 120e9, 8, sizes=SIZES[19:])
    link = fit_link("intra_node", small + mid + large)
    got = [(r.min_size_bytes, r.alpha_s, r.beta_Bps) for r in link.ranges]
    want = [(SIZES[0], 2e-6, 2e9), (SIZES[10], 8e-6, 40e9), (SIZES[19], 30e-6, 120e9)]
    assert len(got) == 3
    for g, w in zip(got, want):
        assert g[0] == w[0] and g[1] == pytest.approx(w[1], rel=1e-6) and g[2] == pytest.approx(w[2], rel=1e-6)
    assert link.fit_error.max_pct == pytest.approx(0.0, abs=1e-6)
    # the model path picks the range by size, at any world size
    assert link.range_for(1) is link.ranges[0] and link.range_for(2**40) is link.ranges[2]
    assert link.model_time(2**31, 64) == model_time(30e-6, 120e9, 2**31, 64)


def test_duplicate_measurements_are_merged_by_median():
    ms = [Measurement(2**20, t, 4) for t in (1e-3, 2e-3, 9e-3)] + [Measurement(2**21, 3e-3, 4)]
    link = fit_link("flat", ms)
    assert [(m.size_bytes, m.time_s) for m in link.table] == [(2**20, 2e-3), (2**21, 3e-3)]



def test_fit_rejects_the_constant_time_log():
    # the log that wrote beta = 5.8e17 GB/s: 1M, 2M, 1M bytes, all at 100 us
    with pytest.raises(CalibrationError, match="do not grow with size"):
        fit_alpha_beta([2**20, 2**21, 2**20], [1e-4, 1e-4, 1e-4], 2)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=4, max_value=2**34), min_size=2, max_size=30).filter(
        lambda xs: len(set(xs)) >= 2),
    t=st.floats(min_value=1e-7, max_value=10.0),
    n=st.integers(min_value=2, max_value=1024),
)
def test_fit_rejects_every_constant_time_sweep(sizes, t, n):
    # times that do not grow with size have no bandwidth term; rounding must not invent one
    with pytest.raises(CalibrationError, match="do not grow with size"):
        fit_alpha_beta(sizes, [t] * len(sizes), n)




# --- sweeps whose sizes cannot determine the bandwidth ----------------------------------------


def test_latency_bound_sweep_is_refused_with_the_sizes_to_add():
    # alpha 5 us, B 10 GB/s, 8 ranks: transfer equals latency at S = n alpha B = 400 kB
    alpha, beta, n = 5e-6, 10e9, 8
    assert balance_size(alpha, beta, n) == pytest.approx(400_000)
    small = synthetic(alpha, beta, n, sizes=SIZES[:14])  # 8 B .. 64 KiB: 14% transfer at the top
    with pytest.raises(CalibrationError) as exc:
        fit_link("intra_node", small)
    assert str(exc.value) == (
        "level intra_node: sizes 8 to 65536 B cannot determine the bandwidth: the fitted transfer term is only "
        "14.1% of the time at 65536 B (latency dominates; a fit needs >= 50% at some size); add sizes >= 524288 B, "
        "where the fitted transfer term would equal the latency (a sweep up to 1 GB determines the bandwidth best)"
    )
    link = fit_link("intra_node", small + synthetic(alpha, beta, n, sizes=[524288]))  # as the message says
    assert (link.alpha_s, link.beta_Bps) == (pytest.approx(alpha), pytest.approx(beta))


def test_transfer_share_is_the_models_split():
    alpha, beta, n = 2e-6, 4e9, 4
    for size in (8, 4096, 2**20, 2**30):
        t = model_time(alpha, beta, size, n)
        assert transfer_share(alpha, beta, size, n) == pytest.approx((t - 2 * (n - 1) * alpha) / t)
    assert transfer_share(alpha, beta, balance_size(alpha, beta, n), n) == pytest.approx(0.5)
    assert MIN_BANDWIDTH_SHARE == 0.5


@settings(max_examples=150, deadline=None)
@given(alpha=st.floats(1e-7, 1e-3), beta=st.floats(1e8, 1e12), n=st.integers(2, 512), top=st.integers(4, 27))
def test_refused_exactly_when_no_size_is_transfer_dominated(alpha, beta, n, top):
    """Exact model data: refused iff the largest size's transfer share is under 50%; then the
    suggested size, added, gives a fit that is accepted and recovers the parameters (where the
    transfer term is under the times' rounding, the refusal says they do not grow)."""
    sizes = SIZES[:top + 1]
    ms = synthetic(alpha, beta, n, sizes=sizes)
    share = transfer_share(alpha, beta, sizes[-1], n)
    if abs(share - MIN_BANDWIDTH_SHARE) < 1e-6:
        return  # on the boundary the fit's rounding decides
    if share >= MIN_BANDWIDTH_SHARE:
        fit_link("flat", ms)
        return
    with pytest.raises(CalibrationError, match="cannot determine the bandwidth|do not grow with size") as exc:
        fit_link("flat", ms)
    if share < 1e-5:  # below float rounding of the times: no slope at all
        return
    need = int(re.search(r"add sizes >= (\d+) B", str(exc.value)).group(1))
    assert need >= balance_size(alpha, beta, n) * (1 - 1e-6) and need & (need - 1) == 0
    link = fit_link("flat", ms + synthetic(alpha, beta, n, sizes=[need]))
    assert link.beta_Bps == pytest.approx(beta, rel=1e-6)


def test_constant_times_name_the_level_and_sizes():
    with pytest.raises(CalibrationError, match=r"^level flat: sizes 8 to 32 B: all-reduce times do not grow with size"):
        fit_link("flat", [Measurement(s, 1e-5, 2) for s in (8, 16, 32)])
