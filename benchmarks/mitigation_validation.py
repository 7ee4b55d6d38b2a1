"""commsim's mitigation model against real DDP communication hooks on gloo.

    python benchmarks/mitigation_validation.py [--nprocs 2] [--calibration CAL.yaml] [--steps 12]
        [--parameters 4.2e6] [--bucket-cap 4MB] [--slow-stall 30ms] [--no-bf16] [--json OUT.json]

Runs validate.mitigation_job's cases (no hook, fp16_compress_hook, bf16_compress_hook,
powerSGD_hook at rank 1 and 4, post-local SGD with H=4; each without and with a slow rank, rank 1
stalled before every forward) on `--nprocs` local gloo ranks, one rank per node (so post-local
SGD's subgroup is the rank itself), and prints measured vs predicted mean step time per case and
the median |error|. The prediction is commsim's hook model with the hardware measured by the job
(compute, cast bandwidth, matmul rate, small-op cost) and a gloo calibration: `--calibration`
(from ``commsim calibrate --backend gloo --level inter_node``), else one measured first, the same
way. Nothing is fitted per case.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from commsim.calibration.file import load_calibration  # noqa: E402
from commsim.units import parse_size, parse_time  # noqa: E402
from validate.calibrate import measure_calibration  # noqa: E402
from validate.mitigation_job import bf16_hook_supported, default_cases, run_cases, scenario_for  # noqa: E402

def table(report: dict) -> str:
    lines = [f"{'case':26s} {'measured':>10s} {'predicted':>10s} {'error':>8s}   measured hardware (fwd/bwd/opt, "
             "cast, matmul, small op)"]
    for r in report["cases"]:
        hw = r["hardware"]
        lines.append(f"{r['case']:26s} {r['measured_s'] * 1e3:8.1f}ms {r['predicted_s'] * 1e3:8.1f}ms "
                     f"{r['error'] * 100:+7.1f}%   {hw['forward_s'] * 1e3:.1f}/{hw['backward_s'] * 1e3:.1f}/"
                     f"{hw['optimizer_s'] * 1e3:.1f} ms, {hw['mem_bw'] / 1e9:.2f} GB/s, {hw['flops'] / 1e9:.1f} "
                     f"GFLOP/s, {hw['kernel_overhead'] * 1e6:.1f} us")
    lines.append(f"median |error| {report['median_abs_error'] * 100:.1f}% over {len(report['cases'])} cases")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--calibration", help="gloo calibration YAML (default: measure one first)")
    ap.add_argument("--steps", type=int, default=12, help="timed steps per case (a multiple of H=4)")
    ap.add_argument("--parameters", type=float, default=4 * (1024 * 1024 + 1024))
    ap.add_argument("--bucket-cap", default="32MB", help="DDP's bucket cap; at least the gradient's bytes "
                    "(one bucket) for powerSGD_hook on gloo (validate.mitigation_job, POWERSGD_ONE_BUCKET)")
    ap.add_argument("--slow-stall", default="30ms", help="rank 1's stall before every forward in the slow cases")
    ap.add_argument("--no-bf16", action="store_true", help="skip bf16_compress_hook (skipped anyway where "
                    "this torch build cannot run it: it needs CUDA and NCCL 2.10+)")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--json", dest="json_path")
    args = ap.parse_args(argv)
    sc = scenario_for(args.nprocs, args.parameters, parse_size(args.bucket_cap), args.steps)
    if args.calibration:
        cal = load_calibration(args.calibration)
    else:
        cal = measure_calibration("gloo", args.nprocs, max_size=int(2 * parse_size(args.bucket_cap) + 4 * args.parameters),
                                  iters=10, level="inter_node", command="benchmarks/mitigation_validation.py")
    report = run_cases(sc, cal, default_cases(bf16=bf16_hook_supported() and not args.no_bf16), args.nprocs, parse_time(args.slow_stall),
                       timeout_s=args.timeout)
    if not bf16_hook_supported():
        print("# bf16_compress_hook: not run (this torch build runs it only with CUDA and NCCL 2.10+)")
    print(table(report))
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
