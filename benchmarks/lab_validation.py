"""The model against a cluster in a box: commsim.lab's namespaces, shaped links, gloo ranks.

    python benchmarks/lab_validation.py [--rate 100Mbit] [--out DIR] [--quick] [--json OUT.json]

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), iproute2 and torch. Three parts, each in a lab of its
own (removed afterwards, also on Ctrl-C):

1. links: one TCP stream between two nodes at the lab's rate, at half of it (a slow node's
   link, both directions), and at 10 Gbit/s (in effect unshaped: what this machine's CPUs can
   move through the veths and the bridge). The network bounds the time when the last is far
   above the first.
2. scaling: 8 nodes x 2 gloo ranks. Per-level sweeps (2 ranks on node 0; 1 rank on each of
   nodes 0 and 1) written as nccl-tests logs and fitted by `commsim calibrate --from-nccl-tests
   --in-place`'s code; the simulator's ring under that calibration predicts 4 and 8 nodes x 1
   and 2 ranks; median / max |busbw error| per layout at network-bound sizes (the bandwidth
   term >= 80% of the predicted time). all_reduce, all_gather and reduce_scatter.
3. stragglers: 4 nodes x 1 rank replaying one scenario with no straggler, a slow_rank, a
   throttle and a slow_link at half rate (lab node 4 shaped); measured vs simulated step time
   and straggler cost, and the straggler the measurements name.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from commsim.atomic import atomic_write_text  # noqa: E402
from commsim.cli.outputs import check_script_outputs  # noqa: E402
from commsim.lab import Lab, LabSpec, check, describe_rate, parse_bits, signals_raise  # noqa: E402
from commsim.lab.stream import stream_rate  # noqa: E402
from commsim.scenario.spec import SlowLink, SlowRank, Throttle  # noqa: E402
from validate.lab_validation import lab_scenario, scaling_check, straggler_check, with_stragglers  # noqa: E402

KB, MB = 1 << 10, 1 << 20


def links(rate: float, name: str) -> dict:
    spec = LabSpec(nodes=3, rate_bps=rate, name=name, slow={2: rate / 2})
    with Lab(spec) as lab:
        out = {"shaped_bps": stream_rate(lab, 0, 1), "into_slow_bps": stream_rate(lab, 0, 2),
               "out_of_slow_bps": stream_rate(lab, 2, 1)}
    with Lab(LabSpec(nodes=2, rate_bps=10e9, name=name)) as lab:
        out["cpu_bound_bps"] = stream_rate(lab, 0, 1, nbytes=512 * MB)
    print(f"## links at {describe_rate(rate)}: one TCP stream")
    for key, label in (("shaped_bps", "shaped link"), ("into_slow_bps", "into the half-rate node"),
                       ("out_of_slow_bps", "out of the half-rate node"), ("cpu_bound_bps", "10 Gbit/s shaper (CPU-bound)")):
        print(f"  {label:32s} {out[key] / 1e6:9.1f} Mbit/s  ({out[key] / out['shaped_bps']:.2f} x shaped)")
    return out


def scaling(rate: float, name: str, out_dir: str, quick: bool) -> dict:
    sizes = [16 * KB * 4 ** k for k in range(5)] + [8 * MB]  # 16 KiB .. 4 MiB, 8 MiB
    collectives = ("all_reduce",) if quick else ("all_reduce", "all_gather", "reduce_scatter")
    t0 = time.monotonic()
    with Lab(LabSpec(nodes=8, rate_bps=rate, name=name)) as lab:
        rep = scaling_check(lab, 8, 2, [(4, 1), (4, 2), (8, 1), (8, 2)], sizes, os.path.join(out_dir, "scaling"),
                            collectives=collectives, iters=3 if quick else 5, timeout_s=300)
    took = time.monotonic() - t0
    print(f"## scaling ({took:.0f} s): calibration from 2 nodes")
    for lv in rep["calibration"].levels:
        print(f"  {lv.level}: alpha {lv.alpha_s * 1e6:.1f} us, beta {lv.beta_Bps * 8 / 1e6:.1f} Mbit/s")
    print(f"  {'layout':6s} {'collective':15s} {'size':>9s} {'measured':>10s} {'predicted':>10s} {'error':>8s}  bound")
    for c in rep["compared"]:
        print(f"  {c['layout']:6s} {c['collective']:15s} {c['size_bytes']:9d} {c['busbw_Bps'] * 8e-6:7.1f} Mb "
              f"{c['predicted_busbw_Bps'] * 8e-6:7.1f} Mb {c['error_pct']:+7.1f}%  {'net' if c['network_bound'] else '-'}")
    print("  per-size time: median of the iterations (both sides)")
    print(check.format_summary(rep["summary"]))
    print("  the same with the mean of the iterations (nccl-tests' convention)")
    print(check.format_summary(rep["summary_other"]))
    return {"seconds": took, "summary_mean": rep["summary_other"], "calibration": {lv.level: {"alpha_s": lv.alpha_s, "beta_Bps": lv.beta_Bps}
                                             for lv in rep["calibration"].levels},
            "compared": rep["compared"], "summary": rep["summary"]}


def stragglers(rate: float, name: str, out_dir: str, quick: bool) -> dict:
    base = lab_scenario(4, steps=5 if quick else 8)
    fast, with_slow = [0, 1, 2, 3], [0, 1, 2, 4]
    cases = [("none", base, fast),
             ("slow_rank", with_stragglers(base, "slow_rank", SlowRank((2,), 1.5)), fast),
             ("throttle", with_stragglers(base, "throttle", Throttle((1,), 1.0, 1.0, 0.5)), fast),
             ("slow_link", with_stragglers(base, "slow_link", SlowLink(0.5, node=3)), with_slow)]
    t0 = time.monotonic()
    with Lab(LabSpec(nodes=5, rate_bps=rate, name=name)) as lab:
        rep = straggler_check(lab, cases, [16 * KB * 4 ** k for k in range(5)], os.path.join(out_dir, "stragglers"),
                              timeout_s=300)
    took = time.monotonic() - t0
    print(f"## stragglers ({took:.0f} s): 4 nodes x 1 rank, {base.steps} steps each")
    print(f"  {'case':10s} {'measured':>10s} {'predicted':>10s} {'error':>8s} {'cost meas':>10s} {'cost pred':>10s}  named")
    errors = []
    for c in rep["cases"]:
        m, p, e = c["comparison"]["measured"], c["comparison"]["predicted"], c["comparison"]["error_pct"]
        errors.append(abs(e["step_time_mean"]))
        cost = ("-" if m["straggler_cost_s"] is None else f"{m['straggler_cost_s'] * 1e3:.0f} ms",
                "-" if p["straggler_cost_s"] is None else f"{p['straggler_cost_s'] * 1e3:.0f} ms")
        print(f"  {c['case']:10s} {m['step_time_s']['mean'] * 1e3:7.1f} ms {p['step_time_s']['mean'] * 1e3:7.1f} ms "
              f"{e['step_time_mean']:+7.1f}% {cost[0]:>10s} {cost[1]:>10s}  {c['found_text']}")
    print(f"  median |step time error| {statistics.median(errors):.1f} %")
    return {"seconds": took, "cases": [{k: c[k] for k in ("case", "nodes", "comparison", "measured_scenario_comm_time_s",
                                                         "found", "found_text")}
                                       for c in rep["cases"]]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="100Mbit", help="every node's link rate (default 100Mbit)")
    ap.add_argument("--out", default="lab-validation", help="folder for the measurements (default ./lab-validation)")
    ap.add_argument("--quick", action="store_true", help="all_reduce only, fewer iterations and steps")
    ap.add_argument("--json", default=None, help="write the figures here")
    a = ap.parse_args(argv)
    check_script_outputs(ap, {"--json": a.json})  # before the minutes of measuring
    rate = parse_bits(a.rate)
    name = f"b{os.getpid() % 100000}"
    doc = {"rate_bps": rate}
    with signals_raise():
        doc["links"] = links(rate, name)
        doc["scaling"] = scaling(rate, name, a.out, a.quick)
        doc["stragglers"] = stragglers(rate, name, a.out, a.quick)
    if a.json:
        atomic_write_text(a.json, json.dumps(doc, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
