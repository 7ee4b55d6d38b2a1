"""CLI commands of the validator: ``calibrate``, ``collective`` and ``validate``.

Thin wrappers: parse, call a library function, print, return an exit code. Bad input ends
with one line on stderr and exit code 2, never a traceback. Nothing here imports torch or
validate/ at module import: the commands that run real processes import them inside the
command function, so ``commsim run`` stays fast and torch-free.

Wire into the main group with ``register(main)``.
"""

from __future__ import annotations

import functools
import json
import math
import shlex
import sys
from typing import Callable, List, Optional, Sequence

import click

from commsim import calibration as calib
from commsim.atomic import atomic_write_text
from commsim.benchsizes import parse_bench_size, parse_size_range
from commsim.output.nccl_table import ELEMENT_BYTES, format_nccl_table
from commsim.errors import ScenarioError
from commsim.calibration.from_logs import calibration_from_nccl_logs
from commsim.calibration import Calibration, load_calibration, save_calibration

LEVEL_CHOICES = ("auto",) + calib.LEVELS


class _Failure(click.ClickException):
    """One line on stderr, exit code 2 (the same shape as commsim.cli.main's errors)."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"commsim: error: {self.format_message()}", err=True)


def _fail(message: str) -> None:
    raise _Failure(" ".join(str(message).splitlines()))


def one_line_errors(fn: Callable) -> Callable:
    """Turn the project's input errors (ValueError subclasses) into one stderr line + exit 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ScenarioError, ValueError, OSError) as exc:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            _fail(text)

    return wrapper


def command_line() -> str:
    """The exact command as typed (for provenance)."""
    return " ".join(shlex.quote(a) for a in ["commsim"] + sys.argv[1:])


def import_validate(name: str):
    """Import validate.<name> (and so torch) inside a command, with a one-line error if torch
    is missing."""
    import importlib

    try:
        return importlib.import_module(f"validate.{name}")
    except ImportError as exc:
        _fail(f"this command needs torch (pip install 'commsim[validate]'): {exc}")


def save_partial(output: str, exc) -> None:
    """A run failed: keep the measurements taken so far next to OUTPUT, and fail in one line."""
    partial_path = f"{output}.partial.json"
    atomic_write_text(partial_path, _json_text(
        {"error": str(exc), "partial": {str(r): recs for r, recs in sorted(exc.partial.items())}}))
    _fail(f"{exc} (saved to {partial_path})")


# --------------------------------------------------------------------------------------------
# calibrate --from-nccl-tests
# --------------------------------------------------------------------------------------------


def _print_fit(cal: Calibration) -> None:
    for lv in cal.levels:
        fe = lv.fit_error
        ns = sorted({m.world_size for m in lv.table})
        err = "n/a (no size >= 1 MiB)" if fe.points == 0 else f"median {fe.median_pct:.1f}%, max {fe.max_pct:.1f}%"
        line = "n/a" if lv.line_fit_error.points == 0 else f"median {lv.line_fit_error.median_pct:.1f}%"
        click.echo(
            f"{lv.level}: alpha = {lv.alpha_s * 1e6:.3f} us/step, beta = {lv.beta_Bps / 1e9:.3f} GB/s "
            f"(one line over the sweep; busbw error >= 1 MiB {line}); {len(lv.table)} sizes at n = {','.join(map(str, ns))}"
        )
        for r in lv.ranges:
            click.echo(f"  size range >= {r.min_size_bytes} B: alpha = {r.alpha_s * 1e6:.3f} us, beta = {r.beta_Bps / 1e9:.3f} GB/s")
        click.echo(f"  model (size ranges) busbw error >= 1 MiB: {err}")


# --------------------------------------------------------------------------------------------
# collective: the predicted nccl-tests table
# --------------------------------------------------------------------------------------------

