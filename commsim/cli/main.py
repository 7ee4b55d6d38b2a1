"""The `commsim` command line: parse, call the library, print, return an exit code.

Bad input (scenario, overrides, output paths) exits with code 2 and one line on stderr,
never a traceback.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

import click

from commsim import __version__
from commsim.errors import InputError

from commsim.cli.common import fail, load_or_fail, positive_int, write_output


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="commsim")
def main() -> None:
    """commsim: predict how synchronous data-parallel training scales.

    A scenario (YAML) describes the cluster, the model, the compute per step, DDP's
    buckets and the stragglers; `commsim run` simulates it and reports the step time, where
    it goes, and who everyone waits for. See README.md for the scenario format.
    """


SET_HELP = (
    "Override a scenario key: --set a.b.c=VALUE (VALUE is YAML: --set stragglers=[], "
    "--set 'ddp.bucket_cap=4 GB', --set stragglers[0].factor=2). Repeatable; validated like the file."
)


@main.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--steps", type=int, callback=positive_int, help="Number of steps (overrides the scenario's `steps`).")
@click.option("--seed", type=int, help="Random seed (overrides the scenario's `seed`).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help=SET_HELP)
@click.option("--calibration", type=click.Path(dir_okay=False),
              help="Price the ring from this calibration (commsim calibrate) instead of the nominal links.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the summary as JSON here.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write one row per step as CSV here.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False),
              help="Write a Chrome/Perfetto trace (per-rank stall, compute, wait, optimizer) here.")
@click.option("--trace-ranks", type=int, default=64, show_default=True, callback=positive_int,
              help="Ranks included in the trace (the first N).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Plot step time per step and each rank's waiting time (.png, .svg or .pdf; needs the plot extra).")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
def run(scenario, steps, seed, overrides, calibration, json_path, csv_path, trace_path, trace_ranks, plot_path, quiet):
    """Simulate SCENARIO and print the predicted step time and its breakdown.

    \b
    Prints step time mean/p50/p95/p99/max, compute, exposed communication and straggler
    cost, throughput, scaling efficiency and the ranks most often last. --json writes the
    same summary (field list in README.md), --csv one row per step
    (step, start_s, end_s, duration_s, last_rank).
    """
    from commsim.sim.engine import simulate
    from commsim.output.run_files import chrome_trace, steps_csv, summary_json
    from commsim.output.progress import step_progress
    from commsim.analysis.report import late_ranks, summarize
    from commsim.output.text import print_summary

    sc = load_or_fail(scenario, overrides, steps, seed, calibration)
    with step_progress(sc, enabled=not quiet) as on_step:
        result = simulate(sc, on_step=on_step("scenario"))
        baseline = simulate(sc.without_stragglers(), on_step=on_step("baseline"))
    summary = summarize(sc, result, baseline)
    if json_path:
        write_output(json_path, summary_json(summary), "the JSON summary")
    if csv_path:
        write_output(csv_path, steps_csv(result, late_ranks(result, baseline)), "the step CSV")
    if trace_path:
        write_output(trace_path, chrome_trace(result, trace_ranks), "the trace")
    if plot_path:
        from commsim.output.plots import plot_run

        try:
            plot_run(result, summary, plot_path, baseline=baseline)
        except InputError as exc:  # PlotError: no matplotlib, bad suffix, unwritable path
            fail(str(exc))
    if not quiet:
        print_summary(sc, summary)


def _register_subcommands() -> None:
    """Commands that live in their own modules (each imports its heavy dependencies lazily)."""
    from commsim.cli.algorithms import register as register_collectives
    from commsim.cli.lab import register as register_lab
    from commsim.cli.sweep import register as register_sweep
    from commsim.cli.validate import register as register_validate

    register_sweep(main)
    register_collectives(main)
    register_validate(main)
    register_lab(main)


_register_subcommands()


def run_cli(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point for tests: run the CLI and return its exit code."""
    try:
        main.main(args=list(argv) if argv is not None else None, prog_name="commsim", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_cli())
