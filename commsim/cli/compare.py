"""`commsim compare`: the baseline and each remedy (gradient compression, PowerSGD, backup
workers, post-local SGD, asynchronous SGD, bucket tuning) side by side.

Registered into the main group by :func:`register` (commsim/cli/main.py calls it).
"""

from __future__ import annotations

import json

import click

from commsim.cli.common import FORCE_HELP, POSITIVE_INT, command, fail, load_or_fail, node_counts
from commsim.cli.outputs import check_not_named_calibration, check_outputs, echo_to, write_output
from commsim.units import counted

MITIGATIONS_HELP = ("Comma-separated remedies, each compared on its own; parameters after ':' "
                    "(powersgd:r=4:start=10), '+' combines (fp16+powersgd:r=1). Remedies: fp16, bf16 "
                    "(mem_bw, reduce_bytes), powersgd (r, start, shapes=square|resnet50, width, mem_bw, "
                    "flops, kernel_overhead, chain_overhead: the time each of the hook's two chained "
                    "all-reduces adds, default 0), backup (b), localsgd (H, warmup, mem_bw: the rate "
                    "of the averager's flatten and divide), async (servers, bandwidth, latency), buckets. "
                    "Default: the scenario's `mitigation:` list, else "
                    "fp16,powersgd:r=4,backup:b=2,localsgd:H=8,async:servers=4,buckets.")




def _load(path, overrides, steps, nodes, force):
    """The scenario (at each node count) and the parsed `mitigation:` section of its file (after
    the same --set overrides), or None; a bad one ends the command in one line, exit 2."""
    from commsim.errors import InputError
    from commsim.mitigations.section import mitigation_section

    scenarios = [load_or_fail(path, list(overrides) + ([f"cluster.nodes={count}"] if count is not None else []),
                              steps, None, force=force) for count in nodes or [None]]
    if scenarios[0].ddp.comm_streams > 1:  # the remedies' own schedules have one collective stream
        fail(f"{path}: ddp.comm_streams: expected comm_streams 1 to compare remedies (their schedules run one "
             f"collective stream per rank), got comm_streams {scenarios[0].ddp.comm_streams}")
    try:
        return scenarios, mitigation_section(path, overrides)
    except InputError as exc:
        fail(str(exc))


@command("compare")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--mitigations", "mitigations_text", metavar="LIST", help=MITIGATIONS_HELP)
@click.option("--nodes", "nodes_text", help="Comma-separated node counts to compare at (default: the scenario's).")
@click.option("--steps", type=POSITIVE_INT, help="Steps per run (overrides the scenario's `steps`).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario key (as in run).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the rows as JSON here ('-': stdout).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the rows as CSV here, nested fields as dotted columns ('-': stdout).")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False),
              help="Write compare.png and compare.svg (step time per remedy; by GPU count with --nodes) here.")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
def compare_command(scenario, mitigations_text, nodes_text, steps, overrides, json_path, csv_path, plot_dir, force,
                    quiet):
    """Simulate SCENARIO as it is and with each remedy, and print them side by side.

    \b
    Per remedy: mean and p95 step time, throughput, speedup over the baseline, bytes
    all-reduced per rank per step, exposed communication, straggler cost, and the
    remedy's own figures (dropped gradients, staleness, chosen bucket cap). Field
    definitions and the models' sources: README.md, "Mitigations".
    """
    from commsim.mitigations.compare import check_mitigations, compare
    from commsim.mitigations.spec import DEFAULT_MITIGATIONS, parse_mitigations

    stdout_taken = check_outputs({"--json": json_path, "--csv": csv_path}, {"SCENARIO": scenario})
    if plot_dir:
        _check_plot_dir(plot_dir)
    counts = node_counts(nodes_text) if nodes_text else None
    scenarios, section = _load(scenario, overrides, steps, counts, force)
    # the calibration file the scenario names is an input too, known once the scenario is read
    check_not_named_calibration({"--json": json_path, "--csv": csv_path}, scenario, overrides)
    if mitigations_text is not None:
        mitigations = parse_mitigations(mitigations_text)
        source = "--mitigations"
    elif section is not None:
        mitigations = section
        source = str(scenario)
    else:
        mitigations = parse_mitigations(DEFAULT_MITIGATIONS, "the default mitigations")
        source = "the default mitigations"
        mitigations = _defaults_that_fit(scenarios, mitigations, source, force)
    for sc in scenarios:
        check_mitigations(sc, mitigations, source if source != "--mitigations" else f"--mitigations {mitigations_text!r}",
                          force)
    echo = echo_to(stdout_taken)
    rows = compare(scenarios, mitigations)
    first = scenarios[0]
    if json_path:
        doc = {"scenario": first.name, "seed": first.seed, "steps": first.steps, "rows": rows}
        write_output(json_path, json.dumps(doc, indent=2, sort_keys=True) + "\n", "the JSON rows")
    if csv_path:
        from commsim.output.run_files import rows_csv

        write_output(csv_path, rows_csv(rows), "the CSV rows")
    if plot_dir:
        import os

        from commsim.output.plots.compare import plot_compare

        if not os.path.exists(plot_dir):
            os.mkdir(plot_dir)  # the folder itself, as sweep -o makes its own; never its parents
        plot_compare(rows, plot_dir, first.name)
    if not quiet:
        echo(format_rows(rows))