def predicted_rows(cal: Calibration, n: int, sizes: Sequence[int], level: Optional[str]) -> List[dict]:
    """One dict per size: size_bytes, count, type, redop, root, time_us, algbw_GBps, busbw_GBps, source."""
    rows = []
    for size in sizes:
        t, source = calib.predict_with_source(cal, size, n, level)
        alg = size / t / 1e9 if t > 0 else float("inf")
        rows.append({
            "size_bytes": int(size),
            "count": int(size // ELEMENT_BYTES),
            "type": "float",
            "redop": "sum",
            "root": -1,
            "time_us": t * 1e6,
            "algbw_GBps": alg,
            "busbw_GBps": alg * calib.allreduce_factor(n),
            "source": source,
        })
    return rows


def _json_text(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n"


# --------------------------------------------------------------------------------------------
# click commands
# --------------------------------------------------------------------------------------------


@click.command("calibrate")
@click.argument("logs", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--from-nccl-tests", "from_nccl", is_flag=True,
              help="Fit from nccl-tests all_reduce_perf logs (the LOG arguments) instead of measuring.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Calibration YAML to write.")
@click.option("--level", type=click.Choice(LEVEL_CHOICES), default="auto", show_default=True,
              help="Link level of the measurements; auto: one host intra_node, several inter_node "
                   "(host names, else the node count of a '# NRANKS: N (K nodes ...)' header), unknown flat.")
@click.option("--ranks", type=click.IntRange(min=2), default=None,
              help="World size of the logs, when their headers do not say.")
@click.option("--in-place", is_flag=True, help="Use the in-place columns of the logs (default: out-of-place).")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default=None,
              help="Measure on this machine with torch.distributed (needs the validate extra).")
@click.option("--nprocs", type=click.IntRange(min=2), default=2, show_default=True,
              help="Local processes to launch when measuring.")
@click.option("--max-size", default="64M", show_default=True,
              help="Largest all-reduce size of the sweep (from 8 B, doubling); K/M/G are binary.")
@click.option("--iters", type=click.IntRange(min=1), default=10, show_default=True, help="Timed iterations per size.")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True, help="Untimed warm-up iterations per size.")
@click.option("--compute-params", default="4M", show_default=True,
              help="Parameters of the synthetic model timed for compute (0 to skip); K/M/G are binary.")
@click.option("--timeout", "timeout_s", type=float, default=300.0, show_default=True,
              help="Seconds before a hung or dead rank fails the run.")
@one_line_errors
def calibrate_cmd(logs, from_nccl, output, level, ranks, in_place, backend, nprocs, max_size, iters, warmup,
                  compute_params, timeout_s):
    """Write a calibration file: fit alpha/beta per link level and keep the measured table.

    \b
    From published or local nccl-tests output:
      commsim calibrate --from-nccl-tests LOG [LOG ...] -o CAL.yaml
    Measuring this machine (launches NPROCS local processes):
      commsim calibrate --backend gloo --nprocs 2 --max-size 16M -o CAL.yaml
    """
    if from_nccl == (backend is not None):
        raise click.UsageError("give either --from-nccl-tests LOG [LOG ...] or --backend gloo|nccl")
    if from_nccl:
        cal, parsed = calibration_from_nccl_logs(list(logs), level, ranks, in_place, command_line())
        for path, log, lv in parsed:
            notes = f", {len(log.notes)} note(s)" if log.notes else ""
            click.echo(f"{path}: {len(log.rows)} rows, n = {log.world_size} (from {log.world_size_from}), level {lv}{notes}")
    else:
        if logs:
            raise click.UsageError("LOG arguments are only read with --from-nccl-tests")
        validate_mod = import_validate("calibrate")
        launch_mod = import_validate("launch")
        try:
            cal = validate_mod.measure_calibration(
                backend=backend, nprocs=nprocs, max_size=parse_bench_size(max_size), iters=iters, warmup=warmup,
                compute_params=parse_bench_size(compute_params), level=None if level == "auto" else level,
                timeout_s=timeout_s, command=command_line(), echo=click.echo,
            )
        except launch_mod.LaunchError as exc:
            save_partial(output, exc)
    save_calibration(cal, output)
    _print_fit(cal)
    click.echo(f"wrote {output}")


