"""Blame and import on real jobs recorded here: detection rate, delay error, step-time error.

    python benchmarks/blame_accuracy.py [--repeats 2] [--nprocs 2 4] [--steps 12] [--delay 0.2] [--json PATH]

Every job is a real gloo DDP job of `validate/trace_job.py` (torch.profiler traces per rank),
recorded fresh on this machine:

- delay: `--delay` seconds slept in the middle of one rank's backward (its middle layer's
  backward hook) every step, the last rank. Detection rate: the share of steps whose critical
  path `blame` attributes to that rank; delay error: |estimate - delay| / delay, the estimate
  being the culprit's median lateness (no culprit named: counted as a miss, error 100%);
- healthy: nothing injected. False alarms: the culprits named (none expected), and the share
  of steps in which some rank was late above noise at all;
- import: the healthy job and one with a slow rank (every layer of the last rank 1.5x as
  long), imported; the scenario's simulated mean step time against the mean step time
  measured from the traces, and against the job's own clock (the ranks' `time.time` at every
  step end).

Run by hand (minutes): it is a measurement of this machine, not a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from commsim.atomic import atomic_write_text  # noqa: E402
from commsim.cli.outputs import check_script_outputs  # noqa: E402
from commsim.sim.engine import simulate  # noqa: E402
from commsim.traces import blame_traces, import_traces  # noqa: E402
from validate.trace_job import measured_step_time, record  # noqa: E402


def _traces(results):
    return [r["trace"] for r in results]


def delay_case(nprocs, steps, delay):
    with tempfile.TemporaryDirectory(prefix="commsim-blame-") as d:
        who = nprocs - 1
        results = record(d, nprocs=nprocs, steps=steps, delay_s=delay, delay_rank=who)
        rep = blame_traces(_traces(results)).report
    per_step = rep["per_step"]
    named = [st["rank"] for st in per_step if st["set_by"] == "rank"]
    culprit = next((c for c in rep["culprits"] if c["rank"] == who), None)
    est = culprit["delay_estimate_s"] if culprit else 0.0
    return {"case": "delay", "nprocs": nprocs, "steps": len(per_step), "detected": named.count(who) / len(per_step),
            "culprits": [c["rank"] for c in rep["culprits"]], "delay_s": delay, "estimate_s": est,
            "delay_error": abs(est - delay) / delay}


def healthy_case(nprocs, steps):
    with tempfile.TemporaryDirectory(prefix="commsim-blame-") as d:
        results = record(d, nprocs=nprocs, steps=steps)
        rep = blame_traces(_traces(results)).report
        im = import_traces(_traces(results))
    per_step = rep["per_step"]
    return {"case": "healthy", "nprocs": nprocs, "steps": len(per_step), "culprits": [c["rank"] for c in rep["culprits"]],
            "steps_with_a_late_rank": sum(st["set_by"] == "rank" for st in per_step) / len(per_step),
            **_import_figures(im, results)}


def slow_case(nprocs, steps, factor=1.5):
    with tempfile.TemporaryDirectory(prefix="commsim-blame-") as d:
        results = record(d, nprocs=nprocs, steps=steps, slow_rank=nprocs - 1, slow_factor=factor)
        im = import_traces(_traces(results))
    return {"case": "slow", "nprocs": nprocs, "steps": im.timeline.steps, "slow_found": [[r, round(f, 3)] for r, f in im.inferred.slow],
            **_import_figures(im, results)}


def _import_figures(im, results):
    clock = measured_step_time(results)
    # the same scenario with its buckets ready at a uniform gradient rate (no ddp.bucket_ready):
    # what the measured ready points gain, on the same job
    sc = im.scenario
    uniform = float(simulate(replace(sc, calibration=None, ddp=replace(sc.ddp, bucket_ready=None))).step_time.mean())
    return {"measured_s": im.inferred.measured_step_time, "clock_s": clock, "simulated_s": im.simulated_step_time,
            "step_error": im.step_time_error, "step_error_vs_clock": im.simulated_step_time / clock - 1.0,
            "step_error_uniform_ready": uniform / im.inferred.measured_step_time - 1.0,
            "jitter_cv": im.inferred.jitter_cv}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2, help="jobs recorded per case and rank count")
    p.add_argument("--nprocs", type=int, nargs="+", default=[2, 4], help="gloo rank counts to record, one job set each")
    p.add_argument("--steps", type=int, default=12, help="DDP steps per recorded job")
    p.add_argument("--delay", type=float, default=0.2, help="seconds the last rank sleeps in its backward every step (delay case)")
    p.add_argument("--json", help="write every figure here")
    a = p.parse_args(argv)
    check_script_outputs(p, {"--json": a.json})  # before the minutes of recording
    if min(a.nprocs) < 2 or a.repeats < 1 or a.steps < 1 or not a.delay > 0:
        p.error(f"--nprocs at least 2 each, --repeats and --steps at least 1, --delay above 0; "
                f"got {a.nprocs}, {a.repeats}, {a.steps}, {a.delay}")
    rows = []
    for n in a.nprocs:
        for _ in range(a.repeats):
            for case in (lambda: delay_case(n, a.steps, a.delay), lambda: healthy_case(n, a.steps),
                         lambda: slow_case(n, a.steps)):
                row = case()
                rows.append(row)
                print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    print()
    for n in a.nprocs:
        d = [r for r in rows if r["case"] == "delay" and r["nprocs"] == n]
        h = [r for r in rows if r["case"] == "healthy" and r["nprocs"] == n]
        s = [r for r in rows if r["case"] == "slow" and r["nprocs"] == n]
        print(f"{n} ranks, {a.repeats} job(s) per case, {a.steps} profiled steps each:")
        print(f"  delay {a.delay * 1e3:.0f} ms: detected in {np.mean([r['detected'] for r in d]) * 100:.1f}% of steps "
              f"(min {min(r['detected'] for r in d) * 100:.0f}%), delay error mean "
              f"{np.mean([r['delay_error'] for r in d]) * 100:.1f}% (max {max(r['delay_error'] for r in d) * 100:.1f}%)")
        print(f"  healthy: culprits named in {sum(bool(r['culprits']) for r in h)} of {len(h)} jobs; a rank late above "
              f"noise in {np.mean([r['steps_with_a_late_rank'] for r in h]) * 100:.1f}% of steps")
        for name, rs in (("healthy", h), ("slow rank", s)):
            print(f"  import, {name}: simulated vs measured step time "
                  + ", ".join(f"{r['step_error'] * 100:+.1f}%" for r in rs)
                  + "; vs the job's clock " + ", ".join(f"{r['step_error_vs_clock'] * 100:+.1f}%" for r in rs)
                  + "; buckets ready at a uniform rate instead " +
                  ", ".join(f"{r['step_error_uniform_ready'] * 100:+.1f}%" for r in rs))
    if a.json:
        atomic_write_text(a.json, json.dumps(rows, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
