"""Tests for commsim.analysis.validation (pure): calibrated engine, measured statistics, comparison."""

import numpy as np
import pytest

from commsim import calibration as calib
from commsim.calibration import Calibration, Measurement, Provenance, SizeRange, make_link
from commsim.sim.engine import simulate
from commsim.scenario.spec import Jitter, SlowLink, SlowRank, Stall, Throttle
from commsim.analysis.validation import (
    compare,
    format_comparison,
    measured_summary,
    predicted_summary,
    replay_plan,
    simulate_calibrated,
)
from commsim.scenario.topology import ring_crossings
from tests.conftest import make_scenario


def model_only_level(level, alpha, beta, n_table=3):
    """A level whose table is at another world size, so every prediction uses alpha/beta."""
    table = tuple(Measurement(s, calib.model_time(alpha, beta, s, n_table), n_table) for s in (1024, 2**20, 2**24))
    return make_link(level, alpha, beta, table, (SizeRange(1024, alpha, beta),))


def nominal_calibration(sc):
    c = sc.cluster
    levels = (model_only_level("intra_node", c.intra_node.latency, c.intra_node.bandwidth),
              model_only_level("inter_node", c.inter_node.latency, c.inter_node.bandwidth))
    return Calibration(levels, Provenance("test", 3))


@pytest.mark.parametrize("stragglers", [(), (SlowRank((3,), 1.7),), (SlowLink(0.25, rank=5),), (SlowLink(0.5, node=1),)])
def test_calibration_with_the_nominal_links_reproduces_the_engine(stragglers):
    sc = make_scenario(stragglers=stragglers)
    cal = nominal_calibration(sc)
    a, b = simulate(sc), simulate_calibrated(sc, cal)
    np.testing.assert_allclose(b.rank_end, a.rank_end, rtol=1e-12)


def test_crossings_match_the_node_major_ring():
    assert ring_crossings(make_scenario(nodes=2, gpus_per_node=4).cluster).tolist() == [True, False, False, False, True, False, False, False]
    assert not ring_crossings(make_scenario(nodes=1, gpus_per_node=4).cluster).any()


def test_measured_curve_drives_the_engine():
    # one level, measured at the scenario's world size: the single-bucket, no-overlap step is
    # compute + the measured all-reduce time, whatever the nominal links say
    sc = make_scenario(nodes=1, gpus_per_node=4, parameters=2_500_000, bucket_cap=1e9, first_bucket=1e9, overlap=False)
    size = sc.model.grad_bytes  # 10 MB
    table = tuple(Measurement(s, t, 4) for s, t in ((2**20, 1e-3), (2**23, 4e-3), (2**24, 7e-3)))
    link = calib.fit_link("flat", table)
    cal = Calibration((link,), Provenance("test", 4))
    step = simulate_calibrated(sc, cal).step_time[-1]
    t_ar = calib.predict_allreduce_time(cal, size, 4)
    assert 4e-3 < t_ar < 7e-3
    assert step == pytest.approx(sc.compute.forward + sc.compute.backward + sc.compute.optimizer + t_ar, rel=1e-9)


def test_hop_levels():
    both = nominal_calibration(make_scenario())
    assert calib.hop_level_names(both, np.array([True, False])) == ["inter_node", "intra_node"]
    single = Calibration((model_only_level("intra_node", 1e-6, 1e11),), Provenance("t", 2))
    assert calib.hop_level_names(single, np.array([True, False])) == ["intra_node", "intra_node"]
    simulate_calibrated(make_scenario(nodes=2, gpus_per_node=2), single)  # usable on any cluster


def test_measured_summary_definitions():
    start = 10.0
    rank_end = np.array([[10.5, 10.6], [11.0, 11.3], [11.9, 11.8]])
    launch = np.array([[[10.2, 10.3]], [[10.8, 10.9]], [[11.5, 11.6]]])
    finish = np.array([[[10.35, 10.36]], [[11.0, 11.0]], [[11.7, 11.75]]])
    m = measured_summary(start, rank_end, launch, finish)
    assert m["step_time_s"]["mean"] == pytest.approx(np.mean([0.6, 0.7, 0.6]))
    assert m["step_time_s"]["max"] == pytest.approx(0.7)
    assert m["comm_time_s"] == pytest.approx(np.mean([0.06, 0.1, 0.15]))


def test_compare_errors_and_text():
    sc = make_scenario(nodes=1, gpus_per_node=2, stragglers=(SlowRank((1,), 1.5),))
    pred = predicted_summary(sc, nominal_calibration(sc))
    meas = {"step_time_s": {k: v * 1.1 for k, v in pred["step_time_s"].items()}, "comm_time_s": pred["comm_time_s"] * 0.5}
    base = {"step_time_s": {"mean": pred["baseline_step_time_s"]}}
    r = compare(meas, pred, base)
    assert r["error_pct"]["step_time_mean"] == pytest.approx((1 / 1.1 - 1) * 100)
    assert r["error_pct"]["comm_time"] == pytest.approx(100.0)
    assert r["measured"]["straggler_cost_s"] == pytest.approx(meas["step_time_s"]["mean"] - pred["baseline_step_time_s"])
    text = format_comparison(r)
    assert "step time mean" in text and "%" in text
    # without stragglers there is no straggler cost to compare
    assert compare(meas, pred)["error_pct"]["straggler_cost"] is None


def test_replay_plan_carries_the_simulators_inputs():
    sc = make_scenario(nodes=1, gpus_per_node=2, parameters=10_000_000, steps=4,
                       stragglers=(Jitter(0.1), Stall((0,), 0.02, every=2)))
    plan = replay_plan(sc, warmup_steps=1, timeout_s=30)
    assert sum(plan["bucket_bytes"]) == sc.model.grad_bytes
    assert plan["bucket_bytes"][0] == 1e6 and plan["ready_fraction"][-1] == 1.0
    assert np.array(plan["factor"]).shape == (4, 2) and np.array(plan["stall"])[1, 0] == 0.02


@pytest.mark.parametrize("straggler,kind", [(Throttle((0,), 1.0, 1.0, 0.5), "Throttle"), (SlowLink(0.5, rank=0), "SlowLink")])
def test_replay_refuses_what_it_cannot_inject(straggler, kind):
    with pytest.raises(calib.CalibrationError, match=f"^stragglers: stragglers of kind {kind} cannot be injected"):
        replay_plan(make_scenario(nodes=1, gpus_per_node=2, stragglers=(straggler,)), 1, 30)


def test_replay_refuses_huge_gradients():
    with pytest.raises(calib.CalibrationError, match="^model.parameters: .* more than a replay holds"):
        replay_plan(make_scenario(nodes=1, gpus_per_node=2, parameters=10**9), 1, 30)


@pytest.mark.parametrize("sharding", ["zero2", "fsdp"])
def test_replay_refuses_sharding(sharding):
    # the replay all-reduces every bucket: a sharded job's prediction is another job
    with pytest.raises(calib.CalibrationError, match=f"^ddp.sharding: {sharding} is not replayed"):
        replay_plan(make_scenario(nodes=1, gpus_per_node=2, sharding=sharding), 1, 30)
