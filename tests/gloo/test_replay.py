"""End-to-end: `commsim validate SCENARIO` (replay on 2 gloo ranks) and `--numerics` through the CLI."""

import copy
import json

import click
import numpy as np
import pytest

pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from commsim import calibration as calib  # noqa: E402
from commsim.cli.validate import register  # noqa: E402

SCENARIO = """\
name: replay_test
steps: 4
cluster:
  nodes: 1
  gpus_per_node: 2
  intra_node: {bandwidth: 1 GB/s, latency: 100 us}
  inter_node: {bandwidth: 1 GB/s, latency: 100 us}
model:
  parameters: 1e6
compute:
  forward: 30 ms
  backward: 60 ms
  optimizer: 5 ms
ddp:
  bucket_cap: 1 MiB
"""


@click.group()
def cli():
    """Stand-in for commsim.cli.main:main."""


register(cli)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay")
    (d / "sc.yaml").write_text(SCENARIO)
    # a calibration with plain numbers (the test checks the pipeline, not this machine)
    ms = [calib.Measurement(s, calib.model_time(200e-6, 0.5e9, s, 2), 2) for s in (1024, 2**20, 2**22)]
    calib.save_calibration(calib.Calibration((calib.fit_link("intra_node", ms),), calib.Provenance("test", 2)), d / "cal.yaml")
    return d


def test_validate_replay_report(files):
    js = files / "r.json"
    r = CliRunner().invoke(cli, ["validate", str(files / "sc.yaml"), "--calibration", str(files / "cal.yaml"),
                                 "--backend", "gloo", "--nprocs", "2", "--warmup-steps", "1", "--json", str(js),
                                 "--set", "stragglers=[{kind: slow_rank, ranks: [1], factor: 2.0}]"])
    assert r.exit_code == 0, r.output
    assert "step time mean" in r.output and "straggler cost" in r.output
    rep = json.loads(js.read_text())
    m, p, e = rep["measured"], rep["predicted"], rep["error_pct"]
    compute = 0.030 + 0.060 + 0.005
    # the slow rank computes twice as long: every step takes at least its compute
    assert 2 * compute <= m["step_time_s"]["mean"] < 2 * compute + 1.0
    assert m["step_time_s"]["p95"] >= m["step_time_s"]["p50"] > 0
    assert compute <= m["baseline_step_time_s"] < m["step_time_s"]["mean"]
    assert p["step_time_s"]["mean"] > 2 * compute and p["straggler_cost_s"] > 0.05
    assert e["step_time_mean"] == pytest.approx((p["step_time_s"]["mean"] / m["step_time_s"]["mean"] - 1) * 100)


def test_validate_needs_matching_world_size(files):
    r = CliRunner().invoke(cli, ["validate", str(files / "sc.yaml"), "--calibration", str(files / "cal.yaml"), "--nprocs", "3"])
    assert r.exit_code == 2 and "the scenario has 2 ranks but --nprocs is 3" in r.output


def test_validate_numerics_cli(tmp_path, monkeypatch, numerics_run):
    # the CLI's launch is the one tests/gloo/test_numerics.py makes for real (numerics_run): the
    # command must ask for that very run, and its report is made from that run's records
    import validate.launch
    from validate.numerics import rank_numerics

    asked = []

    def launched(fn, nprocs, backend, timeout_s):
        asked.append((fn, nprocs, backend))
        return copy.deepcopy(numerics_run)  # the shared records stay as the launch returned them

    monkeypatch.setattr(validate.launch, "launch", launched)
    js = tmp_path / "n.json"
    r = CliRunner().invoke(cli, ["validate", "--numerics", "--backend", "gloo", "--nprocs", "2", "--json", str(js)])
    assert asked == [(rank_numerics, 2, "gloo")]
    assert r.exit_code == 0, r.output
    assert r.output.count("PASS") == 4 and "4 passed, 0 failed" in r.output
    checks = json.loads(js.read_text())["checks"]
    assert checks[2]["large"]["sum_then_divide"] == "inf"  # strict JSON: inf as a string


def test_validate_ddp_mode(files):
    js = files / "ddp.json"
    r = CliRunner().invoke(cli, ["validate", str(files / "sc.yaml"), "--calibration", str(files / "cal.yaml"),
                                 "--nprocs", "2", "--mode", "ddp", "--steps", "3", "--warmup-steps", "1", "--json", str(js)])
    assert r.exit_code == 0, r.output
    rep = json.loads(js.read_text())
    comp = rep["measured"]["compute_s"]
    assert comp["forward_s"] > 0 and comp["backward_s"] > 0
    # a step is at least the measured compute of a rank, and the prediction starts from it
    assert rep["measured"]["step_time_s"]["mean"] >= 0.8 * (comp["forward_s"] + comp["backward_s"])
    assert rep["predicted"]["step_time_s"]["mean"] >= comp["forward_s"] + comp["backward_s"] + comp["optimizer_s"]



