"""How close are predictions to this machine? Six replays of a scenario (DDP bucket caps
1 MB / 25 MB / 100 MB, each without and with a slow rank) against their calibrated
simulations; prints each case and the median |error| of the mean step time.

    python -m validate.accuracy --calibration CAL.yaml [--repeats 3] [--json PATH] [--out-dir DIR]

``python -m validate.accuracy --help`` lists every option.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import click

from commsim.atomic import atomic_write_text
from commsim.calibration.file import load_calibration
from commsim.paramtypes import iterations
from commsim.scenario.loader import load_scenario
from validate.entry import CONTEXT, check_local_ranks, Failure, check_outputs, run_command, save_partial, timeout_seconds
from validate.launch import LaunchError, LaunchInterrupted
from validate.replay import validate_scenario

BUCKETS = ("1 MB", "25 MB", "100 MB")
SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "validate_gloo_2rank.yaml"


def cases(slow_factor: float):
    """(bucket cap, slow-rank factor or None, case name, --set overrides) of the six cases."""
    for cap in BUCKETS:
        tag = "bucket_" + cap.replace(" ", "")
        yield cap, None, tag, [f"ddp.bucket_cap={cap}", "stragglers=[]", f"name={tag}"]
        yield cap, slow_factor, tag + "_slow", [
            f"ddp.bucket_cap={cap}", f"stragglers=[{{kind: slow_rank, ranks: [1], factor: {slow_factor}}}]",
            f"name={tag}_slow"]


HELP = """Replay six variants of a scenario on real ranks and compare each with its calibrated
simulation: the DDP bucket cap at 1 MB, 25 MB and 100 MB, each without and with rank 1
slowed by --slow-factor. Prints one line per case (measured and predicted mean step time,
the error of the mean, of the p95 and of the communication time) and the median |error|
of the mean step time over the six cases.

\b
  python -m validate.accuracy --calibration CAL.yaml --repeats 3 --json accuracy.json --out-dir cases/
  commsim plot cases/        # predicted against measured

Exit codes: 0 done, 2 bad input, 3 a rank failed or hung, 130 interrupted (with --json,
the cases finished so far go to JSON.partial.json).
"""


@click.command(help=HELP, context_settings=CONTEXT)
@click.option("--calibration", "cal_path", required=True, type=click.Path(dir_okay=False),
              help="Calibration YAML the predictions use (from `commsim calibrate --backend gloo`).")
@click.option("--scenario", "scenario_path", type=click.Path(dir_okay=False), default=str(SCENARIO),
              show_default="scenarios/validate_gloo_2rank.yaml",
              help="Scenario the six cases vary (their bucket cap and slow rank are set on it).")
@click.option("--nprocs", type=click.IntRange(min=2), default=2, show_default=True,
              help="Local ranks to launch; must be the scenario's world size.")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo", show_default=True,
              help="Process-group backend of the replays.")
@click.option("--steps", type=iterations(1), default=None,
              help="Timed steps per replay (default: the scenario's `steps`).")
@click.option("--slow-factor", type=click.FloatRange(min=1.0, min_open=True), default=1.5, show_default=True,
              help="How much slower rank 1 computes in the three slow-rank cases.")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Replays per case; the case's figures are those of the run with the median mean step time "
                   "(a shared machine's load drifts by 10-20% from minute to minute).")
@click.option("--timeout", "timeout_s", type=timeout_seconds(), default=120.0, show_default=True,
              help="Seconds without progress before a hung or stopped rank fails the run.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the summary of all cases here as JSON.")
@click.option("--out-dir", type=click.Path(file_okay=False), default=None,
              help="Write one validate-JSON file per case here (for `commsim plot --validation`).")
def command(cal_path, scenario_path, nprocs, backend, steps, slow_factor, repeats, timeout_s, json_path, out_dir):
    check_local_ranks(nprocs)
    check_outputs({"--json": json_path}, {"--scenario": scenario_path, "--calibration": cal_path})
    cal = load_calibration(cal_path)
    scenarios = [(cap, slow, name, load_scenario(scenario_path, overrides=overrides, steps=steps))
                 for cap, slow, name, overrides in cases(slow_factor)]
    world = scenarios[0][3].world_size
    if nprocs != world:
        raise Failure(f"{scenario_path}: cluster: the scenario has {world} ranks but --nprocs is {nprocs}")
    rows = []
    try:
        for cap, slow, name, sc in scenarios:
            rows.append(_case(sc, cal, backend, nprocs, repeats, timeout_s, cap, slow, name))
            if out_dir:  # one `commsim validate --json`-shaped file per case, for `commsim plot --validation`
                os.makedirs(out_dir, exist_ok=True)
                atomic_write_text(os.path.join(out_dir, f"{name}.json"), json.dumps(rows[-1], indent=2) + "\n")
            _print_case(rows[-1])
    except (LaunchError, KeyboardInterrupt) as exc:
        if isinstance(exc, KeyboardInterrupt):  # between two replays (a replay's own is a LaunchInterrupted)
            exc = LaunchInterrupted("interrupted (Ctrl-C)", {}, None)
        if json_path and rows:  # nothing finished: no file to point to
            saved = save_partial(json_path, {"error": str(exc), "cases": rows})
            exc = type(exc)(f"{exc} ({len(rows)} finished cases saved to {saved})", exc.partial, exc.result_dir)
        raise exc
    errs = [abs(r["error_pct"]["step_time_mean"]) for r in rows]
    summary = {"median_abs_error_pct": statistics.median(errs), "max_abs_error_pct": max(errs), "cases": rows}
    click.echo(f"median |error| of the mean step time over {len(rows)} cases: {summary['median_abs_error_pct']:.1f} % "
               f"(max {summary['max_abs_error_pct']:.1f} %)")
    if json_path:
        atomic_write_text(json_path, json.dumps(summary, indent=2) + "\n")


def _case(sc, cal, backend, nprocs, repeats, timeout_s, cap, slow, name) -> dict:
    """Replay one case `repeats` times; keep the replay with the median mean step time."""
    reps = [validate_scenario(sc, cal, backend, nprocs, timeout_s=timeout_s, echo=lambda s: None)
            for _ in range(repeats)]
    reps.sort(key=lambda r: r["measured"]["step_time_s"]["mean"])
    rep = reps[len(reps) // 2]
    return {"scenario": name, "bucket_cap": cap, "slow_rank_factor": slow, **rep,
            "repeat_errors_pct": [r["error_pct"]["step_time_mean"] for r in reps]}


def _print_case(row: dict) -> None:
    m, p, e = row["measured"], row["predicted"], row["error_pct"]
    slow = row["slow_rank_factor"]
    click.echo(f"bucket {row['bucket_cap']:>6s}  slow rank {'-' if slow is None else slow:>4}  "
               f"measured {m['step_time_s']['mean'] * 1e3:8.1f} ms  predicted {p['step_time_s']['mean'] * 1e3:8.1f} ms  "
               f"error {e['step_time_mean']:+6.1f} %  (p95 {e['step_time_p95']:+6.1f} %, comm "
               f"{e['comm_time'] if e['comm_time'] is None else round(e['comm_time'], 1)} %)")


def main(argv=None) -> int:
    """``python -m validate.accuracy``: run the command, return its exit code."""
    return run_command(command, argv, prog_name="python -m validate.accuracy")


if __name__ == "__main__":
    sys.exit(main())
