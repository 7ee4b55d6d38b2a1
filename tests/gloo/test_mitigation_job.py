"""validate.mitigation_job's ranks and their launcher (validate.mitigation_prediction.run_cases)
on 2 gloo ranks: real DDP communication hooks against commsim's model.

What is robust on a loaded 2-core machine is checked always: the job completes, each hook really
ran (fp16: the averaged gradients are exactly fp16 values, a plain fp32 average's are not;
PowerSGD: its P and Q buffers hold exactly the elements commsim's plan sends; post-local SGD: the
ranks' parameters agree right after each averaging step and differ after local steps), and the
prediction is within a factor of 3 of the measurement. The accuracy bar itself (median |error|
<= 10% over the benchmark's 10 cases) is timing-bound on shared cores, so it is opt-in
(``-m lab_accuracy``), as the lab's accuracy checks are.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from validate.calibrate import measure_calibration  # noqa: E402
from validate.mitigation_cases import Case, bf16_hook_supported, default_cases  # noqa: E402
from validate.mitigation_prediction import plan_for, remedy_text, run_cases, scenario_for  # noqa: E402

WIDTH = 1024
PARAMETERS = WIDTH * WIDTH + WIDTH  # one Linear(1024, 1024) (validate.compute_timing.layer_shape), 4 MB


@pytest.fixture(scope="module")
def calibration():
    return measure_calibration("gloo", 2, max_size=8 << 20, iters=5, warmup=2, level="inter_node",
                               echo=lambda *_: None)


@pytest.fixture(scope="module")
def report(calibration):
    sc = scenario_for(2, PARAMETERS, 8e6, 4)
    cases = [Case("none"), Case("fp16"), Case("powersgd", r=1), Case("powersgd", r=4), Case("localsgd", H=2),
             Case("powersgd", r=1, slow=True)]
    out = run_cases(sc, calibration, cases, 2, slow_stall=0.02, warmup_steps=3, compute_iters=3, timeout_s=120,
                    machine_rounds=7)  # one round before each of the 6 cases and after the last
    return dict(out, calibration_used=calibration)


def by_name(report):
    return {r["case"]: r for r in report["cases"]}


def test_every_case_completes_with_its_steps(report):
    assert report["width"] == WIDTH and report["parameters"] == PARAMETERS
    assert [r["case"] for r in report["cases"]] == ["baseline", "fp16", "powersgd:r=1", "powersgd:r=4",
                                                    "localsgd:H=2", "powersgd:r=1 +slow rank"]
    for r in report["cases"]:
        assert r["measured_s"] > 0 and r["predicted_s"] > 0


def test_fp16_hook_sends_fp16(report):
    rows = by_name(report)
    assert all(e["grads_in_fp16"] for e in rows["fp16"]["evidence"])
    assert not any(e["grads_in_fp16"] for e in rows["baseline"]["evidence"])
    # what commsim charges the wire: half the baseline's bytes
    assert rows["fp16"]["predicted"]["bytes_per_step"] == rows["baseline"]["predicted"]["bytes_per_step"] / 2


def test_fp16_all_reduce_rate_measured_once_and_in_the_fp16_prediction(report):
    from dataclasses import replace

    from validate.mitigation_measured import ddp_costs_from_ranks
    from validate.mitigation_prediction import predict
    from validate.mitigation_probes import reduce_bytes_from_ranks

    rd = report["reduce_dtypes"]
    assert len(rd["measured"]) == 2
    for m in rd["measured"]:  # the bucket's elements last, two smaller counts before
        assert m["elements"] == [PARAMETERS // 4, PARAMETERS // 2, PARAMETERS]
        assert all(t > 0 for t in m["fp16_s"] + m["fp32_s"]) and "bf16_s" not in m
    rb = rd["reduce_bytes"]["fp16"]
    assert rb == reduce_bytes_from_ranks(rd["measured"], "fp16") and set(rd["reduce_bytes"]) == {"fp16"}
    row = by_name(report)["fp16"]
    assert row["hardware"]["reduce_bytes"] == rb and f"reduce_bytes={rb:.4f}" in row["remedy"]
    assert "reduce_bytes" not in by_name(report)["baseline"]["hardware"]
    # the prediction: the fp16 remedy at that rate; without it, the bytes model's (as before)
    base = scenario_for(2, PARAMETERS, 8e6, 4)
    sc = replace(base, calibration=report["calibration_used"],
                 ddp=replace(base.ddp, costs=ddp_costs_from_ranks(report["ddp_costs"]["measured"])))
    cv = report["ddp_costs"]["jitter_cv"]
    rows = row["compute_rows"]
    assert predict(sc, Case("fp16"), row["hardware"], WIDTH, PARAMETERS, 0.02, cv, rows)["step_time_s"] == \
        pytest.approx(row["predicted_s"], rel=1e-12)
    plain = {k: v for k, v in row["hardware"].items() if k != "reduce_bytes"}
    assert predict(sc, Case("fp16"), plain, WIDTH, PARAMETERS, 0.02, cv, rows)["step_time_s"] == pytest.approx(
        row["predicted"]["bytes_model_step_time_s"], rel=1e-12)


def test_reduce_bytes_is_four_times_the_median_ratio_over_ranks_and_sizes():
    from validate.mitigation_probes import reduce_bytes_from_ranks

    # ratios fp16 / fp32: rank a 0.5, 0.9, 2.0; rank b 0.95, 1.0, 3.0: median of the six 0.975
    a = {"elements": [1, 2, 4], "fp32_s": [0.002, 0.010, 0.010], "fp16_s": [0.001, 0.009, 0.020]}
    b = {"elements": [1, 2, 4], "fp32_s": [0.004, 0.020, 0.010], "fp16_s": [0.0038, 0.020, 0.030]}
    assert reduce_bytes_from_ranks([a, b], "fp16") == pytest.approx(4 * 0.975, rel=1e-12)
    # one rank, fp16 as fast per element as its bytes say: 2 bytes
    half = {"elements": [1, 2, 4], "fp32_s": [0.002, 0.004, 0.008], "fp16_s": [0.001, 0.002, 0.004]}
    assert reduce_bytes_from_ranks([half], "fp16") == pytest.approx(2.0, rel=1e-12)


@pytest.mark.parametrize("r", [1, 4])
def test_powersgd_buffers_are_the_planned_p_and_q(report, r):
    row = by_name(report)[f"powersgd:r={r}"]
    for e in row["evidence"]:
        # one compressed 1024 x 1024 matrix: P and Q of 1024 x r each
        assert e["p_elements"] == e["q_elements"] == WIDTH * r
        assert e["p_elements"] == row["predicted"]["p_elements"] and e["q_elements"] == row["predicted"]["q_elements"]
        assert e["iter"] > 2  # past start_powerSGD_iter: the timed steps were compressed


def test_post_local_sgd_averages_every_H_steps(report):
    a, b = by_name(report)["localsgd:H=2"]["evidence"]
    assert a["averaged"] == b["averaged"] and a["averaged"] == [False, True, False, True]  # 3 warm-up steps first
    for s, averaged in enumerate(a["averaged"]):
        if averaged:
            assert a["checksum"][s] == b["checksum"][s]
        else:  # each rank stepped on its own batch
            assert a["checksum"][s] != b["checksum"][s]


def test_slow_rank_costs_time_and_the_prediction_is_in_range(report):
    from dataclasses import replace

    from validate.mitigation_prediction import predict

    rows = by_name(report)
    slow = rows["powersgd:r=1 +slow rank"]
    # every timed step of rank 1 sleeps 20 ms before its forward, and every step waits for rank 1
    # (a bound the load cannot break, unlike slow vs not slow, which a load swing can reverse)
    assert slow["measured_s"] > 0.02
    # the model: with the same hardware and no jitter, the stall adds itself to every step
    sc = replace(scenario_for(2, PARAMETERS, 8e6, 4), calibration=report["calibration_used"])
    fast_pred, slow_pred = (predict(sc, Case("powersgd", r=1, slow=s), slow["hardware"], WIDTH, PARAMETERS, 0.02)
                            for s in (False, True))
    assert slow_pred["step_time_s"] == pytest.approx(fast_pred["step_time_s"] + 0.02, rel=1e-9)
    # generous: on shared cores the load swings between the cases and the measurements
    for name in ("baseline", "powersgd:r=1 +slow rank"):
        assert 1 / 3 < rows[name]["predicted_s"] / rows[name]["measured_s"] < 3, (
            name, rows[name]["predicted_s"], rows[name]["measured_s"], report["ddp_costs"]["jitter_cv"])


def test_ddp_costs_measured_once_and_in_every_prediction(report):
    from dataclasses import replace

    from commsim.sim.ddp_costs import NONE
    from validate.mitigation_measured import bucket_overhead_from_ranks, ddp_costs_from_ranks
    from validate.mitigation_prediction import predict

    costs = report["ddp_costs"]
    measured = costs["measured"]
    assert len(measured) == 2 and all(m["memory_bandwidth"] > 1e8 for m in measured)
    used = ddp_costs_from_ranks(measured)
    assert costs["used"] == used.__dict__ and used.gradient_as_bucket_view
    assert used.bucket_overhead == bucket_overhead_from_ranks(measured)
    assert used.memory_bandwidth == np.median([m["memory_bandwidth"] for m in measured])
    for m in measured:  # a mean step carries the mean of each cost: means over the rounds
        assert m["synced_s"] == pytest.approx(np.mean(m["samples"]["synced"]), rel=1e-12)
        assert m["memory_bandwidth"] == pytest.approx(8.0 * PARAMETERS / np.mean(m["samples"]["copy"]), rel=1e-12)
    # the baseline's prediction carries them: with one bucket, exposed after backward, the step
    # is longer than without DDP's costs by the per-bucket cost exactly
    row = by_name(report)["baseline"]
    sc = replace(scenario_for(2, PARAMETERS, 8e6, 4), calibration=report["calibration_used"], ddp=replace(
        scenario_for(2, PARAMETERS, 8e6, 4).ddp, costs=used))
    cv = costs["jitter_cv"]
    rows = row["compute_rows"]
    with_costs = predict(sc, Case("none"), row["hardware"], WIDTH, PARAMETERS, 0.02, cv, rows)["step_time_s"]
    without = predict(replace(sc, ddp=replace(sc.ddp, costs=NONE)), Case("none"), row["hardware"], WIDTH,
                      PARAMETERS, 0.02, cv, rows)["step_time_s"]
    assert with_costs == pytest.approx(row["predicted_s"], rel=1e-12)
    assert with_costs - without == pytest.approx(used.bucket_overhead, rel=1e-6, abs=1e-12)


def test_powersgd_rate_is_measured_at_its_rank(report):
    rows = by_name(report)
    for r in (1, 4):
        hw = rows[f"powersgd:r={r}"]["hardware"]
        assert hw["powersgd_flops"] > 0 and f"flops={hw['powersgd_flops']:.0f}" in rows[f"powersgd:r={r}"]["remedy"]
        # each product's own rate, and the common one their harmonic mean (the same work each)
        assert 3 / hw["powersgd_flops"] == pytest.approx(sum(1 / hw[f"{k}_flops"] for k in ("mq", "mtp", "pqt")),
                                                         rel=0.3)  # medians over ranks of each
        for k in ("mq", "mtp", "pqt"):
            assert f":{k}_flops={hw[f'{k}_flops']:.0f}" in rows[f"powersgd:r={r}"]["remedy"]
        assert "equal_products_step_time_s" in rows[f"powersgd:r={r}"]["predicted"]
    assert "powersgd_flops" not in rows["baseline"]["hardware"]


def test_plan_and_remedy_text():
    sc = scenario_for(2, PARAMETERS, 8e6, 4)
    plan = plan_for(sc, default_cases(), slow_stall=0.02, warmup_steps=1, compute_iters=1)
    assert plan["warmup_steps"] == 3  # past PowerSGD's start_powerSGD_iter=2
    stalls = np.array(plan["stall"])  # (cases, steps, ranks)
    slow = [c.slow for c in default_cases()]
    assert stalls[slow][:, :, 1].min() == 0.02 and stalls[slow][:, :, 0].max() == 0.0
    assert stalls[[not s for s in slow]].max() == 0.0
    # PowerSGD's flops: the rate of its own skinny products, not the square matmul's
    hw = {"mem_bw": 3.2e9, "flops": 2.5e10, "powersgd_flops": 4e9, "kernel_overhead": 2.5e-6}
    assert remedy_text(Case("fp16"), hw, 256) == "fp16:mem_bw=3200000000B/s"  # the bytes model
    assert remedy_text(Case("fp16"), dict(hw, reduce_bytes=3.91234), 256) == (
        "fp16:mem_bw=3200000000B/s:reduce_bytes=3.9123")
    assert remedy_text(Case("powersgd", r=4), hw, 256) == (
        "powersgd:r=4:start=0:shapes=square:width=256:mem_bw=3200000000B/s:flops=4000000000"
        ":kernel_overhead=2.5000us")
    assert remedy_text(Case("powersgd", r=1), dict(hw, chain_overhead=2.5e-3), 256).endswith(
        ":kernel_overhead=2.5000us:chain_overhead=2500.0000us")
    split = dict(hw, mq_flops=5e9, mtp_flops=1e9, pqt_flops=6e9, chain_overhead=1e-3, wake_overhead=2e-3)
    assert remedy_text(Case("powersgd", r=1), split, 256) == (
        "powersgd:r=1:start=0:shapes=square:width=256:mem_bw=3200000000B/s:flops=4000000000"
        ":mq_flops=5000000000:mtp_flops=1000000000:pqt_flops=6000000000:kernel_overhead=2.5000us"
        ":chain_overhead=1000.0000us:wake_overhead=2000.0000us")
    assert remedy_text(Case("localsgd", H=4), dict(hw, subgroup_overhead=4e-3), 256) == (
        "localsgd:H=4:mem_bw=3200000000B/s:subgroup_overhead=4000.0000us")
    # post-local SGD: the averager's flatten and divide at the measured memory bandwidth
    assert remedy_text(Case("localsgd", H=4), hw, 256) == "localsgd:H=4:mem_bw=3200000000B/s"
    assert remedy_text(Case("localsgd", H=4), dict(hw, flatten_bw=1.5e9), 256) == "localsgd:H=4:mem_bw=1500000000B/s"
    assert remedy_text(Case("none"), hw, 256) is None
    if not torch.cuda.is_available():
        assert not bf16_hook_supported()  # a CPU build: bf16_compress_hook needs CUDA and NCCL 2.10+


@pytest.mark.lab_accuracy
def test_median_error_within_ten_percent():
    """The issue's bar, on the benchmark's cases (opt-in: timing-bound on shared cores)."""
    sc = scenario_for(2, 4 * (1024 * 1024 + 1024), 32e6, 12)
    from benchmarks.mitigation_validation import robust_calibration

    # the benchmark's calibration: the median of in-place and out-of-place times over 3 sweeps
    cal, _ = robust_calibration(2, 64 << 20, repeats=3, iters=10, echo=lambda *_: None)
    out = run_cases(sc, cal, default_cases(bf16_hook_supported()), 2, slow_stall=0.03, timeout_s=600)
    assert len(out["cases"]) >= 8
    assert out["median_abs_error"] <= 0.10, [(r["case"], round(r["error"], 3)) for r in out["cases"]]


def test_bucket_overhead_subtracts_the_slowest_ranks_compute_of_each_round():
    from validate.mitigation_measured import bucket_overhead_from_ranks

    # round 0: rank 1 computes 10 ms longer; rank 0's synced step waits for it. Both ranks' own
    # cost is 2 ms in every round; the all-reduce 5 ms
    a = {"samples": {"nosync": [0.030, 0.030, 0.031], "synced": [0.047, 0.037, 0.038], "allreduce": [0.005] * 3}}
    b = {"samples": {"nosync": [0.040, 0.029, 0.030], "synced": [0.047, 0.037, 0.038], "allreduce": [0.005] * 3}}
    assert bucket_overhead_from_ranks([a, b]) == pytest.approx(0.002, abs=1e-12)
    # never below 0
    c = {"samples": {"nosync": [0.05] * 3, "synced": [0.04] * 3, "allreduce": [0.005] * 3}}
    assert bucket_overhead_from_ranks([c, c]) == 0.0


def test_compute_jitter_cv_is_the_ranks_robust_spread_about_each_other():
    from validate.mitigation_measured import compute_jitter_cv

    def ranks(rows):  # rows: rounds x ranks
        return [{"samples": {"nosync": list(col)}} for col in np.asarray(rows).T]

    # the machine drifting (both ranks alike, rounds spread over the job): no jitter at all
    drift = [[0.010 + 0.003 * i] * 2 for i in range(9)]
    assert compute_jitter_cv(ranks(drift)) == 0.0
    # two ranks 2 ms apart about a mean of 11 ms in every round: |dev| 1/11, sigma = 1.4826 x that x sqrt 2
    assert compute_jitter_cv(ranks([[0.010, 0.012], [0.012, 0.010]] * 4)) == pytest.approx(
        1.4826 * (1 / 11) * 2 ** 0.5, rel=1e-12)
    # statistics against theory: n = 4 ranks of cv 0.1 about each other, under a drift and load
    # bursts (one round in ten, one rank 3x slower): the estimate is the ranks' sigma
    rng = np.random.default_rng(0)
    rounds = 0.02 * (1 + np.linspace(0, 2, 3000))[:, None] * (1 + 0.1 * rng.standard_normal((3000, 4)))
    assert compute_jitter_cv(ranks(rounds)) == pytest.approx(0.1, rel=0.05)
    bursts = rng.random(3000) < 0.1
    rounds[bursts, 0] *= 3
    assert compute_jitter_cv(ranks(rounds)) == pytest.approx(0.1, rel=0.2)
    assert compute_jitter_cv(ranks(rounds[:, :1])) == 0.0  # one rank: nothing to compare


def test_slot_rounds_spread_the_machine_rounds_over_the_cases():
    from validate.mitigation_job import slot_rounds

    assert slot_rounds(44, 11) == [4] * 11
    assert slot_rounds(3, 7) == [0, 0, 1, 0, 1, 0, 1] and sum(slot_rounds(3, 7)) == 3
    assert slot_rounds(10, 3) == [3, 3, 4]


def test_machine_rounds_interleaved_with_the_cases_and_pooled(report):
    # every once-per-machine figure holds all machine_rounds (7) rounds, over both ranks
    for m in report["ddp_costs"]["measured"]:
        assert {k: len(v) for k, v in m["samples"].items() if k not in ("during", "during_nosync")} == {
            "synced": 7, "nosync": 7, "allreduce": 7, "copy": 7}
        assert len(m["samples"]["during"]) == len(m["samples"]["during_nosync"]) <= 7


def test_with_built_buckets_replaces_the_nominal_layout():
    from validate.mitigation_prediction import with_built_buckets

    sc = scenario_for(2, 4 * PARAMETERS, 8e6, 4)  # four 4 MiB layers at an 8 MB cap
    built = [4096.0, 8396800.0, 8392704.0]  # what torch 2.13 built for them (bias of the last layer first)
    assert len(sc.gradient_buckets()) == 3 and list(sc.gradient_buckets()) != built
    fed = with_built_buckets(sc, built)
    assert list(fed.gradient_buckets()) == built and fed.ddp.bucket_ready is None
    with pytest.raises(ValueError, match="gradient bytes"):
        with_built_buckets(sc, built[:2])


def test_every_case_predicts_with_the_buckets_its_ddp_built(report):
    from dataclasses import replace

    from validate.mitigation_measured import ddp_costs_from_ranks
    from validate.mitigation_prediction import predict

    for row in report["cases"]:
        b = row["ddp_buckets"]
        assert b["built_bytes"] == [4 * PARAMETERS] and b["predicted_with"] == b["built_bytes"]
    # the prediction is the one with ddp.bucket_sizes: a different built layout changes it
    row = by_name(report)["baseline"]
    base = scenario_for(2, PARAMETERS, 8e6, 4)
    sc = replace(base, calibration=report["calibration_used"],
                 ddp=replace(base.ddp, costs=ddp_costs_from_ranks(report["ddp_costs"]["measured"])))
    cv = report["ddp_costs"]["jitter_cv"]
    split = replace(sc, ddp=replace(sc.ddp, bucket_sizes=(4096.0, 4 * PARAMETERS - 4096.0)))
    rows = row["compute_rows"]
    one = predict(sc, Case("none"), row["hardware"], WIDTH, PARAMETERS, 0.02, cv, rows)["step_time_s"]
    two = predict(split, Case("none"), row["hardware"], WIDTH, PARAMETERS, 0.02, cv, rows)["step_time_s"]
    assert one == pytest.approx(row["predicted_s"], rel=1e-12) and two != one


def test_powersgd_chain_measured_once_and_in_every_powersgd_prediction(report):
    from validate.mitigation_powersgd_probes import chain_overhead_from_ranks

    chain = report["chain"]
    assert len(chain["measured"]) == 2 and chain["chain_overhead"] == chain_overhead_from_ranks(chain["measured"])
    # measured at the hook's own buffers: (biases, P, Q) at r = 1 and r = 4
    assert chain["measured"][0]["sizes"] == [[WIDTH, WIDTH, WIDTH], [WIDTH, 4 * WIDTH, 4 * WIDTH]]
    for row in report["cases"]:
        if row["case"].startswith("powersgd"):
            assert f":chain_overhead={chain['chain_overhead'] * 1e6:.4f}us" in row["remedy"]
            # one bucket: both hops on every step's critical path, each at a rank's compute factor
            # of the step (a Work stage: commsim.mitigations.hooked), so between the rows' extremes
            extra = row["predicted"]["unwoken_step_time_s"] - row["predicted"]["unchained_step_time_s"]
            rows = np.asarray(row["compute_rows"])
            hops = 2 * chain["chain_overhead"]
            assert hops * rows.min() * (1 - 1e-6) <= extra <= hops * rows.max() * (1 + 1e-6)
        else:
            assert "chain_overhead" not in row["remedy"]


def test_powersgd_buffers_are_the_hooks():
    from validate.compute_timing import synthetic_model
    from validate.mitigation_powersgd_probes import powersgd_buffers

    module = synthetic_model(3 * PARAMETERS)  # three Linear(1024, 1024)
    assert powersgd_buffers(module, 1) == [3 * WIDTH, 3 * WIDTH, 3 * WIDTH]
    assert powersgd_buffers(module, 4) == [3 * WIDTH, 12 * WIDTH, 12 * WIDTH]
    # a rank at which compression saves less than 2x: every matrix stays uncompressed
    assert powersgd_buffers(module, 300) == [3 * PARAMETERS, 0, 0]


def test_chain_overhead_is_the_median_over_ranks_and_sizes_of_mean_hops():
    from validate.mitigation_powersgd_probes import chain_overhead_from_ranks

    a, b = {"hop_s": [1e-3, 3e-3]}, {"hop_s": [2e-3, 5e-3]}
    assert chain_overhead_from_ranks([a, b]) == pytest.approx(2.5e-3, rel=1e-12)
    assert chain_overhead_from_ranks([{"hop_s": [-1e-3]}]) == 0.0


def test_chain_hop_is_from_the_chain_run_after_a_chain_not_after_sequential_all_reduces():
    from validate.mitigation_powersgd_probes import ChainProbe

    # a step's chain runs after the previous step's: the hop comes from the "aligned" chain (run
    # right after another), not from the one right after the sequential all-reduces (a fast mode)
    probe = object.__new__(ChainProbe)
    probe.sizes, probe.bufs = [[4, 4, 4]], [[None, None, None]]
    probe.samples = [{"sequential": [1e-3, 1e-3], "chained": [2e-3, 2e-3],
                      "aligned": [[10.0, 10.005], [20.0, 20.007]], "skewed": [[30.0, 30.004], [40.0, 40.004]]}]
    out = probe.result()
    assert out["hop_s"] == [pytest.approx(((5e-3 - 1e-3) / 2 + (7e-3 - 1e-3) / 2) / 2, rel=1e-9)]
    assert out["hop_after_sequential_s"] == [pytest.approx(0.5e-3, rel=1e-9)]


def test_flatten_rate_runs_the_averagers_passes():
    from validate.compute_timing import synthetic_model
    from validate.mitigation_probes import measure_flatten_rate

    module = synthetic_model(2 * PARAMETERS)
    before = [p.detach().clone() for p in module.parameters()]
    out = measure_flatten_rate(module, 2, rounds=3)
    # four passes of the averager (one unmeasured), each dividing by the world size; the
    # parameters left as views of one flat buffer, as average_parameters leaves them
    for p, b in zip(module.parameters(), before):
        torch.testing.assert_close(p.detach(), b / 16, rtol=0, atol=0)
    assert len({p.untyped_storage().data_ptr() for p in module.parameters()}) == 1
    assert out["bytes_per_s"] == pytest.approx(4 * 4 * 2 * PARAMETERS / out["seconds"], rel=1e-12)


def test_post_local_sgd_flatten_rate_measured_once_and_in_its_prediction(report):
    fl = report["flatten"]
    assert len(fl["measured"]) == 2 and fl["bytes_per_s"] == np.median([m["bytes_per_s"] for m in fl["measured"]])
    row = by_name(report)["localsgd:H=2"]
    assert row["remedy"].startswith(f"localsgd:H=2:mem_bw={fl['bytes_per_s']:.0f}B/s")
    assert "cast_rate_step_time_s" in row["predicted"]


def test_post_local_sgd_subgroup_call_measured_once_and_in_its_prediction(report):
    sg = report["subgroup"]
    assert len(sg["measured"]) == 2 and sg["subgroup_overhead"] == np.median([m["seconds"] for m in sg["measured"]])
    assert sg["subgroup_overhead"] > 0 and all(m["samples"] == 7 * 4 for m in sg["measured"])  # 7 rounds x 4
    row = by_name(report)["localsgd:H=2"]
    assert row["remedy"].endswith(f":subgroup_overhead={sg['subgroup_overhead'] * 1e6:.4f}us")
    # one bucket per step, at a rank's compute factor of the step (a Work stage)
    extra = row["predicted_s"] - row["predicted"]["no_subgroup_call_step_time_s"]
    rows = np.asarray(row["compute_rows"])
    assert sg["subgroup_overhead"] * rows.min() * (1 - 1e-6) <= extra <= sg["subgroup_overhead"] * rows.max() * (1 + 1e-6)
    assert "subgroup_overhead" not in by_name(report)["baseline"]["remedy"]


def test_powersgd_wake_probe_measured_once_and_charged_only_where_it_shows(report):
    from validate.mitigation_powersgd_probes import wake_overhead_from_ranks

    ch = report["chain"]
    assert ch["wake_overhead"] == wake_overhead_from_ranks(ch["measured"])
    assert len(ch["wake"]["wake_s"]) == 2  # both ranks' sizes (r = 1 and r = 4)
    for m in ch["measured"]:
        assert [len(w) for w in m["skewed_windows"]] == [7 * 4, 7 * 4]
    for row in report["cases"]:
        if row["case"].startswith("powersgd"):
            assert (":wake_overhead=" in row["remedy"]) == (ch["wake_overhead"] > 0)


def test_wake_overhead_is_the_skewed_chains_excess_after_the_last_launch():
    from validate.mitigation_powersgd_probes import wake_figures, wake_overhead_from_ranks

    # two samples of one size; per sample the span is the last end minus the last start
    a = {"aligned_windows": [[[0.0, 1.0], [10.0, 11.0]]], "skewed_windows": [[[0.0, 4.0], [10.0, 13.5]]]}
    b = {"aligned_windows": [[[0.5, 1.5], [10.0, 11.5]]], "skewed_windows": [[[2.0, 4.5], [10.5, 14.0]]]}
    fig = wake_figures([a, b])
    assert fig["aligned_s"] == [pytest.approx(1.25)] and fig["skewed_s"] == [pytest.approx(3.0)]
    assert wake_overhead_from_ranks([a, b]) == pytest.approx(1.75)
    assert wake_overhead_from_ranks([b, dict(b, skewed_windows=b["aligned_windows"])]) >= 0.0
    faster = {"aligned_windows": [[[0.0, 2.0]]], "skewed_windows": [[[0.0, 1.0]]]}
    assert wake_overhead_from_ranks([faster]) == 0.0


def test_step_blocks_one_step_or_one_period():
    from validate.mitigation_job import step_blocks

    assert step_blocks(4, Case("none")) == [1, 1, 1, 1]
    assert step_blocks(4, Case("powersgd", r=4, slow=True)) == [1, 1, 1, 1]
    assert step_blocks(12, Case("localsgd", H=4)) == [4, 4, 4]  # local steps never wait for a common start
    with pytest.raises(ValueError, match="whole periods"):
        step_blocks(6, Case("localsgd", H=4))


def test_measured_steps_start_each_block_at_its_common_start():
    from validate.mitigation_measured import measured_step_time, measured_steps

    # two ranks, two blocks of two steps: within a block from the previous step's last end
    blocks = [[{"start": 10.0, "ends": [10.5, 11.0]}, {"start": 20.0, "ends": [20.25, 21.0]}],
              [{"start": 10.0, "ends": [10.75, 11.5]}, {"start": 20.0, "ends": [20.5, 20.75]}]]
    assert measured_steps(blocks) == [0.75, 0.75, 0.5, 0.5]
    assert measured_step_time(blocks) == 0.625  # not the 20 - 11.5 s between the blocks


def test_compute_rows_are_the_ranks_samples_side_by_side():
    from validate.mitigation_measured import compute_rows

    # two samples: rank 0 fast then slow, rank 1 the other way (a shared core): the rows keep
    # which rank was slow at each moment; the means are over every rank's samples
    a = {"forward_s": [0.001, 0.003], "backward_s": [0.002, 0.006], "optimizer_s": [0.001, 0.003]}
    b = {"forward_s": [0.003, 0.001], "backward_s": [0.006, 0.002], "optimizer_s": [0.003, 0.001]}
    rows, means = compute_rows([a, b])
    np.testing.assert_allclose(rows, [[0.5, 1.5], [1.5, 0.5]], rtol=1e-12)
    assert means == pytest.approx({"forward_s": 0.002, "backward_s": 0.004, "optimizer_s": 0.002}, rel=1e-12)


def test_step_phases_from_the_ranks_stamps():
    from validate.mitigation_measured import step_phases

    def st(go, ready, hook, reduces, backward, optimizer, end):
        return {"go": go, "ready": ready, "hook": hook, "reduces": reduces, "backward": backward,
                "optimizer": optimizer, "end": end}

    # one PowerSGD step on two ranks: rank 1 ready 5 ms later; the uncompressed all-reduce called
    # back 2 ms after the last launch, P launched 0.1 ms after that, ...
    r0 = st(0.0, 0.010, 0.0101, [{"launch": 0.012, "callback": 0.021}, {"launch": 0.0211, "waited": 0.025},
                                 {"launch": 0.027, "waited": 0.030}], 0.033, 0.034, 0.034)
    r1 = st(0.0, 0.015, 0.0151, [{"launch": 0.019, "callback": 0.021}, {"launch": 0.0212, "waited": 0.025},
                                 {"launch": 0.028, "waited": 0.030}], 0.034, 0.035, 0.035)
    r0["error_set"], r1["error_set"] = 0.032, 0.0325  # the new error assigned in decompress
    ph = step_phases([[r0], [r1]])
    assert ph["decompress"]["mean_s"] == pytest.approx((0.002 + 0.0025) / 2)
    assert ph["finish"]["mean_s"] == pytest.approx((0.001 + 0.0015) / 2)
    assert ph["ready_skew"]["mean_s"] == pytest.approx(0.005)
    assert ph["work_p"]["mean_s"] == pytest.approx((0.0019 + 0.0039) / 2)
    assert ph["reduce_unc"]["mean_s"] == pytest.approx(0.002)  # 0.021 - the last launch 0.019
    assert ph["reduce_p"]["mean_s"] == pytest.approx(0.025 - 0.0212)
    assert ph["q_launch_skew"]["mean_s"] == pytest.approx(0.001)
    assert ph["tail"]["mean_s"] == pytest.approx((0.003 + 0.004) / 2)
    assert ph["flatten"] is None and ph["sync"] is None


def test_case_compute_sampled_in_its_steps_window(report):
    # one hardware sample per timed step (4) on every rank, and the case's compute is their mean
    # (per rank), the median over the ranks: nothing from before or after the steps
    for row in report["cases"]:
        per_rank = row["compute_samples_s"]
        assert len(per_rank) == 2 and all(len(r[k]) == 4 for r in per_rank for k in r)
        for k in ("forward_s", "backward_s", "optimizer_s"):
            assert row["hardware"][k] == pytest.approx(float(np.median([np.mean(r[k]) for r in per_rank])), rel=1e-12)
        assert len(row["measured_steps_s"]) == 4


def test_products_overlap_is_the_time_every_rank_ran_them_at_once():
    from validate.mitigation_measured import products_overlap

    side_by_side = [[[0.0, 1.0], [5.0, 6.0]], [[0.0, 1.0], [5.0, 6.0]]]
    assert products_overlap(side_by_side) == 1.0
    assert products_overlap([[[0.0, 1.0]], [[1.0, 2.0]]]) == 0.0  # one rank after the other
    assert products_overlap([[[0.0, 2.0]], [[1.0, 2.0]]]) == pytest.approx(1.0 / 1.5)
    assert products_overlap([[], []]) is None


def test_powersgd_products_sampled_with_both_ranks_at_once(report):
    # the rate of PowerSGD's products is sampled as its steps run them: the ranks side by side
    rows = by_name(report)
    for r in (1, 4):
        assert 0.0 <= rows[f"powersgd:r={r}"]["products_overlap"] <= 1.0
    assert rows["baseline"]["products_overlap"] is None


def test_powersgd_fresh_writes_measured_once_and_in_every_powersgd_prediction(report):
    from validate.mitigation_powersgd_probes import fresh_bw_from_ranks

    fr = report["fresh"]
    assert len(fr["measured"]) == 2
    for mode in ("aligned", "alone"):
        assert fr["fresh_bw"][mode] == fresh_bw_from_ranks(fr["measured"], mode)
        assert all(m[mode]["samples"] == 7 for m in fr["measured"])  # one per machine round
    for row in report["cases"]:
        if row["case"].startswith("powersgd"):
            # the ranks' hooks side by side without a slow rank, apart with one
            bw = fr["fresh_bw"]["alone" if row["slow_rank"] else "aligned"]
            assert f":fresh_bw={bw:.0f}B/s" in row["remedy"]
            assert "mapped_writes_step_time_s" in row["predicted"]
        else:
            assert "fresh_bw" not in row["remedy"]
