"""ZeRO-2 and FSDP: stream order, traffic, and the engine against closed forms (uniform links).

Traffic per step and rank (Rajbhandari et al. 2020, ZeRO, sec. 7.2): DDP's all-reduce sends
2 Psi (2(n-1)/n * S on a ring); ZeRO-2's reduce-scatter + all-gather the same 2 Psi;
ZeRO-3 / FSDP two all-gathers (forward, backward) and one reduce-scatter: 3 Psi, 1.5x.
"""

import numpy as np
import pytest

from commsim.network.costs import ring_allreduce_time
from commsim.sim.engine import simulate
from commsim.analysis.report import summarize
from commsim.sim.sharding import Op, optimizer_time, stream_order, traffic_bytes
from commsim.scenario.spec import Jitter
from tests.conftest import make_scenario

ONE_BUCKET = dict(bucket_cap=4e9, first_bucket=4e9)
N, ALPHA, BW = 8, 5e-6, 12.5e9
# 8 nodes of one GPU: every ring hop is the same network link
UNIFORM = dict(nodes=N, gpus_per_node=1, inter=(BW, ALPHA), parameters=1_000_000_000)


def half(size, n=N, alpha=ALPHA, bw=BW):
    """Uniform ring reduce-scatter or all-gather: (n-1) alpha + (n-1)/n S/B."""
    return (n - 1) * alpha + (n - 1) / n * size / bw


def test_stream_order_of_each_sharding():
    assert stream_order("none", 2) == (Op("all_reduce", 0, "backward"), Op("all_reduce", 1, "backward"))
    assert stream_order("zero2", 3) == (
        Op("reduce_scatter", 0, "backward"), Op("reduce_scatter", 1, "backward"), Op("reduce_scatter", 2, "backward"),
        Op("all_gather", 2, "optimizer"), Op("all_gather", 1, "optimizer"), Op("all_gather", 0, "optimizer"),
    )
    # FSDP: forward gathers in forward order; in backward the next unit's gather (prefetch)
    # precedes the current unit's reduce-scatter
    ag, rs = "all_gather", "reduce_scatter"
    assert stream_order("fsdp", 3) == (
        Op(ag, 2, "forward"), Op(ag, 1, "forward"), Op(ag, 0, "forward"),
        Op(ag, 0, "backward"), Op(ag, 1, "backward"), Op(rs, 0, "backward"),
        Op(ag, 2, "backward"), Op(rs, 1, "backward"), Op(rs, 2, "backward"),
    )
    assert [op.kind for op in stream_order("fsdp", 3, overlap=False)][-3:] == [rs, rs, rs]
    with pytest.raises(ValueError, match="sharding must be one of none, zero2, fsdp"):
        stream_order("zero3", 1)


def test_traffic_zero2_equals_ddp_and_fsdp_is_one_and_a_half_times():
    buckets = np.array([1e6, 25e6, 25e6, 7e6])
    n = 16
    ddp = traffic_bytes("none", buckets, n)
    assert ddp == pytest.approx(2 * (n - 1) / n * buckets.sum(), rel=1e-12)  # 2 Psi
    assert traffic_bytes("zero2", buckets, n) == pytest.approx(ddp, rel=1e-12)  # Psi + Psi
    assert traffic_bytes("fsdp", buckets, n) == pytest.approx(1.5 * ddp, rel=1e-12)  # 3 Psi
    assert traffic_bytes("fsdp", buckets, 1) == 0.0


def test_optimizer_scales_with_the_shard():
    assert optimizer_time(0.08, "none", 8) == 0.08
    assert optimizer_time(0.08, "zero2", 8) == 0.01
    assert optimizer_time(0.08, "fsdp", 16) == 0.005


def test_zero2_one_bucket_no_overlap_is_one_all_reduce_plus_a_shard_of_the_optimizer():
    kw = dict(forward=0.2, backward=0.3, optimizer=0.08, overlap=False, **ONE_BUCKET, **UNIFORM)
    ddp = simulate(make_scenario(**kw))
    zero2 = simulate(make_scenario(sharding="zero2", **kw))
    all_reduce = ring_allreduce_time(4e9, N, ALPHA, BW)
    # reduce-scatter + all-gather = one all-reduce: 2 (n-1) alpha + 2 (n-1)/n S/B
    assert 2 * half(4e9) == pytest.approx(all_reduce, rel=1e-12)
    np.testing.assert_allclose(ddp.step_time, 0.5 + 0.08 + all_reduce, rtol=1e-9)
    np.testing.assert_allclose(zero2.step_time, 0.5 + 0.08 / N + all_reduce, rtol=1e-9)
    np.testing.assert_allclose(zero2.comm_time, [half(4e9), half(4e9)], rtol=1e-9)


def test_zero2_all_gather_does_not_overlap_the_next_forward():
    # many buckets, no overlap: every reduce-scatter then every all-gather, back to back
    kw = dict(forward=0.2, backward=0.3, optimizer=0.0, overlap=False, bucket_cap=500e6, first_bucket=100e6, **UNIFORM)
    r = simulate(make_scenario(sharding="zero2", **kw))
    sizes = r.bucket_sizes
    assert len(sizes) == 9
    expected = 0.5 + sum(2 * half(s) for s in sizes)
    np.testing.assert_allclose(r.step_time, expected, rtol=1e-9)


@pytest.mark.parametrize("forward", [0.2, 0.01])
def test_fsdp_one_unit_closed_form(forward):
    # gather (forward) -> forward, with the backward gather prefetched during it -> backward
    # -> reduce-scatter -> 1/n optimizer
    kw = dict(forward=forward, backward=0.3, optimizer=0.08, overlap=True, **ONE_BUCKET, **UNIFORM)
    r = simulate(make_scenario(sharding="fsdp", **kw))
    h = half(4e9)  # 0.28 s
    expected = h + max(forward, h) + 0.3 + h + 0.08 / N
    np.testing.assert_allclose(r.step_time, expected, rtol=1e-9)
    np.testing.assert_allclose(r.comm_time, [h, h, h], rtol=1e-9)


