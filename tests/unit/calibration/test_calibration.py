"""Tests for commsim.calibration.model: conventions, the alpha-beta fit, size ranges, prediction."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commsim import calibration as cal_mod
from commsim.calibration import model as cal_model
from commsim.calibration.model import (
    Calibration,
    CalibrationError,
    Measurement,
    Provenance,
    algbw,
    busbw,
    fit_alpha_beta,
    fit_link,
    hop_time,
    model_time,
    predict_allreduce_time,
)

SIZES = [8 * 2**k for k in range(28)]  # 8 B .. 1 GiB, an nccl-tests sweep


def synthetic(alpha, beta, n, sizes=SIZES, noise=None):
    times = np.array([model_time(alpha, beta, s, n) for s in sizes])
    if noise is not None:
        times = times * noise
    return [Measurement(int(s), float(t), n) for s, t in zip(sizes, times)]


def make_cal(levels):
    return Calibration(tuple(levels), Provenance(backend="test", world_size=8))


def test_nccl_tests_factors():
    # A100 log row: 134217728 B in 1295.41 us -> algbw 103.61 GB/s, busbw 181.32 GB/s (n=8)
    assert algbw(134217728, 1295.41e-6) / 1e9 == pytest.approx(103.61, abs=0.005)
    assert busbw("all_reduce", 134217728, 1295.41e-6, 8) / 1e9 == pytest.approx(181.32, abs=0.005)
    # two ranks: busbw equals algbw; one rank: no traffic
    assert busbw("all_reduce", 1000, 1.0, 2) == algbw(1000, 1.0)
    assert busbw("all_reduce", 1000, 1.0, 1) == 0.0
    assert Measurement(134217728, 1295.41e-6, 8).busbw / 1e9 == pytest.approx(181.32, abs=0.005)


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


def test_predict_uses_table_inside_and_model_outside():
    alpha, beta = 5e-6, 10e9
    # a measured curve that wanders 0..20% off the model line: distinguishes the two paths
    ms = [Measurement(m.size_bytes, m.time_s * (1.0 + 0.1 * (1 + math.sin(i))), 8)
          for i, m in enumerate(synthetic(alpha, beta, 8, sizes=SIZES[:20]))]
    link = fit_link("intra_node", ms)
    cal = make_cal([link])
    for m in ms:  # exactly the measured time at a measured size
        assert predict_allreduce_time(cal, m.size_bytes, 8) == pytest.approx(m.time_s, rel=1e-12)
    # between two measured sizes: busbw interpolated in log-size
    s0, s1 = ms[10], ms[11]
    mid = int(math.sqrt(s0.size_bytes * s1.size_bytes))
    w = math.log(mid / s0.size_bytes) / math.log(s1.size_bytes / s0.size_bytes)
    bw = (1 - w) * s0.busbw + w * s1.busbw
    assert 0.4 < w < 0.6
    assert predict_allreduce_time(cal, mid, 8) == pytest.approx(mid / (bw * 8 / 14), rel=1e-6)
    # outside the table, or another world size: the fitted model
    big = SIZES[25]
    assert predict_allreduce_time(cal, big, 8) == link.model_time(big, 8)
    assert predict_allreduce_time(cal, 4096, 16) == link.model_time(4096, 16)
    assert predict_allreduce_time(cal, 4096, 1) == 0.0
    assert predict_allreduce_time(cal, 0, 8) == 0.0
    # and the two paths really differ here
    assert predict_allreduce_time(cal, ms[5].size_bytes, 8) != link.model_time(ms[5].size_bytes, 8)


def test_hop_time_times_steps_is_allreduce_time():
    cal = make_cal([fit_link("flat", synthetic(5e-6, 10e9, 4))])
    for size in (1000, 2**20, 2**31):
        assert hop_time(cal, size, 4) * 6 == pytest.approx(predict_allreduce_time(cal, size, 4))


def test_levels_and_default_level():
    intra = fit_link("intra_node", synthetic(1e-6, 100e9, 8))
    inter = fit_link("inter_node", synthetic(10e-6, 10e9, 16))
    cal = make_cal([intra, inter])
    assert cal_mod.default_level(cal) == "inter_node"
    assert predict_allreduce_time(cal, 2**30, 8, "intra_node") < predict_allreduce_time(cal, 2**30, 8)
    with pytest.raises(CalibrationError, match="no link level 'flat'"):
        cal.level("flat")
    with pytest.raises(ValueError, match="cannot be combined"):
        make_cal([intra, fit_link("flat", synthetic(1e-6, 1e9, 2))])


def test_duplicate_measurements_are_merged_by_median():
    ms = [Measurement(2**20, t, 4) for t in (1e-3, 2e-3, 9e-3)] + [Measurement(2**21, 3e-3, 4)]
    link = fit_link("flat", ms)
    assert [(m.size_bytes, m.time_s) for m in link.table] == [(2**20, 2e-3), (2**21, 3e-3)]


def _log_links():
    from pathlib import Path

    from commsim.calibration.nccl_log import load_nccl_log

    links = []
    for p in sorted((Path(__file__).resolve().parents[2] / "data" / "nccl-tests").glob("*.txt")):
        log = load_nccl_log(str(p))
        links.append(fit_link("flat", [Measurement(s, t, log.world_size) for s, t in log.times()]))
    return links


LOG_LINKS = _log_links()


@settings(max_examples=200, deadline=None)
@given(
    which=st.integers(0, len(LOG_LINKS) - 1),
    size=st.floats(1.0, 1e11),
    grow=st.floats(1.0, 100.0),
    n=st.integers(2, 4096),
    more=st.integers(0, 4096),
)
def test_model_is_monotone_in_size_and_ranks(which, size, grow, n, more):
    """A larger message, or more ranks, never costs less: also across size-range boundaries."""
    link = LOG_LINKS[which]
    assert link.model_time(size * grow, n) >= link.model_time(size, n)
    assert link.model_time(size, n + more) >= link.model_time(size, n)


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


def test_model_time_is_the_simulators_ring_formula(monkeypatch):
    # one formula for the ring (commsim.network.costs), not a copy that could drift from it
    from commsim.network import costs

    from commsim.calibration import records

    assert records.ring_allreduce_time is costs.ring_allreduce_time
    for args in [(2e-6, 3e9, 2**20, 8), (0.0, 1e9, 8, 2), (1e-5, 5e10, 2**30, 1)]:
        alpha, beta, size, n = args
        assert model_time(*args) == costs.ring_allreduce_time(size, n, alpha, beta)
    calls = []
    monkeypatch.setattr(records, "ring_allreduce_time", lambda *a: calls.append(a) or 1.0)
    assert model_time(2e-6, 3e9, 1024, 4) == 1.0 and calls == [(1024.0, 4, 2e-6, 3e9)]


def test_file_format_wrappers_without_callers_are_gone():
    # the file format's home is commsim.calibration.file; the records module holds no wrappers
    # (it would import the file module back), the package's public surface re-exports the file API
    for name in ("dump_calibration", "calibration_to_dict", "calibration_from_dict", "load_calibration",
                 "save_calibration", "utc_now_iso"):
        assert not hasattr(cal_model, name)
    for name in ("load_calibration", "save_calibration", "utc_now_iso"):
        assert callable(getattr(cal_mod, name))
