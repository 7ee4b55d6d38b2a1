"""Every scenario file runs, and the reviewed ones say what their comments promise."""

import json
from pathlib import Path

import pytest

from commsim.cli.main import run_cli
from commsim.scenario.loader import load_scenario
from commsim.analysis.report import summarize
from commsim.sim.ddp_costs import step_overhead

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))
ONE_BUCKET = ["ddp.overlap=false", "ddp.bucket_cap=4 GB", "ddp.first_bucket=4 GB"]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_scenario_runs(path, tmp_path):
    out = tmp_path / "out.json"
    assert run_cli(["run", str(path), "--quiet", "--steps", "5", "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["steps"] == 5 and summary["step_time_s"]["mean"] > 0


def test_32gpu_throttle_is_about_40_percent_slower_and_names_the_hot_gpu():
    s = summarize(load_scenario("scenarios/32gpu_throttle.yaml"))
    assert s["world_size"] == 32
    assert 1.35 <= s["slowdown"] <= 1.45
    assert s["stragglers_top"][0]["rank"] == 13


@pytest.mark.parametrize("name, ring_seconds", [("ib100", 0.56), ("eth25", 2.24)])
def test_seed_scenarios_one_bucket_comm_time(name, ring_seconds):
    sc = load_scenario(f"scenarios/seed_1b_8gpu_{name}.yaml", overrides=ONE_BUCKET)
    s = summarize(sc)
    latency = 2 * 7 * sc.cluster.inter_node.latency
    assert s["comm_time_s"] == pytest.approx(ring_seconds + latency, rel=1e-9)
    # without overlap the whole all-reduce is exposed, and DDP's own costs with it (nothing overlaps)
    overhead = step_overhead([float(sc.model.grad_bytes)], sc.ddp.costs)
    assert overhead > 0
    assert s["exposed_comm_s"] == pytest.approx(s["comm_time_s"] + overhead, rel=1e-9)


@pytest.mark.parametrize("name", ["ib100", "eth25"])
def test_seed_scenarios_overlap_hides_part_of_the_communication(name):
    one = summarize(load_scenario(f"scenarios/seed_1b_8gpu_{name}.yaml", overrides=ONE_BUCKET))
    overlapped = summarize(load_scenario(f"scenarios/seed_1b_8gpu_{name}.yaml"))
    assert overlapped["step_time_s"]["mean"] < one["step_time_s"]["mean"]
    assert overlapped["exposed_comm_s"] < one["exposed_comm_s"]


def test_scaling_1024_step_time_grows_with_scale_while_bandwidth_term_does_not():
    runs = {}
    for nodes in (1, 16, 128):
        sc = load_scenario("scenarios/scaling_1024.yaml", overrides=[f"cluster.nodes={nodes}"], steps=30)
        runs[nodes] = (sc, summarize(sc))
    means = [runs[k][1]["step_time_s"]["mean"] for k in (1, 16, 128)]
    assert means[0] < means[1] < means[2]
    # the jitter barrier: the expected max over 128 GPUs exceeds that over 8
    assert runs[16][1]["straggler_cost_s"] > runs[1][1]["straggler_cost_s"] > 0
    # the ring's bandwidth term is flat in n; what grows is the latency term 2(n-1) * mean(alpha) per bucket
    sc16, sc128 = runs[16][0], runs[128][0]
    grad, bw = sc128.model.grad_bytes, sc128.cluster.inter_node.bandwidth
    bandwidth_terms = [2 * (n - 1) / n * grad / bw for n in (sc16.world_size, sc128.world_size)]
    assert bandwidth_terms[1] == pytest.approx(bandwidth_terms[0], rel=0.01)
    mean_alpha = (7 * sc128.cluster.intra_node.latency + sc128.cluster.inter_node.latency) / 8
    buckets = runs[128][1]["buckets"]
    latency_growth = buckets * 2 * (sc128.world_size - sc16.world_size) * mean_alpha
    comm_growth = runs[128][1]["comm_time_s"] - runs[16][1]["comm_time_s"]
    assert comm_growth == pytest.approx(latency_growth, rel=0.02)
