"""Small vs large DDP buckets on the gloo validator: does the model get the sign of the difference?

    python benchmarks/ddp_buckets_gloo.py [--rounds 5] [--steps 10] [--caps 1MB,25MB]
        [--parameters 5e6] [--batch-size 1] [--calibration CAL.yaml] [--reports DIR] [--json OUT.json]

Runs ``commsim validate --mode ddp``'s job (validate/ddp_job.py: a real torch DDP model of
``--parameters`` fp32 parameters on 2 gloo ranks; 5e6 is 20 MB of gradients, about 20 buckets
of 1 MB against 2 at 25 MB) at each bucket cap, ``--rounds`` times, the
caps alternating in order from round to round so that a drift in the machine's load falls on
both. A small batch keeps compute short, so that communication is exposed and the per-bucket
cost shows. The calibration is measured first (2 gloo ranks up to 32 MiB) unless given.

Per round k the measured difference is d_k = T(small cap) - T(large cap) (median step times
of the two runs of that round); the measured difference is their mean and the run-to-run
spread their standard deviation. The model's difference is the simulator's step time at each
cap with one compute for both (the median over all runs of the measured forward, backward
and optimizer), with the scenario's DDP costs and without them (``bucket_overhead 0,
overlap_slowdown 0, gradient_as_bucket_view true``). The sign is *decided* only when
|mean d| exceeds 2x the spread (and 2 rounds at least); otherwise the check says the machine
was too noisy to tell. ``--reports DIR`` keeps every run's report, for
``commsim calibrate --ddp-fit DIR/*.json -o ddp.yaml``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import replace
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from commsim.analysis.ddp_fit import run_from_report  # noqa: E402
from commsim.scenario.loader import load_scenario  # noqa: E402
from commsim.sim.engine import simulate  # noqa: E402
from commsim.units import parse_size  # noqa: E402

SCENARIO = os.path.join(ROOT, "scenarios", "validate_gloo_2rank.yaml")
SIGNIFICANCE = 2.0  # |mean difference| must exceed this many run-to-run standard deviations


def model_step_time(scenario, compute: Dict[str, float], costs: bool) -> float:
    """Simulated step time (s) of `scenario` with `compute` (s), with or without DDP's costs."""
    sc = replace(scenario, compute=replace(scenario.compute, forward=compute["forward_s"],
                                           backward=compute["backward_s"], optimizer=compute["optimizer_s"]),
                 stragglers=(), steps=4)
    if not costs:
        sc = replace(sc, ddp=replace(sc.ddp, costs=replace(sc.ddp.costs, bucket_overhead=0.0, overlap_slowdown=0.0,
                                                             gradient_as_bucket_view=True)))
    return float(simulate(sc).step_time[-1])


def sign(x: float) -> int:
    return (x > 0) - (x < 0)


