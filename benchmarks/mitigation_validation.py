"""commsim's mitigation model against real DDP communication hooks on gloo.

    python benchmarks/mitigation_validation.py [--nprocs 2] [--calibration CAL.yaml] [--steps 12]
        [--parameters 4.2e6] [--bucket-cap 32MB] [--slow-stall 30ms] [--no-bf16]
        [--cal-repeats 3] [--cal-iters 20] [--machine-rounds 44] [--json OUT.json]

Runs validate.mitigation_cases' cases (no hook, fp16_compress_hook, bf16_compress_hook,
powerSGD_hook at rank 1 and 4, post-local SGD with H=4; each without and with a slow rank, rank 1
stalled before every forward) on `--nprocs` local gloo ranks, one rank per node (so post-local SGD's
subgroup is the rank itself), and prints measured vs predicted mean step time per case and the
median |error|. The prediction is commsim's hook model with the hardware measured by the job
(compute, cast bandwidth, the rate of each of PowerSGD's three products at its shape, small-op
cost), the buckets each case's DDP built (``ddp.bucket_sizes``), and the job's once-per-machine
figures, whose `--machine-rounds` rounds in all are interleaved with the cases (a share before each
and after the last: a burst of load falls on both) and summarized by means (a mean step time carries
the mean of each cost): DDP's own costs and the ranks' compute jitter about each other
(validate.mitigation_probes.DDPCostProbe, validate.mitigation_measured.compute_jitter_cv; the
predictions draw the ranks' spread from each case's per-rank samples,
validate.mitigation_measured.compute_rows), powerSGD_hook's chained all-reduces against sequential
ones (the PowerSGD remedy's ``chain_overhead``: validate.mitigation_powersgd_probes.ChainProbe;
those rows also print the prediction without it), the rate of post-local SGD's flatten and divide
(the post-local SGD remedy's ``mem_bw``: validate.mitigation_probes.FlattenProbe), the call of
post-local SGD's one-rank subgroup all-reduce on a local step (its ``subgroup_overhead``:
validate.mitigation_probes.SubgroupReduceProbe), the chain again with one rank arriving late (a
blocked rank's wake-up: PowerSGD's ``wake_overhead``, charged where it shows), the backend's 16-bit
all-reduce against fp32's (the fp16 remedy's ``reduce_bytes``:
validate.mitigation_probes.ReduceDtypeProbe; the fp16 rows also print the prediction without it) and
a gloo calibration: `--calibration` (from ``commsim calibrate --backend gloo --level inter_node``),
else one measured first (:func:`robust_calibration`: `--cal-repeats` sweeps of `--cal-iters`
iterations, each size's time the median of its in-place and out-of-place times over every sweep).
Nothing is fitted per case.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import statistics  # noqa: E402

from commsim import calibration as calib  # noqa: E402
from commsim.atomic import atomic_write_text  # noqa: E402
from commsim.cli.outputs import check_script_outputs  # noqa: E402
from commsim.calibration.file import load_calibration  # noqa: E402
from commsim.errors import InputError  # noqa: E402
from commsim.units import parse_size, parse_time  # noqa: E402
from validate import collective_bench  # noqa: E402
from validate.calibrate import rank_calibrate  # noqa: E402
from validate.collectives_multi import versions  # noqa: E402
from validate.launch import launch  # noqa: E402
from validate.mitigation_cases import MACHINE_ROUNDS, bf16_hook_supported, default_cases  # noqa: E402
from validate.mitigation_prediction import run_cases, scenario_for  # noqa: E402

DISAGREE = 0.25  # in-place vs out-of-place: a size whose two medians differ by more is reported


def robust_calibration(nprocs: int, max_size: int, repeats: int, iters: int, warmup: int = 3,
                       timeout_s: float = 300.0, echo=print):
    """A gloo calibration robust to a shared machine's noise: `repeats` all-reduce sweeps (each a
    launch of ``commsim calibrate``'s ranks, `iters` timed iterations per size), each size's time
    the median of its in-place and out-of-place times over all sweeps (torch's all-reduce is in
    place; on an idle machine the two agree, and their median discards one sweep's hiccup). Sizes
    whose in-place and out-of-place medians still differ by more than :data:`DISAGREE` are
    printed. Returns (calibration, per-size figures)."""
    sizes = collective_bench.sweep_sizes(8, max_size)
    echo(f"# gloo calibration: {repeats} sweeps of all_reduce {sizes[0]}..{sizes[-1]} B on {nprocs} ranks, "
         f"warmup {warmup}, iters {iters}")
    sweeps = []
    for _ in range(repeats):
        results = launch(rank_calibrate, nprocs, "gloo", timeout_s, args=(sizes, warmup, iters, 0, 1))
        rows = results[0]["rows"]
        wrong = [r["size_bytes"] for r in rows for g in ("out_of_place", "in_place") if r[g]["wrong"]]
        if wrong:
            raise calib.CalibrationError(f"all-reduce gave wrong sums at sizes {wrong}: not calibrating on a broken run")
        sweeps.append(rows)
    figures = []
    for i, size in enumerate(sizes):
        inp = [sw[i]["in_place"]["time_s"] for sw in sweeps]
        out = [sw[i]["out_of_place"]["time_s"] for sw in sweeps]
        both = statistics.median(inp + out)
        figures.append({"size_bytes": size, "time_s": both, "in_place_s": statistics.median(inp),
                        "out_of_place_s": statistics.median(out)})
        ratio = statistics.median(out) / statistics.median(inp)
        if size >= 1 << 20 and abs(ratio - 1) > DISAGREE:
            echo(f"#   {size} B: in-place {statistics.median(inp) * 1e3:.2f} ms, out-of-place "
                 f"{statistics.median(out) * 1e3:.2f} ms disagree (x{ratio:.2f}); their median {both * 1e3:.2f} ms")
    link = calib.fit_link("inter_node", [calib.Measurement(f["size_bytes"], f["time_s"], nprocs) for f in figures])
    prov = calib.Provenance(backend="gloo", world_size=nprocs, date=calib.utc_now_iso(),
                            command="benchmarks/mitigation_validation.py", **versions("gloo"))
    echo(f"# fitted: alpha {link.alpha_s * 1e6:.1f} us, beta {link.beta_Bps / 1e9:.3f} GB/s")
    return calib.Calibration((link,), prov, None), figures

PHASES = ("go_skew", "compute", "ready_skew", "sync", "hook_entry", "work_p", "reduce_unc", "unpack", "p_launch_skew", "reduce_p", "work_q",
          "q_launch_skew", "reduce_q", "tail", "decompress", "finish", "optimizer", "flatten", "avg_launch_skew", "average_reduce")


def phase_lines(report: dict) -> list:
    """Per case, the ranks' stamped phases of its timed steps (validate.mitigation_measured.step_phases):
    mean / median ms."""
    lines = ["the ranks' stamped phases per case, mean/median ms (validate.mitigation_measured.step_phases):"]
    for r in report["cases"]:
        ph = r.get("phases") or {}
        parts = [f"{k} {v['mean_s'] * 1e3:.1f}/{v['median_s'] * 1e3:.1f}" for k in PHASES
                 if (v := ph.get(k)) is not None]
        lines.append(f"  {r['case']:26s} " + ", ".join(parts))
    return lines


def table(report: dict) -> str:
    lines = [f"{'case':26s} {'measured':>10s} {'predicted':>10s} {'error':>8s}   measured hardware (fwd/bwd/opt, "
             "cast, matmul, small op)"]
    for r in report["cases"]:
        hw = r["hardware"]
        lines.append(f"{r['case']:26s} {r['measured_s'] * 1e3:8.1f}ms {r['predicted_s'] * 1e3:8.1f}ms "
                     f"{r['error'] * 100:+7.1f}%   {hw['forward_s'] * 1e3:.1f}/{hw['backward_s'] * 1e3:.1f}/"
                     f"{hw['optimizer_s'] * 1e3:.1f} ms, {hw['mem_bw'] / 1e9:.2f} GB/s, {hw['flops'] / 1e9:.1f} "
                     f"GFLOP/s, {hw['kernel_overhead'] * 1e6:.1f} us")
    rd = report.get("reduce_dtypes") or {}
    for dtype, rb in sorted((rd.get("reduce_bytes") or {}).items()):
        per_rank = rd["measured"][0]
        sizes = ", ".join(f"{n / 1e6:.2g} M: {t16 * 1e3:.2f} vs {t32 * 1e3:.2f} ms" for n, t16, t32 in
                          zip(per_rank["elements"], per_rank[f"{dtype}_s"], per_rank["fp32_s"]))
        lines.append(f"{dtype} all-reduce vs fp32 (measured once, rank 0): {sizes}; reduce_bytes {rb:.2f}")
    for r in report["cases"]:
        if "bytes_model_step_time_s" in r["predicted"]:
            b = r["predicted"]["bytes_model_step_time_s"]
            lines.append(f"  {r['case']}: with the bytes model (no measured rate) {b * 1e3:.1f} ms, "
                         f"{(b - r['measured_s']) / r['measured_s'] * 100:+.1f}%")
    ch = report.get("chain") or {}
    if ch.get("chain_overhead") is not None:
        m = ch["measured"][0]
        sizes = ", ".join(f"{'/'.join(str(n) for n in sz)} elements: chained after sequential ones {c * 1e3:.2f} "
                          f"vs sequential {q * 1e3:.2f} ms (medians); hop after a chain {h * 1e3:.2f}, after "
                          f"sequential ones {hs * 1e3:.2f} ms (means)"
                          for sz, c, q, h, hs in zip(m["sizes"], m["chained_s"], m["sequential_s"], m["hop_s"],
                                                     m.get("hop_after_sequential_s", m["hop_s"])))
        lines.append(f"powerSGD_hook's chained all-reduces (measured once, rank 0): {sizes}; "
                     f"chain_overhead {ch['chain_overhead'] * 1e3:.2f} ms per hop")
    if ch.get("wake"):
        w = ch["wake"]
        sizes = ", ".join(f"aligned {a * 1e3:.2f} vs skewed {k * 1e3:.2f} ms" for a, k in zip(w["aligned_s"], w["skewed_s"]))
        lines.append(f"the chain after its last launch, ranks aligned vs one rank late (a blocked rank's wake-up), "
                     f"per size: {sizes}; wake_overhead {ch['wake_overhead'] * 1e3:.2f} ms"
                     + ("" if ch["wake_overhead"] > 0 else " (none shown: not charged)"))
    sg = report.get("subgroup") or {}
    if sg.get("subgroup_overhead") is not None:
        m = sg["measured"][0]
        lines.append(f"post-local SGD's one-rank subgroup all-reduce call (measured once, rank 0): mean "
                     f"{m['seconds'] * 1e3:.2f} ms, median {m['median_s'] * 1e3:.2f}, max {m['max_s'] * 1e3:.2f} "
                     f"({m['samples']} calls); subgroup_overhead {sg['subgroup_overhead'] * 1e3:.2f} ms per bucket")
    fl = report.get("flatten") or {}
    if fl.get("bytes_per_s") is not None:
        m = fl["measured"][0]
        lines.append(f"post-local SGD's flatten + divide (measured once, rank 0): {m['seconds'] * 1e3:.2f} ms, "
                     f"{m['bytes_per_s'] / 1e9:.2f} GB/s; the median over ranks {fl['bytes_per_s'] / 1e9:.2f} GB/s")
    fr = report.get("fresh") or {}
    if fr.get("fresh_bw") is not None:
        for mode, bw in fr["fresh_bw"].items():
            m = fr["measured"][0][mode]
            lines.append(f"powerSGD_hook's writes into new memory, the ranks {mode} (measured once, rank 0): clone "
                         f"{m['clone_s'] * 1e3:.2f} ms, new error {m['error_s'] * 1e3:.2f} ms, add in place "
                         f"{m['add_s'] * 1e3:.2f} ms ({m['mapped_bytes_per_s'] / 1e9:.2f} GB/s); fresh_bw, the median "
                         f"over ranks, {bw / 1e9:.2f} GB/s")
    for r in report["cases"]:
        if "cast_rate_step_time_s" in r["predicted"]:
            b = r["predicted"]["cast_rate_step_time_s"]
            lines.append(f"  {r['case']}: with the averaging at the cast's rate {b * 1e3:.1f} ms, "
                         f"{(b - r['measured_s']) / r['measured_s'] * 100:+.1f}%")
    for r in report["cases"]:
        for key, what in (("no_subgroup_call_step_time_s", "without subgroup_overhead"),
                          ("equal_products_step_time_s", "with the three products at one rate"),
                          ("unwoken_step_time_s", "without wake_overhead"),
                          ("mapped_writes_step_time_s", "without fresh_bw")):
            b = r["predicted"].get(key)
            if b is not None and (key != "unwoken_step_time_s" or ":wake_overhead=" in r["remedy"]):
                lines.append(f"  {r['case']}: {what} {b * 1e3:.1f} ms, {(b - r['measured_s']) / r['measured_s'] * 100:+.1f}%")
        if "unchained_step_time_s" in r["predicted"]:
            b = r["predicted"]["unchained_step_time_s"]
            lines.append(f"  {r['case']}: without chain_overhead {b * 1e3:.1f} ms, "
                         f"{(b - r['measured_s']) / r['measured_s'] * 100:+.1f}%")
        if r.get("products_overlap") is not None:
            lines.append(f"  {r['case']}: PowerSGD's products sampled at {r['hardware']['powersgd_flops'] / 1e9:.2f} "
                         f"GFLOP/s, {r['products_overlap'] * 100:.0f}% of it with both ranks at once")
        avg = r["evidence"][0].get("averaged")
        if avg and "measured_steps_s" in r:
            steps = r["measured_steps_s"]
            on = [t for t, a in zip(steps, avg) if a]
            off = [t for t, a in zip(steps, avg) if not a]
            if on and off:
                lines.append(f"  {r['case']}: measured steps with the averaging {sum(on) / len(on) * 1e3:.1f} ms "
                             f"({len(on)}), local {sum(off) / len(off) * 1e3:.1f} ms ({len(off)})")
    for r in report["cases"]:
        b = r["predicted"].get("jitter_model_step_time_s")
        if b is not None:
            lines.append(f"  {r['case']}: with a gamma jitter (cv {report['ddp_costs']['jitter_cv']:.3f}) in place of the "
                         f"sampled rows {b * 1e3:.1f} ms, {(b - r['measured_s']) / r['measured_s'] * 100:+.1f}%")
    lines += phase_lines(report)
    layouts = {}
    for r in report["cases"]:
        b = r.get("ddp_buckets")
        if b:
            layouts.setdefault((tuple(b["built_bytes"]), tuple(b["nominal_bytes"])), []).append(r["case"])
    for (built, nominal), names in layouts.items():
        mb = (lambda sizes: ", ".join(f"{x / 1e6:.2f}" for x in sizes))
        lines.append(f"DDP's buckets as built (the prediction's ddp.bucket_sizes), {len(names)} cases: "
                     f"{mb(built)} MB; nominal {mb(nominal)} MB")
    c = report["ddp_costs"]
    u = c["used"]
    lines.append(f"DDP's own costs (once for the machine, every case): bucket_overhead {u['bucket_overhead'] * 1e3:.2f} ms, "
                 f"memory_bandwidth {u['memory_bandwidth'] / 1e9:.1f} GB/s, overlap_slowdown "
                 f"{u['overlap_slowdown']:.2f}, compute jitter cv {c['jitter_cv']:.3f} (ranks about each other, "
                 f"MAD; {len(c['measured'][0]['samples']['nosync'])} rounds among the cases); the bucket's all-reduce measured {c['allreduce_measured_s'] * 1e3:.1f} "
                 f"ms, calibrated {c['allreduce_calibrated_s'] * 1e3:.1f} ms")
    lines.append(f"median |error| {report['median_abs_error'] * 100:.1f}% over {len(report['cases'])} cases")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nprocs", type=int, default=2, help="local gloo ranks, one per node")
    ap.add_argument("--calibration", help="gloo calibration YAML (default: measure one first)")
    ap.add_argument("--steps", type=int, default=12, help="timed steps per case (a multiple of H=4)")
    ap.add_argument("--parameters", type=float, default=4 * (1024 * 1024 + 1024), help="fp32 parameters of the DDP model")
    ap.add_argument("--bucket-cap", default="32MB", help="DDP's bucket cap; at least the gradient's bytes "
                    "(one bucket) for powerSGD_hook on gloo (validate.mitigation_cases, POWERSGD_ONE_BUCKET)")
    ap.add_argument("--slow-stall", default="30ms", help="rank 1's stall before every forward in the slow cases")
    ap.add_argument("--no-bf16", action="store_true", help="skip bf16_compress_hook (skipped anyway where "
                    "this torch build cannot run it: it needs CUDA and NCCL 2.10+)")
    ap.add_argument("--cal-repeats", type=int, default=3, help="calibration sweeps (median over them)")
    ap.add_argument("--cal-iters", type=int, default=20, help="timed iterations per size in each sweep")
    ap.add_argument("--machine-rounds", type=int, default=MACHINE_ROUNDS,
                    help="rounds in all of the job's once-per-machine measurements, interleaved with the cases")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds the cases' torch job may run before it is stopped (the calibration sweeps have their own 300 s)")
    ap.add_argument("--json", dest="json_path", help="also write every figure here")
    args = ap.parse_args(argv)
    check_script_outputs(ap, {"--json": args.json_path})  # before the minutes of measuring
    try:  # the options' units, before any measuring
        bucket_cap, slow_stall = parse_size(args.bucket_cap), parse_time(args.slow_stall)
    except ValueError as exc:  # commsim.units.UnitError: what was expected and what was given
        ap.error(f"--bucket-cap/--slow-stall: {exc}")
    if args.nprocs < 2 or args.steps < 1:
        ap.error(f"--nprocs: at least 2 ranks, --steps at least 1; got {args.nprocs} and {args.steps}")
    sc = scenario_for(args.nprocs, args.parameters, bucket_cap, args.steps)
    figures = None
    if args.calibration:
        try:
            cal = load_calibration(args.calibration)
        except InputError as exc:  # one line naming the file and what is wrong, not a traceback
            ap.error(f"--calibration: {exc}")
    else:
        # up to twice the gradient's bytes: the bucket (all of it) within the sweep
        cal, figures = robust_calibration(args.nprocs, int(8 * args.parameters), args.cal_repeats, args.cal_iters)
    report = run_cases(sc, cal, default_cases(bf16=bf16_hook_supported() and not args.no_bf16), args.nprocs,
                       slow_stall, timeout_s=args.timeout, machine_rounds=args.machine_rounds)
    report["calibration"] = figures
    if not bf16_hook_supported():
        print("# bf16_compress_hook: not run (this torch build runs it only with CUDA and NCCL 2.10+)")
    print(table(report))
    if args.json_path:
        atomic_write_text(args.json_path, json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