def _check_plot_dir(plot_dir: str) -> None:
    """Fail (exit 2) before any work unless the --plot folder exists and is writable, or can be
    made: its parent a writable folder. It is made only when the plots are written, so that a
    bad scenario or remedy leaves no empty folder behind; a new name with a figure's suffix
    (compare.svg) is refused: it would become a folder of that name."""
    import os

    from commsim.output.plots import check_plot_folder

    if os.path.exists(plot_dir):
        check_plot_folder(plot_dir)  # a PlotError (exit 2)
        return
    parent = os.path.dirname(os.path.abspath(plot_dir))
    if not os.path.isdir(parent):  # name the folder that is missing, not the plot's
        what = "is not a directory" if os.path.exists(parent) else "does not exist"
        fail(f"--plot {plot_dir}: cannot create the plot folder: {parent} {what}")
    suffix = os.path.splitext(plot_dir)[1].lower()
    if suffix in (".png", ".svg", ".pdf"):
        fail(f"--plot {plot_dir}: expected a folder (compare.png and compare.svg are written into it), "
             f"got a figure's file name ({suffix})")
    check_plot_folder(parent)


def _defaults_that_fit(scenarios, mitigations, source, force=False):
    """The default remedies every scenario can take. A default the user did not ask for is left
    out with a note on stderr (backup:b=2 on a 2-rank job), not turned into an input error."""
    from commsim.mitigations.compare import check_mitigations
    from commsim.mitigations.spec import MitigationError

    kept = []
    for m in mitigations:
        try:
            for sc in scenarios:
                check_mitigations(sc, (m,), source, force)
        except MitigationError as exc:
            click.echo(f"commsim: note: {m.label} left out of the default mitigations ({exc})", err=True)
            continue
        kept.append(m)
    return tuple(kept)


def _own(row) -> str:
    d = row["details"]
    m = row["mitigation"]
    if "dropped_fraction_mean" in d:
        return (f"{counted(d['workers'], 'GPU')}, {d['dropped_fraction_mean']:.0%} of gradients dropped, "
                f"{d['time_saved_s'] * 1e3:.1f} ms saved vs no backups ({d['without_backups_step_time_s'] * 1e3:.1f} ms)")
    if "staleness" in d:
        st = d["staleness"]
        return (f"staleness mean {st['mean']:.1f} p95 {st['p95']:.0f}; {d['gradients_per_s']:.1f} gradients/s "
                f"of {d['link_capacity_gradients_per_s']:.1f} the links allow")
    if "curve" in d:
        return f"bucket cap {d['bucket_cap'] / 2**20:.1f} MiB ({counted(d['buckets'], 'bucket')})"
    if "compression_ratio" in d:
        return f"{d['compression_ratio']:.0f}x fewer bytes; after {counted(d['warmup_steps'], 'warm-up step')}"
    if "wire_dtype" in d:
        return f"gradients sent as {d['wire_dtype']}"
    if "H" in d:
        return f"parameters averaged every {counted(d['H'], 'step')}"
    if m == "baseline":
        return counted(d['buckets'], 'bucket')
    return ""


def format_rows(rows) -> str:
    """A fixed-width table of :func:`commsim.mitigations.compare.compare` rows."""
    head = (f"{'GPUs':>6}  {'mitigation':<22} {'mean ms':>10} {'p95 ms':>10} {'speedup':>8} {'samples/s':>10} "
            f"{'GB/step':>8} {'exposed ms':>10} {'straggler ms':>12}  own figures")
    lines = [head]
    for r in rows:
        lines.append(f"{r['gpus']:>6}  {r['mitigation']:<22} {r['step_time_s']['mean'] * 1e3:>10.2f} "
                     f"{r['step_time_s']['p95'] * 1e3:>10.2f} {r['speedup']:>8.3f} {r['throughput_samples_per_s']:>10.1f} "
                     f"{r['bytes_per_step'] / 1e9:>8.3f} {r['exposed_comm_s'] * 1e3:>10.2f} "
                     f"{r['straggler_cost_s'] * 1e3:>12.2f}  {_own(r)}")
    return "\n".join(lines)


def register(group: click.Group) -> None:
    """Add `compare` to the main command group."""
    group.add_command(compare_command)