def run_check(caps: Sequence[str], rounds: int, steps: int, parameters: float, batch_size: int,
              calibration_path: Optional[str], reports_dir: Optional[str] = None, warmup_steps: int = 2,
              timeout_s: float = 120.0, echo=print) -> Dict:
    """Measure and predict; the returned dict holds every figure the script prints."""
    from validate import ddp_job
    from validate.calibrate import measure_calibration

    if calibration_path is None:
        cal = measure_calibration("gloo", 2, 32 << 20, iters=10, warmup=3, echo=lambda s: None)
    else:
        from commsim.calibration.file import load_calibration
        cal = load_calibration(calibration_path)
    scen = {}
    for cap in caps:
        scen[cap] = load_scenario(SCENARIO, [f"ddp.bucket_cap={cap}", f"model.parameters={parameters:g}",
                                             f"compute.batch_size={batch_size}"], steps=steps, force=True)
    runs: List[Dict] = []
    for k in range(rounds):
        order = list(caps) if k % 2 == 0 else list(reversed(caps))
        for cap in order:
            report = ddp_job.validate_scenario(scen[cap], cal, "gloo", 2, warmup_steps, timeout_s, echo=lambda s: None)
            report.update({"mode": "ddp", "backend": "gloo", "world_size": 2, "scenario": scen[cap].name})
            run = run_from_report(report, f"round{k}-{cap.replace(' ', '')}")
            if reports_dir:
                os.makedirs(reports_dir, exist_ok=True)
                with open(os.path.join(reports_dir, f"{run.source}.json"), "w", encoding="utf-8") as fh:
                    json.dump(report, fh, sort_keys=True)
            runs.append({"round": k, "cap": cap, "buckets": run.buckets, "step_time_s": run.step_time_s,
                         "stderr_s": run.stderr_s, "compute_s": report["measured"]["compute_s"]})
            echo(f"round {k} cap {cap:>6s}: {run.buckets:3d} buckets, median step {run.step_time_s * 1e3:8.2f} ms "
                 f"(+- {run.stderr_s * 1e3:.2f}), compute fwd+bwd+opt "
                 f"{sum(report['measured']['compute_s'].values()) * 1e3:.1f} ms")
    small, large = caps[0], caps[-1]
    by = {(r["round"], r["cap"]): r["step_time_s"] for r in runs}
    diffs = [by[(k, small)] - by[(k, large)] for k in range(rounds)]
    mean_d = statistics.mean(diffs)
    spread = statistics.stdev(diffs) if rounds >= 2 else float("inf")
    compute = {key: statistics.median(r["compute_s"][key] for r in runs) for key in ("forward_s", "backward_s", "optimizer_s")}
    pred = {tag: {cap: model_step_time(replace(scen[cap], calibration=cal), compute, on)
                  for cap in caps} for tag, on in (("costs", True), ("no_costs", False))}
    pred_d = {tag: p[small] - p[large] for tag, p in pred.items()}
    decided = rounds >= 2 and abs(mean_d) > SIGNIFICANCE * spread
    return {"caps": list(caps), "rounds": rounds, "steps": steps, "parameters": parameters, "batch_size": batch_size,
            "runs": runs, "measured_diff_s": diffs, "measured_mean_diff_s": mean_d, "measured_spread_s": spread,
            "measured_large_s": statistics.median(by[(k, large)] for k in range(rounds)),
            "decided": decided, "compute_s": compute, "predicted_s": pred, "predicted_diff_s": pred_d,
            "sign_matches": {tag: sign(d) == sign(mean_d) for tag, d in pred_d.items()} if decided else None,
            # how many rounds, each on its own, have the model's sign (informative, not the decision)
            "rounds_with_model_sign": {tag: sum(sign(x) == sign(d) for x in diffs) for tag, d in pred_d.items()}}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--caps", default="1MB,25MB", help="bucket caps, smallest first (comma-separated)")
    ap.add_argument("--parameters", type=float, default=5e6)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--calibration", default=None, help="a gloo calibration (else one is measured first)")
    ap.add_argument("--reports", default=None, help="folder for every run's validate report (for calibrate --ddp-fit)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    caps = [c.strip() for c in args.caps.split(",")]
    caps.sort(key=parse_size)
    out = run_check(caps, args.rounds, args.steps, args.parameters, args.batch_size, args.calibration, args.reports)
    small, large = caps[0], caps[-1]
    ms = lambda x: f"{x * 1e3:+.2f} ms"  # noqa: E731
    print(f"measured  T({small}) - T({large}): {ms(out['measured_mean_diff_s'])} "
          f"({out['measured_mean_diff_s'] / out['measured_large_s'] * 100:+.1f}% of T({large})), "
          f"run-to-run spread {out['measured_spread_s'] * 1e3:.2f} ms over {out['rounds']} rounds: "
          f"[{', '.join(ms(d) for d in out['measured_diff_s'])}]")
    for tag in ("costs", "no_costs"):
        p = out["predicted_s"][tag]
        print(f"predicted ({tag:8s}) T({small}) - T({large}): {ms(out['predicted_diff_s'][tag])} "
              f"({p[small] * 1e3:.2f} vs {p[large] * 1e3:.2f} ms at compute "
              f"{sum(out['compute_s'].values()) * 1e3:.1f} ms)")
    if out["decided"]:
        print("sign " + ", ".join(f"{tag}: {'matches' if ok else 'DIFFERS'}" for tag, ok in out["sign_matches"].items()))
    else:
        print(f"sign not decided: |measured difference| is within {SIGNIFICANCE:g}x the run-to-run spread")
    print("rounds whose own difference has the model's sign: " + ", ".join(
        f"{tag} {k}/{out['rounds']}" for tag, k in out["rounds_with_model_sign"].items()))
    if args.json:
        from commsim.atomic import atomic_write_text
        atomic_write_text(args.json, json.dumps(out, sort_keys=True, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
