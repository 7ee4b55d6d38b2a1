"""Tests for commsim.calibration.prediction and the hop pricing of commsim.calibration.model:
measured curve inside the table, fitted model outside, monotone in size and ranks, and the
note on predictions beyond the calibrated world sizes."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commsim import calibration as cal_mod
from commsim.calibration import (
    Calibration,
    CalibrationError,
    Measurement,
    Provenance,
    extrapolation_note,
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




# --- predictions beyond the calibrated world sizes --------------------------------------------


def _cal_at(*world_sizes, level="intra_node", hosts=()):
    ms = [m for n in world_sizes for m in synthetic(5e-6, 10e9, n)]
    return Calibration((fit_link(level, ms),), Provenance(backend="test", world_size=max(world_sizes), hostnames=hosts))


def test_no_note_within_the_calibrated_world_sizes():
    cal = _cal_at(4, 16)
    for n in (1, 4, 8, 12, 16):
        assert extrapolation_note(cal, n) is None


@pytest.mark.parametrize("ranks,note", [
    (64, "extrapolating: 64 ranks is 4 x the largest calibrated world size 16"),
    (17, "extrapolating: 17 ranks is 1.06 x the largest calibrated world size 16"),
    (1000, "extrapolating: 1000 ranks is 62.5 x the largest calibrated world size 16"),
    (2, "extrapolating: 2 ranks is below the smallest calibrated world size 4"),
])
def test_note_beyond_the_calibrated_world_sizes(ranks, note):
    assert extrapolation_note(_cal_at(4, 16), ranks) == note


def test_notes_on_nodes():
    intra = _cal_at(8, hosts=("a",))
    assert extrapolation_note(intra, 8, nodes=1) is None
    assert extrapolation_note(intra, 16, nodes=2) == (
        "extrapolating: 16 ranks is 2 x the largest calibrated world size 8; "
        "2 nodes, but the calibration measured links inside one node only (level intra_node)")
    inter = _cal_at(16, level="inter_node", hosts=("a", "b"))
    assert extrapolation_note(inter, 16, nodes=2) is None
    assert extrapolation_note(inter, 16, nodes=8) == "extrapolating: 8 nodes is 4 x the 2 calibrated hosts"
    assert extrapolation_note(_cal_at(16, level="inter_node"), 16, nodes=8) is None  # hosts unknown: not said


def test_note_uses_the_named_levels_world_sizes():
    intra = fit_link("intra_node", synthetic(1e-6, 100e9, 8))
    inter = fit_link("inter_node", synthetic(5e-6, 10e9, 32))
    cal = Calibration((intra, inter), Provenance(backend="test", world_size=32))
    assert extrapolation_note(cal, 32) is None
    assert extrapolation_note(cal, 32, level="intra_node") == \
        "extrapolating: 32 ranks is 4 x the largest calibrated world size 8"
    assert cal_mod.calibrated_world_sizes(cal) == (8, 32)
