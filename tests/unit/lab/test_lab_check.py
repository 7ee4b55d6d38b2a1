"""commsim.lab.check: the simulator's ring under a calibration, against hand-computed cases and
the max-plus recurrence; the comparison and its summary."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commsim import calibration as calib
from commsim.collectives.maxplus import ring_recurrence
from commsim.lab import check

SIZES = [2**k for k in range(12, 24)]


def level(name, alpha, beta, n=2):
    return calib.fit_link(name, [calib.Measurement(s, calib.model_time(alpha, beta, s, n), n) for s in SIZES])


def cal(*levels):
    return calib.Calibration(tuple(levels), calib.Provenance("test", 2))


INTER = (300e-6, 12.5e6)  # 100 Mbit/s
INTRA = (50e-6, 1.25e9)


def test_ring_crossings_node_major():
    assert check.ring_crosses(2, 2).tolist() == [True, False, True, False]
    assert check.ring_crosses(4, 1).all()
    assert not check.ring_crosses(1, 2).any()


def test_one_level_ring_is_the_textbook_formula():
    c = cal(level("inter_node", *INTER))
    a, b = INTER
    for nodes in (2, 4, 8):
        s = 4 << 20
        want = 2 * (nodes - 1) * a + 2 * (nodes - 1) / nodes * s / b
        assert check.predicted_time(c, "all_reduce", nodes, 1, s) == pytest.approx(want, rel=1e-6)
        assert check.predicted_time(c, "all_gather", nodes, 1, s) == pytest.approx(want / 2, rel=1e-6)
        assert check.transfer_share(c, "all_reduce", nodes, 1, s) == pytest.approx(
            1 - a / (a + s / (nodes * b)), rel=1e-6)


def test_two_levels_the_network_hop_paces_and_latencies_average():
    c = cal(level("intra_node", *INTRA), level("inter_node", *INTER))
    s, n = 1 << 22, 8  # 4 nodes x 2: hops alternate network / loopback
    mean_alpha = (INTER[0] + INTRA[0]) / 2
    want = 2 * (n - 1) * (mean_alpha + s / n / INTER[1])
    assert check.predicted_time(c, "all_reduce", 4, 2, s) == pytest.approx(want, rel=1e-6)


def test_over_gloo_a_reduce_scatter_costs_a_whole_all_reduce():
    # ProcessGroupGloo all-reduces the whole input and copies out the rank's chunk; a backend
    # with its own reduce-scatter (nccl-tests' logs) keeps the half ring
    levels = (level("intra_node", *INTRA), level("inter_node", *INTER))
    gloo = calib.Calibration(levels, calib.Provenance("gloo", 2))
    nccl = calib.Calibration(levels, calib.Provenance("nccl-tests", 2))
    s = 4 << 20
    assert check.kernel_name(gloo, "reduce_scatter") == "ring" and check.kernel_name(nccl, "reduce_scatter") == "reduce_scatter"
    assert check.kernel_name(gloo, "all_gather") == "all_gather"
    assert check.predicted_time(gloo, "reduce_scatter", 4, 2, s) == check.predicted_time(gloo, "all_reduce", 4, 2, s)
    assert check.predicted_time(nccl, "reduce_scatter", 4, 2, s) == pytest.approx(
        check.predicted_time(nccl, "all_reduce", 4, 2, s) / 2, rel=1e-6)
    assert check.transfer_share(gloo, "reduce_scatter", 4, 2, s) == check.transfer_share(gloo, "all_reduce", 4, 2, s)


@settings(max_examples=30, deadline=None)
@given(nodes=st.integers(1, 6), per_node=st.integers(1, 3), k=st.integers(10, 24),
       collective=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter"]))
def test_closed_form_equals_the_max_plus_recurrence(nodes, per_node, k, collective):
    c = cal(level("intra_node", *INTRA), level("inter_node", *INTER))
    n = nodes * per_node
    if n < 2:
        assert check.predicted_time(c, collective, nodes, per_node, 2**k) == 0.0
        return
    # hop i's step time: the ring's mean hop latency + its chunk over its level's bandwidth
    crosses = check.ring_crosses(nodes, per_node)
    const = {lv: calib.measured_level_constants(c, lv, 2**k, n) for lv in ("intra_node", "inter_node")}
    alpha = np.where(crosses, const["inter_node"][0], const["intra_node"][0])
    bw = np.where(crosses, const["inter_node"][1], const["intra_node"][1])
    hops = alpha.mean() + (2**k / n) / bw
    steps = check.STEPS[collective](n)
    slow = ring_recurrence(np.zeros(n), hops, steps).max()
    assert check.predicted_time(c, collective, nodes, per_node, 2**k) == pytest.approx(slow, rel=1e-12)


def test_compare_and_summary():
    c = cal(level("inter_node", *INTER))
    t = check.predicted_time(c, "all_reduce", 4, 1, 4 << 20)
    rows = [
        {"layout": "4x1", "collective": "all_reduce", "nodes": 4, "ranks_per_node": 1, "size_bytes": 4 << 20,
         "time_s": t * 1.25},  # measured 25% slower: the prediction's busbw is 25% high
        {"layout": "4x1", "collective": "all_reduce", "nodes": 4, "ranks_per_node": 1, "size_bytes": 1 << 20,
         "time_s": check.predicted_time(c, "all_reduce", 4, 1, 1 << 20) / 1.05},
        {"layout": "4x1", "collective": "all_reduce", "nodes": 4, "ranks_per_node": 1, "size_bytes": 1024,
         "time_s": 1.0},  # latency-bound: not counted
    ]
    out = check.compare(c, rows)
    assert [o["latency_floor_s"] for o in out] == [1.0] * 3  # the smallest size's time
    assert [o["network_bound"] for o in out] == [False] * 3  # no size's bytes take 4x that second
    rows[2]["time_s"] = 1e-3  # a latency floor of 1 ms: the two large sizes are network-bound
    out = check.compare(c, rows)
    assert out[0]["error_pct"] == pytest.approx(25.0)
    assert out[1]["error_pct"] == pytest.approx((1 / 1.05 - 1) * 100, rel=1e-6)
    assert [o["network_bound"] for o in out] == [True, True, False]
    (s,) = check.summarize(out)
    assert s["points"] == 2 and not s["within"]
    assert s["median_abs_error_pct"] == pytest.approx((25.0 + (1 - 1 / 1.05) * 100) / 2)
    assert s["max_abs_error_pct"] == pytest.approx(25.0)
    assert "NO" in check.format_summary([s])