def test_fsdp_hides_gathers_behind_compute_on_a_fast_network():
    kw = dict(forward=0.1, backward=0.2, optimizer=0.0, parameters=100_000_000, nodes=2, gpus_per_node=4,
              intra=(1e15, 0.0), inter=(1e15, 0.0))
    r = simulate(make_scenario(sharding="fsdp", **kw))
    np.testing.assert_allclose(r.step_time, 0.3, rtol=1e-6)


def test_fsdp_unit_waits_for_its_gather():
    # a slow network: every unit's compute waits for its all-gather, so the step is at least
    # the stream's total (2 gathers and 1 reduce-scatter per unit), never just compute
    kw = dict(forward=0.001, backward=0.002, optimizer=0.0, bucket_cap=500e6, first_bucket=500e6, overlap=True,
              **UNIFORM)
    r = simulate(make_scenario(sharding="fsdp", **kw))
    stream = sum(3 * half(s) for s in r.bucket_sizes)
    assert r.step_time.min() >= stream * (1 - 1e-12)
    assert r.step_time.max() <= stream + 0.003 + 1e-9


def test_comm_time_sums_every_collective_fsdp_one_and_a_half_times_ddp():
    kw = dict(nodes=1, gpus_per_node=8, parameters=50_000_000, overlap=False)
    ddp = summarize(make_scenario(**kw))
    zero2 = summarize(make_scenario(sharding="zero2", **kw))
    fsdp = summarize(make_scenario(sharding="fsdp", **kw))
    assert zero2["comm_time_s"] == pytest.approx(ddp["comm_time_s"], rel=1e-9)
    assert fsdp["comm_time_s"] == pytest.approx(1.5 * ddp["comm_time_s"], rel=1e-9)
    # the healthy rank's compute counts its 1/n share of the optimizer
    assert fsdp["compute_time_s"] == pytest.approx(0.05 + 0.1 + 0.01 / 8, rel=1e-12)


def test_sharded_runs_are_deterministic_and_report_stragglers():
    from commsim.output.run_files import summary_json
    from commsim.scenario.spec import SlowRank

    for sharding in ("zero2", "fsdp"):
        sc = make_scenario(sharding=sharding, stragglers=[Jitter(0.05), SlowRank((5,), 2.0)], steps=6, seed=3)
        a, b = summarize(sc), summarize(sc)
        assert summary_json(a) == summary_json(b)
        assert a["stragglers_top"][0]["rank"] == 5
        assert a["slowdown"] > 1


def test_other_algorithms_and_cost_models_price_the_halves():
    from dataclasses import replace

    from commsim.sim.links import scenario_fabric
    from commsim.collectives.kernels import make_kernel
    from commsim.sim.engine import Engine
    from commsim.scenario.spec import Collective

    base = make_scenario(sharding="zero2", nodes=4, gpus_per_node=4, parameters=50_000_000, **ONE_BUCKET)
    for algorithm, model in [("tree", "alpha-beta"), ("ring", "nccl-2.19")]:
        sc = replace(base, collective=Collective(algorithm=algorithm, model=model))
        engine = Engine(sc)
        launch = np.linspace(0.0, 0.01, 16)
        for kind, kernel in zip(("reduce_scatter", "all_gather"), engine.kernels):
            expected = make_kernel(kind, scenario_fabric(sc), 200e6, model).finish_times(launch)
            np.testing.assert_allclose(kernel.finish_times(launch), expected, rtol=1e-12)
        assert np.all(simulate(sc).step_time > 0.15)


@pytest.mark.slow
def test_dgx_h100_scaling_numbers_in_the_readme():
    """docs/collectives.md's "ZeRO-2 and FSDP" table: step times (ms, alpha-beta ring) at 32 and 256 GPUs."""
    from dataclasses import replace
    from pathlib import Path

    from commsim.analysis.algorithm_comparison import compare
    from commsim.scenario.loader import load_scenario

    sc = load_scenario(Path(__file__).resolve().parents[3] / "scenarios" / "dgx_h100_scaling.yaml")
    expected = {"none": (271.24, 486.42), "zero2": (283.21, 472.68), "fsdp": (256.31, 589.69)}
    for sharding, (at32, at256) in expected.items():
        rows = compare(replace(sc, ddp=replace(sc.ddp, sharding=sharding)), [4, 32], ["ring"], ["alpha-beta"])
        assert [round(r["step_time_s"] * 1e3, 2) for r in rows] == [at32, at256]


def test_trace_spans_name_the_sharded_phases():
    import json

    from commsim.output.run_files import chrome_trace

    names = {}
    for sharding in ("none", "zero2", "fsdp"):
        r = simulate(make_scenario(sharding=sharding, steps=2))
        names[sharding] = {e["name"] for e in json.loads(chrome_trace(r))["traceEvents"] if e["ph"] == "X"}
    assert names["none"] <= {"forward+backward", "wait for all-reduce", "optimizer"}
    assert "optimizer+all-gather" in names["zero2"]
    assert "forward+backward+gather waits" in names["fsdp"]
    # ZeRO-2's step ends with the all-gather: the optimizer span runs to the rank's end
    r = simulate(make_scenario(sharding="zero2", steps=2))
    assert np.all(r.rank_comm_end < r.rank_end)


def test_engine_refuses_accumulation_with_sharding():
    with pytest.raises(ValueError, match="gradient accumulation"):
        simulate(make_scenario(sharding="fsdp", accumulation=2))
