"""Replay at 4 lab nodes with no straggler, a slow_rank, a throttle and a slow_link at half rate:
step times within the issue's 10% median error, and each straggler named from the measurements."""

import statistics

import pytest

pytest.importorskip("torch")

from commsim.lab import Lab, LabSpec  # noqa: E402
from commsim.scenario.spec import SlowLink, SlowRank, Throttle  # noqa: E402
from validate.lab_validation import lab_scenario, straggler_check, with_stragglers  # noqa: E402

FAST, WITH_SLOW = [0, 1, 2, 3], [0, 1, 2, 4]  # lab node 4 is the scenario's node 3 when its link is slow


def cases(steps=5):
    base = lab_scenario(4, steps=steps)
    return [
        ("none", base, FAST),
        ("slow_rank", with_stragglers(base, "slow_rank", SlowRank((2,), 1.5)), FAST),
        ("throttle", with_stragglers(base, "throttle", Throttle((1,), heat_up=1.0, throttled_time=1.0,
                                                                clock_fraction=0.5)), FAST),
        ("slow_link", with_stragglers(base, "slow_link", SlowLink(0.5, node=3)), WITH_SLOW),
    ]


@pytest.mark.lab
@pytest.mark.lab_accuracy
def test_replayed_stragglers_match_the_simulation_and_are_named(lab_name, tmp_path):
    with Lab(LabSpec(nodes=5, rate_bps=100e6, name=lab_name)) as lab:
        rep = straggler_check(lab, cases(), [64 << 10, 256 << 10, 1 << 20, 4 << 20], tmp_path, timeout_s=120,
                              echo=lambda line: None)
        assert lab.spec.rate(4) == 100e6  # restored after the run
    assert rep["slowed_bps"] == {4: 50e6}  # the slow link, applied for real during the run
    by = {c["case"]: c for c in rep["cases"]}
    errors = [abs(c["comparison"]["error_pct"]["step_time_mean"]) for c in rep["cases"]]
    assert statistics.median(errors) <= 10.0, errors
    assert max(errors) <= 20.0, errors

    assert by["none"]["found"] == []
    assert [(f["kind"], f["rank"]) for f in by["slow_rank"]["found"]] == [("slow_rank", 2)]
    assert [(f["kind"], f["rank"]) for f in by["throttle"]["found"]] == [("throttle", 1)]
    assert [(f["kind"], f.get("rank")) for f in by["slow_link"]["found"]] == [("slow_link", 3)]
    assert "cslab-" + lab_name + "-n4" in by["slow_link"]["found_text"]

    # half the rate on one node's link: the ring's communication takes twice as long
    comm = {k: by[k]["measured_scenario_comm_time_s"] for k in ("none", "slow_link")}
    assert 1.7 < comm["slow_link"] / comm["none"] < 2.3, comm