def test_validate_ddp_mode_predicts_with_the_buckets_ddp_built(files):
    # 5e6 parameters in 1024-wide layers: each 4 MiB weight is a bucket of its own at a 1 MiB cap
    # (DDP never splits a tensor), so DDP builds about 6 buckets where the nominal layout says 20;
    # the prediction must use DDP's
    js = files / "ddp_built.json"
    r = CliRunner().invoke(cli, ["validate", str(files / "sc.yaml"), "--calibration", str(files / "cal.yaml"),
                                 "--nprocs", "2", "--mode", "ddp", "--steps", "2", "--warmup-steps", "1",
                                 "--set", "model.parameters=5e6", "--set", "compute.batch_size=1", "--json", str(js)])
    assert r.exit_code == 0, r.output
    b = json.loads(js.read_text())["ddp_buckets"]
    assert b["nominal_count"] >= 15 and 2 <= len(b["built_bytes"]) <= 8
    assert b["predicted_with"] == b["built_bytes"]

def test_ddp_mode_refuses_slow_rank(files):
    r = CliRunner().invoke(cli, ["validate", str(files / "sc.yaml"), "--calibration", str(files / "cal.yaml"),
                                 "--mode", "ddp", "--set", "stragglers=[{kind: slow_rank, ranks: [1], factor: 2.0}]"])
    assert r.exit_code == 2 and f"{files / 'sc.yaml'} (after --set 'stragglers=[{{kind: slow_rank, ranks: [1], factor: 2.0}}]'): stragglers: --mode ddp injects only stalls" in r.output


def test_accuracy_cases_are_the_six_of_the_issue():
    from commsim.scenario.loader import load_scenario
    from validate.accuracy import cases

    got = []
    for cap, slow, name, overrides in cases(1.5):
        sc = load_scenario("scenarios/validate_gloo_2rank.yaml", overrides=overrides)
        got.append((sc.name, sc.ddp.bucket_cap, [(type(s).__name__, s.ranks, s.factor) for s in sc.stragglers]))
    assert got == [
        ("bucket_1MB", 1e6, []), ("bucket_1MB_slow", 1e6, [("SlowRank", (1,), 1.5)]),
        ("bucket_25MB", 25e6, []), ("bucket_25MB_slow", 25e6, [("SlowRank", (1,), 1.5)]),
        ("bucket_100MB", 100e6, []), ("bucket_100MB_slow", 100e6, [("SlowRank", (1,), 1.5)]),
    ]


@pytest.mark.parametrize("sharding", ["zero2", "fsdp"])
def test_ddp_mode_refuses_sharding(sharding):
    from tests.conftest import make_scenario
    from validate.ddp_job import _plan

    with pytest.raises(calib.CalibrationError, match=f"^ddp.sharding: {sharding} is not replayed"):
        _plan(make_scenario(nodes=1, gpus_per_node=2, sharding=sharding), 1)


def test_ddp_mode_refuses_no_overlap(files):
    # torch DDP always overlaps: ddp.overlap false cannot be what the real job does
    r = CliRunner().invoke(cli, ["validate", str(files / "sc.yaml"), "--calibration", str(files / "cal.yaml"),
                                 "--mode", "ddp", "--set", "ddp.overlap=false"])
    assert r.exit_code == 2 and f"{files / 'sc.yaml'} (after --set 'ddp.overlap=false'): ddp.overlap: --mode ddp always overlaps" in r.output


def test_validate_refuses_sharding_before_launching(files):
    r = CliRunner().invoke(cli, ["validate", str(files / "sc.yaml"), "--calibration", str(files / "cal.yaml"),
                                 "--set", "ddp.sharding=zero2"])
    # the one line names the scenario file and the key, as every input error does
    assert r.exit_code == 2 and f"{files / 'sc.yaml'} (after --set 'ddp.sharding=zero2'): ddp.sharding: zero2 is not replayed" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_validate_applies_the_scenarios_calibration_check(files):
    # a calibration prices the ring under alpha-beta: another algorithm is refused, as in `run`
    r = CliRunner().invoke(cli, ["validate", str(files / "sc.yaml"), "--calibration", str(files / "cal.yaml"),
                                 "--set", "collective.algorithm=tree"])
    assert r.exit_code == 2 and "expected collective.algorithm ring with model alpha-beta" in r.output


