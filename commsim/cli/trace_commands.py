"""CLI commands for real jobs' traces: ``commsim import`` and ``commsim blame``.

Thin wrappers over :mod:`commsim.traces` and :mod:`commsim.analysis.blame`: parse, call, print,
write. Bad input (an unreadable, truncated or hostile file, ranks of different jobs, a trace of
one rank, no collectives...) ends with one line on stderr naming the file and exit code 2;
every output is computed before the first one is written, each atomically, so a failure leaves
nothing written.

Wire into the main group with ``register(main)``.
"""

from __future__ import annotations

from pathlib import Path

import click

from commsim.cli.common import POSITIVE_INT, command, fail, load_or_fail
from commsim.cli.outputs import check_outputs, echo_to, write_output
from commsim.errors import InputError
from commsim.units import counted


def trace_shape(world_size: int, steps: int, buckets: int) -> str:
    """What `commsim import` says the traces held: "8 ranks, 1 step, 12 buckets"."""
    return f"{counted(world_size, 'rank')}, {counted(steps, 'step')}, {counted(buckets, 'bucket')}"


@command("import")
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...")
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="Write the scenario (YAML, with a comment header saying what it came from) here ('-': stdout).")
@click.option("--calibration-out", type=click.Path(dir_okay=False),
              help="Also write a calibration (commsim calibrate's format) fitted to the observed all-reduces "
                   "(and any nccl-tests logs among TRACE); the scenario then names it.")
@click.option("--name", help="The scenario's name (default: the output file's name).")
@click.option("--steps", type=POSITIVE_INT, default=100, show_default=True,
              help="Steps the scenario simulates.")
# the loader's bounds on a seed, checked before the traces are read (not on the imported scenario)
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True, help="The scenario's seed.")
@click.option("--batch-size", type=POSITIVE_INT, default=1, show_default=True,
              help="Samples per rank per step (traces do not say; used for throughput only).")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
def import_command(traces, output, calibration_out, name, steps, seed, batch_size, quiet):
    """Turn per-rank traces of a real DDP job into a scenario.

    \b
    TRACE: PyTorch profiler traces (.json, .json.gz), one per rank; Flight Recorder dumps
    and nccl-tests logs may be given too. The scenario reproduces the job's compute per
    phase, its DDP buckets, its all-reduce times (ring model fitted) and the stragglers
    the traces show (slow_rank, stall, jitter); the header states how close its simulated
    mean step time comes to the measured one.
    """
    from commsim.traces.importer import import_traces

    stdout_taken = check_outputs({"-o": output, "--calibration-out": calibration_out},
                                 {"TRACE file": traces})  # before reading anything
    echo = echo_to(stdout_taken)
    if name is not None and not name.strip():  # else the loader's error would name the unwritten output file
        fail(f"--name: expected a non-empty scenario name, got {name!r}")
    name = name or (Path(output).stem if output != "-" else "imported")
    try:
        imported = import_traces(list(traces), name=name, steps=steps, seed=seed, batch_size=batch_size,
                                 calibration_out=calibration_out, scenario_out=output)
    except InputError as exc:
        fail(str(exc))
    if calibration_out:
        write_output(calibration_out, imported.calibration_text, "the calibration")
    write_output(output, imported.text, "the scenario")
    if not quiet:
        inf = imported.inferred
        stragglers = [f"slow_rank {r} x{f:.2f}" for r, f in inf.slow] + \
            [f"stall ranks {s['ranks']}" for s in inf.stalls] + ([f"jitter cv {inf.jitter_cv:.3f}"] if inf.jitter_cv else [])
        echo(f"{output}: {trace_shape(inf.world_size, imported.timeline.steps, len(imported.timeline.bucket_bytes))}; "
                   f"measured mean step "
                   f"{inf.measured_step_time * 1e3:.3f} ms, simulated {imported.simulated_step_time * 1e3:.3f} ms "
                   f"({imported.step_time_error * 100:+.1f}%); stragglers: {', '.join(stragglers) or 'none'}")
        if calibration_out:
            echo(f"{calibration_out}: calibration from {len(inf.comm_samples)} observed all-reduces")


@command("blame")
@click.argument("traces", nargs=-1, metavar="[TRACE...]")
@click.option("--scenario", type=click.Path(dir_okay=False),
              help="Blame a simulated run of this scenario instead of traces.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="With --scenario: override a key.")
@click.option("--steps", type=POSITIVE_INT, help="With --scenario: steps to simulate.")
@click.option("--seed", type=int, help="With --scenario: the seed.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the whole report as JSON here ('-': stdout).")
@click.option("--perfetto", "perfetto_path", type=click.Path(dir_okay=False),
              help="Write a Perfetto/Chrome trace here ('-': stdout): per-rank compute and per-bucket communication spans, "
                   "arrows from each late arrival to the end of the collective it delayed.")
@click.option("--top", type=POSITIVE_INT, default=8, show_default=True, help="Ranks in the table.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
def blame_command(traces, scenario, overrides, steps, seed, json_path, perfetto_path, top, quiet):
    """Find the rank everyone waits for.

    \b
    Per collective: each rank's arrival, the last rank and its lateness. Per rank: how
    often it was last, its mean and total lateness, the time the others waited on it.
    Per step: the critical path (a late rank, the communication, or compute). TRACE: the
    ranks' profiler traces or Flight Recorder dumps; or --scenario for a simulated run.
    """
    from commsim.output.run_files import summary_json
    from commsim.traces import perfetto
    from commsim.traces.text import format_blame

    stdout_taken = check_outputs({"--json": json_path, "--perfetto": perfetto_path},
                                 {"TRACE file": traces, "--scenario file": scenario})  # before any work
    if scenario and traces:
        fail("give either TRACE files or --scenario, not both")
    if not scenario and not traces:
        fail("no trace given: commsim blame TRACE... (one file per rank), or --scenario FILE")
    if not scenario and (overrides or steps or seed is not None):
        fail("--set, --steps and --seed apply to --scenario only")
    if scenario:
        from commsim.analysis.blame import blame_run, simulate_for_blame

        sc = load_or_fail(scenario, overrides, steps, seed)
        result, baseline = simulate_for_blame(sc)  # every collective's arrivals, where they fit
        report = blame_run(result, baseline)
        report["scenario"] = sc.name
        title = f"{sc.name} (simulated)"
        trace_text = perfetto.run_trace(result, report) if perfetto_path else None
    else:
        from commsim.traces.blaming import blame_traces

        try:
            blamed = blame_traces(list(traces))
        except InputError as exc:
            fail(str(exc))
        report = blamed.report
        title = "blame"
        trace_text = perfetto.job_trace(blamed.job, blamed.timeline, report) if perfetto_path else None
    json_text = summary_json(report) if json_path else None
    if json_path:
        write_output(json_path, json_text, "the blame JSON")
    if perfetto_path:
        write_output(perfetto_path, trace_text, "the Perfetto trace")
    if not quiet:
        click.echo(format_blame(report, title, top), nl=False, err=stdout_taken)
        for note in report.get("notes", []):
            click.echo(f"note: {note}", err=stdout_taken)


def register(group: click.Group) -> None:
    """Add `import` and `blame` to the main command group."""
    group.add_command(import_command)
    group.add_command(blame_command)