@click.command("collective")
@click.argument("scenario", required=False, type=click.Path(dir_okay=False))
@click.option("--calibration", "cal_path", type=click.Path(dir_okay=False),
              help="Calibration YAML (commsim calibrate): its measured curve, or its fitted links under --algorithm.")
@click.option("--ranks", type=click.IntRange(min=2), default=None,
              help="World size of the all-reduce (with SCENARIO: its node count is resized to fit).")
@click.option("--algorithm", default=None,
              help="ring, tree, hierarchical, halving_doubling, reduce_broadcast, auto, reduce_scatter, all_gather, "
                   "a comma-separated list, or all (side by side, fastest marked). Needs SCENARIO (its cluster).")
@click.option("--model", default=None, help="alpha-beta or nccl-2.7/2.19/2.30 (default: the scenario's collective.model).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario key, as in `commsim run`.")
@click.option("--sizes", default="8:1G", show_default=True, help="MIN:MAX[:FACTOR] in bytes (K/M/G binary), doubling by default.")
@click.option("--level", type=click.Choice(calib.LEVELS), default=None,
              help="Calibration link level to use without SCENARIO (default: the only one, else inter_node).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Also write the rows as JSON.")
@one_line_errors
def collective_cmd(scenario, cal_path, ranks, algorithm, model, overrides, sizes, level, json_path):
    """Print predicted all-reduce tables in nccl-tests' own columns.

    \b
    Two ways:
      commsim collective --calibration CAL.yaml --ranks N [--sizes 8:1G]
        the calibration's own curve: its measured table when N is a measured world size and
        the size lies inside it, otherwise its fitted alpha-beta model;
      commsim collective SCENARIO [--algorithm NAME|all] [--model M] [--ranks N] [--calibration CAL]
        the scenario's cluster (and --set) priced by each algorithm's closed form; with a
        calibration, its fitted alpha/beta replace the nominal link numbers.
    """
    from commsim.cli.common import write_output

    size_list = parse_size_range(sizes)
    if scenario is not None or algorithm is not None or model is not None or overrides:
        if scenario is None:
            _fail("--algorithm, --model and --set need a SCENARIO: its cluster is the topology the algorithms run on")
        from commsim.cli.algorithms import algorithm_tables

        rows, text = algorithm_tables(scenario, overrides, algorithm, model, ranks, cal_path, size_list)
        click.echo(text)
        if json_path:
            write_output(json_path, _json_text(_json_safe(rows)), "the JSON rows")
        return
    if cal_path is None or ranks is None:
        _fail("give --calibration CAL.yaml and --ranks N (the calibration's curve), or a SCENARIO (its cluster)")
    cal = load_calibration(cal_path)
    lv = cal.level(level)
    rows = predicted_rows(cal, ranks, size_list, lv.level)
    n_table = sum(r["source"] == "table" for r in rows)
    click.echo(f"# commsim collective: all_reduce, {ranks} ranks, level {lv.level}, calibration {cal_path}")
    ranges = "; ".join(f">= {r.min_size_bytes} B: alpha {r.alpha_s * 1e6:.3f} us, beta {r.beta_Bps / 1e9:.3f} GB/s"
                       for r in lv.ranges)
    click.echo(f"# {n_table} of {len(rows)} sizes from the measured table, the rest from the alpha-beta model ({ranges})")
    click.echo(format_nccl_table(rows))
    finite = [r["busbw_GBps"] for r in rows if math.isfinite(r["busbw_GBps"])]
    click.echo(f"# Avg bus bandwidth    : {sum(finite) / len(finite):g}" if finite else "#")
    if json_path:
        write_output(json_path, _json_text(rows), "the JSON rows")


def _json_safe(obj):
    """inf/nan -> strings, numpy scalars -> Python (strict JSON out)."""
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        return _json_safe(obj.item())
    return obj


