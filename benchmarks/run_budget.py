"""The run budget's estimate (commsim/scenario/budget.py) against measured runs on this machine.

    python benchmarks/run_budget.py [--nodes 32,256] [--steps 1000] [--repeats 3] [--json OUT.json]

Per node count (8 GPUs per node, 100M fp32 parameters, jitter cv 0.05: the (steps, ranks) records
dominate the memory) each repeat runs in a fresh interpreter what ``commsim run`` does (the
scenario, its straggler-free baseline, the summary) and reports its CPU seconds and peak resident
set (VmHWM) beside :func:`commsim.scenario.budget.estimate`'s seconds and bytes. The estimate
guards ``commsim run`` against runs of more than ten minutes or more memory than the machine has;
its per-operation constants were measured on one machine, so its seconds are that machine's and
the ratio measured / estimated is this machine's speed against it. Memory does not depend on the
machine, and the test suite checks it (tests/unit/scenario/test_budget.py); the seconds are
measured here, by hand, not asserted in the suite. Needs Linux (/proc/self/status).

Measured (``--repeats 2``, a 2-core AMD EPYC VM, 2026-12-02): 256 ranks 0.87 s against 0.23 s
estimated (x3.8), 2,048 ranks 1.34 s against 0.44 s (x3.0), peak 57 / 208 MiB against 88 / 254 MiB
estimated; on the machine the constants came from, 0.36-0.64 s at 2,048 ranks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's commsim, as the measured runs (cwd ROOT) use

from commsim.atomic import atomic_write_text  # noqa: E402
from commsim.cli.outputs import check_script_outputs  # noqa: E402

# One measured run, in a fresh interpreter (its own peak resident set).
MEASURE = r"""
import json, sys, time
from commsim.scenario.loader import parse_scenario
from commsim.scenario.budget import estimate
from commsim.sim.engine import simulate
from commsim.analysis.report import summarize
sc = parse_scenario(json.loads(sys.argv[1]), "mid.yaml")
start = time.process_time()
result = simulate(sc)
baseline = simulate(sc.without_stragglers())
summarize(sc, result, baseline)  # what `commsim run` does
seconds = time.process_time() - start
# VmHWM, not ru_maxrss: ru_maxrss survives exec, so a child forked from a large pytest process
# would report the parent's resident set (646 MB in a full CI run against 202 MB alone)
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) * 1024
est = estimate(sc)
print(json.dumps({"peak": peak, "seconds": seconds, "est_memory": est.memory_bytes, "est_seconds": est.seconds}))
"""


def scenario_doc(nodes: int, steps: int) -> dict:
    """The measured scenario: `nodes` x 8 GPUs, `steps` steps, jitter on every rank."""
    return {
        "steps": steps,
        "cluster": {"nodes": nodes, "gpus_per_node": 8, "intra_node": {"bandwidth": "300 GB/s"},
                    "inter_node": {"bandwidth": "100 Gbps"}},
        "model": {"parameters": 1e8, "grad_dtype": "fp32"},
        "compute": {"forward": "100 ms", "backward": "200 ms"},
        "ddp": {"bucket_cap": "100 MB", "first_bucket": "1 MB"},
        "stragglers": [{"kind": "jitter", "cv": 0.05}],
    }


def measure(doc: dict, timeout: float = 120.0) -> dict:
    """One run of `doc` in a fresh interpreter: peak, seconds, est_memory, est_seconds."""
    out = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(doc)], cwd=ROOT, capture_output=True,
                         text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "measurement failed")
    return json.loads(out.stdout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="32,256", help="node counts, comma-separated (8 GPUs each)")
    ap.add_argument("--steps", type=int, default=1000, help="steps per run")
    ap.add_argument("--repeats", type=int, default=3, help="runs per node count (the median is shown)")
    ap.add_argument("--json", default=None, help="also write every run here")
    args = ap.parse_args(argv)
    try:
        nodes = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        ap.error(f"--nodes: expected integers separated by commas, got {args.nodes!r}")
    if any(n < 1 for n in nodes) or args.steps < 1 or args.repeats < 1:
        ap.error("--nodes, --steps and --repeats must be >= 1")
    check_script_outputs(ap, {"--json": args.json})  # before the runs
    rows = []
    print(f"{'ranks':>7} {'steps':>6} {'seconds':>8} {'estimated':>9} {'ratio':>6} {'peak MiB':>9} {'est MiB':>8}")
    for n in nodes:
        runs = [measure(scenario_doc(n, args.steps)) for _ in range(args.repeats)]
        sec = statistics.median(r["seconds"] for r in runs)
        peak = statistics.median(r["peak"] for r in runs)
        est_s, est_m = runs[0]["est_seconds"], runs[0]["est_memory"]
        print(f"{n * 8:>7,} {args.steps:>6} {sec:>8.2f} {est_s:>9.2f} {sec / est_s:>6.2f} "
              f"{peak / 2**20:>9.0f} {est_m / 2**20:>8.0f}", flush=True)
        rows.append({"nodes": n, "ranks": n * 8, "steps": args.steps, "runs": runs})
    if args.json:
        atomic_write_text(args.json, json.dumps({"rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # piped into head
        sys.exit(0)
