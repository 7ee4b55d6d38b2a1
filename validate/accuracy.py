"""How close are predictions to this machine? Six replays of a scenario (DDP bucket caps
1 MB / 25 MB / 100 MB, each without and with a slow rank) against their calibrated
simulations; prints each case and the median |error| of the mean step time.

    python -m validate.accuracy --calibration CAL.yaml [--scenario scenarios/validate_gloo_2rank.yaml]
        [--nprocs 2] [--backend gloo] [--slow-factor 1.5] [--repeats 3] [--json PATH] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from commsim.atomic import atomic_write_text
from commsim.calibration.file import load_calibration
from commsim.scenario.loader import load_scenario
from validate.replay import validate_scenario

BUCKETS = ("1 MB", "25 MB", "100 MB")


def cases(slow_factor: float):
    """(bucket cap, slow-rank factor or None, case name, --set overrides) of the six cases."""
    for cap in BUCKETS:
        tag = "bucket_" + cap.replace(" ", "")
        yield cap, None, tag, [f"ddp.bucket_cap={cap}", "stragglers=[]", f"name={tag}"]
        yield cap, slow_factor, tag + "_slow", [
            f"ddp.bucket_cap={cap}", f"stragglers=[{{kind: slow_rank, ranks: [1], factor: {slow_factor}}}]",
            f"name={tag}_slow"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validate.accuracy", description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", required=True)
    ap.add_argument("--scenario", default=os.path.join("scenarios", "validate_gloo_2rank.yaml"))
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--slow-factor", type=float, default=1.5)
    ap.add_argument("--repeats", type=int, default=1,
                    help="replays per case; the case's figures are those of the run with the median mean step time "
                         "(a shared machine's load drifts by 10-20%% from minute to minute)")
    ap.add_argument("--json", default=None, help="summary of all cases")
    ap.add_argument("--out-dir", default=None, help="one validate-JSON file per case (for `commsim plot --validation`)")
    a = ap.parse_args(argv)
    cal = load_calibration(a.calibration)
    rows = []
    for cap, slow, name, overrides in cases(a.slow_factor):
        sc = load_scenario(a.scenario, overrides=overrides, steps=a.steps)
        reps = [validate_scenario(sc, cal, a.backend, a.nprocs, echo=lambda s: None) for _ in range(a.repeats)]
        reps.sort(key=lambda r: r["measured"]["step_time_s"]["mean"])
        rep = reps[len(reps) // 2]
        m, p, e = rep["measured"], rep["predicted"], rep["error_pct"]
        rows.append({"scenario": name, "bucket_cap": cap, "slow_rank_factor": slow, **rep,
                     "repeat_errors_pct": [r["error_pct"]["step_time_mean"] for r in reps]})
        if a.out_dir:  # one `commsim validate --json`-shaped file per case, for `commsim plot --validation`
            os.makedirs(a.out_dir, exist_ok=True)
            atomic_write_text(os.path.join(a.out_dir, f"{name}.json"), json.dumps(rows[-1], indent=2) + "\n")
        print(f"bucket {cap:>6s}  slow rank {'-' if slow is None else slow:>4}  "
              f"measured {m['step_time_s']['mean'] * 1e3:8.1f} ms  predicted {p['step_time_s']['mean'] * 1e3:8.1f} ms  "
              f"error {e['step_time_mean']:+6.1f} %  (p95 {e['step_time_p95']:+6.1f} %, comm "
              f"{e['comm_time'] if e['comm_time'] is None else round(e['comm_time'], 1)} %)", flush=True)
    errs = [abs(r["error_pct"]["step_time_mean"]) for r in rows]
    summary = {"median_abs_error_pct": statistics.median(errs), "max_abs_error_pct": max(errs), "cases": rows}
    print(f"median |error| of the mean step time over {len(rows)} cases: {summary['median_abs_error_pct']:.1f} % "
          f"(max {summary['max_abs_error_pct']:.1f} %)")
    if a.json:
        atomic_write_text(a.json, json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