def run_numerics(backend: str, nprocs: int, timeout_s: float, json_path: Optional[str]) -> int:
    launch_mod = import_validate("launch")
    numerics = import_validate("numerics")
    try:
        results = launch_mod.launch(numerics.rank_numerics, nprocs, backend, timeout_s)[0]
    except launch_mod.LaunchError as exc:
        _fail(str(exc))
    for r in results:
        click.echo(numerics.format_result(r))
    passed = sum(r["passed"] for r in results)
    click.echo(f"{passed} passed, {len(results) - passed} failed")
    if json_path:
        atomic_write_text(json_path, _json_text(_json_safe({"backend": backend, "world_size": nprocs, "checks": results})))
    return 0 if passed == len(results) else 1


@click.command("validate")
@click.argument("scenario", required=False, type=click.Path(dir_okay=False))
@click.option("--calibration", "cal_path", type=click.Path(dir_okay=False),
              help="Calibration YAML the prediction uses (from `commsim calibrate`).")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo", show_default=True)
@click.option("--nprocs", type=click.IntRange(min=1), default=None,
              help="Local ranks to launch (default: the scenario's world size; 2 for --numerics).")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Timed steps (overrides the scenario's `steps`).")
@click.option("--warmup-steps", type=click.IntRange(min=0), default=2, show_default=True, help="Untimed steps first.")
@click.option("--mode", type=click.Choice(["replay", "ddp"]), default="replay", show_default=True,
              help="replay: the scenario's durations and buckets on real all-reduces; "
                   "ddp: a real model under DistributedDataParallel, its measured compute fed to the prediction.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario key (as in `run`).")
@click.option("--numerics", is_flag=True, help="Run the four numerics checks instead of a scenario.")
@click.option("--timeout", "timeout_s", type=float, default=120.0, show_default=True,
              help="Seconds without progress before a hung or dead rank fails the run.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the report as JSON.")
@one_line_errors
def validate_cmd(scenario, cal_path, backend, nprocs, steps, warmup_steps, mode, overrides, numerics, timeout_s, json_path):
    """Run SCENARIO's sync-SGD job for real and compare it with its simulation.

    \b
    commsim validate SCENARIO --calibration CAL.yaml --backend gloo --nprocs 2 [--steps K] [--json PATH]
    commsim validate --numerics --backend gloo --nprocs 2
    """
    if numerics:
        if scenario:
            raise click.UsageError("--numerics takes no SCENARIO")
        raise SystemExit(run_numerics(backend, nprocs or 2, timeout_s, json_path))
    if not scenario or not cal_path:
        raise click.UsageError("give SCENARIO and --calibration CAL.yaml (or --numerics)")
    from commsim.scenario.loader import load_scenario
    from commsim.analysis.validation import format_comparison

    # loaded through the scenario, so that its checks apply (a calibration prices the ring
    # all-reduce under the alpha-beta model: collective.algorithm and .model must say so)
    sc = load_scenario(scenario, overrides=overrides, steps=steps, calibration=cal_path)
    cal = sc.calibration
    n = nprocs or sc.world_size
    if n != sc.world_size:
        raise ScenarioError(scenario, "cluster", f"the scenario has {sc.world_size} ranks but --nprocs is {n}; "
                            f"set cluster.nodes/gpus_per_node with --set to match")
    job = import_validate("replay" if mode == "replay" else "ddp_job")
    launch_mod = import_validate("launch")
    try:
        report = job.validate_scenario(sc, cal, backend, n, warmup_steps, timeout_s, click.echo)
    except launch_mod.LaunchError as exc:
        _fail(str(exc))
    report = {"scenario": sc.name, "mode": mode, "backend": backend, "world_size": n, "steps": sc.steps,
              "calibration": cal_path, **report}
    click.echo(f"# {sc.name}: {n} ranks, {sc.steps} steps, calibration {cal_path}")
    click.echo(format_comparison(report))
    if json_path:
        atomic_write_text(json_path, _json_text(_json_safe(report)))


def register(group: click.Group) -> None:
    """Add the validator's commands to the main CLI group."""
    group.add_command(calibrate_cmd)
    group.add_command(collective_cmd)
    group.add_command(validate_cmd)