def test_common_start_is_shared_and_common(tmp_path):
    # one start barrier for the replay and the DDP job: every rank leaves it at the same instant
    from tests.gloo import workers_launch as w
    from validate import ddp_job, replay
    from validate.launch import launch

    assert ddp_job.common_start is replay.common_start
    out = launch(w.common_start_then_clock, 2, "gloo", timeout_s=60, args=(1,), result_dir=str(tmp_path))
    (s0, c0), (s1, c1) = out
    assert s0 == s1 and c0 >= s0 and c1 >= s1


def test_one_step_returns_only_what_assemble_reads():
    from validate.replay import CommStream, _one_step

    class Local(CommStream):  # no process group: "all-reduce" is a no-op
        def _run(self):
            while (j := self.jobs.get()) is not None:
                t = __import__("time").monotonic()
                self.done.put((j, t, t))

    comm = Local([None, None])
    plan = {"gradient_accumulation": 1, "forward_s": 0.001, "backward_s": 0.002, "optimizer_s": 0.001,
            "overlap": True, "ready_fraction": [0.5, 1.0]}
    try:
        out = _one_step(plan, comm, 1.0, 0.0, 5.0)
    finally:
        comm.close()
    assert sorted(out) == ["end", "finish", "ready", "start"] and len(out["start"]) == len(out["ready"]) == 2


THROTTLE = {"heat_up": 0.3, "throttled_time": 0.3, "clock_fraction": 0.5}


def _throttled(folder, steps=8):
    from commsim.scenario.loader import load_scenario

    (folder / "throttled.yaml").write_text(SCENARIO)
    return load_scenario(str(folder / "throttled.yaml"), overrides=[
        f"steps={steps}", "model.parameters=1e5",
        "stragglers=[{kind: throttle, ranks: [1], heat_up: 0.3, throttled_time: 0.3, clock_fraction: 0.5}]"])


def test_a_throttled_rank_computes_at_its_duty_cycle_and_is_named(tmp_path):
    # throttle needs nothing but a clock on compute: it runs on one host, 2 gloo processes
    from commsim.sim.stragglers import ThermalClock
    from validate.launch import launch
    from validate.replay import findings, plan_for, rank_replay

    sc = _throttled(tmp_path)
    plan = plan_for(sc, None, warmup_steps=1, timeout_s=60)
    assert plan["clocks"] == {"1": [0.3, 0.3, 0.5, 0.0]} and plan["slow_nodes"] == {}
    per_rank = launch(rank_replay, 2, "gloo", timeout_s=60, args=(plan,), result_dir=str(tmp_path))
    work = 0.030 + 0.060  # forward + backward at full clock, up to the last bucket's readiness
    clock = ThermalClock(**THROTTLE)
    start = per_rank[1]["start"]
    took, expected = [], []
    t = start
    for r1 in per_rank[1]["steps"]:
        took.append(r1["ready"][-1] - t)
        expected.append(float(clock.finish(t - start, work)) - (t - start))
        t = r1["end"]
    took, expected = np.array(took), np.array(expected)
    # the thermal clock is what the rank follows: never faster than it says (sleeps only overshoot) ...
    assert (took >= expected - 1e-3).all(), (took, expected)
    # ... and slowed where it says: some steps run at full clock, some at half (the duty cycle)
    assert expected.min() == pytest.approx(work) and expected.max() > 1.5 * work
    hot = expected > 1.3 * work
    assert took[hot].mean() > 1.3 * took[~hot].mean()
    _, found = findings(per_rank, node_of=[0, 0])
    assert [(f["kind"], f["rank"]) for f in found] == [("throttle", 1)]


def test_validate_names_the_throttled_rank(files):
    js = files / "throttle.json"
    r = CliRunner().invoke(cli, ["validate", str(files / "sc.yaml"), "--calibration", str(files / "cal.yaml"),
                                 "--warmup-steps", "1", "--steps", "8", "--json", str(js), "--set",
                                 "stragglers=[{kind: throttle, ranks: [1], heat_up: 0.3, throttled_time: 0.3, "
                                 "clock_fraction: 0.5}]"])
    assert r.exit_code == 0, r.output
    rep = json.loads(js.read_text())
    assert [(f["kind"], f["rank"]) for f in rep["stragglers_found"]] == [("throttle", 1)]
    assert "stragglers seen: throttle: rank 1" in r.output
    assert rep["measured"]["straggler_cost_s"] > 0


def test_a_slow_link_is_refused_on_one_host_in_one_line(files):
    r = CliRunner().invoke(cli, ["validate", str(files / "sc.yaml"), "--calibration", str(files / "cal.yaml"),
                                 "--set", "stragglers=[{kind: slow_link, node: 0, factor: 0.5}]"])
    assert r.exit_code == 2, r.output
    assert "slow_link on node 0 cannot be applied on this hardware" in r.output and "commsim lab" in r.output
    assert len(r.output.strip().splitlines()) == 1
