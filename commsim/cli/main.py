"""The `commsim` command line: parse, call the library, print, return an exit code.

The exit codes are those of :mod:`commsim.cli.common` (listed in ``commsim --help``): bad
input is exit 2 with one line on stderr, never a traceback; an unexpected error is a bug and
shows as one.
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

import click

from commsim import __version__
from commsim.cli.common import FORCE_HELP, POSITIVE_INT, Group, command
from commsim.cli.outputs import (check_not_inputs, check_outputs, check_plot_output, scenario_calibration,
                                 write_output)
from commsim.errors import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_RUN_FAILED

# Commands that live in their own modules: module -> the commands its register(group) adds.
# A module is imported only when one of its commands runs (or for the full --help), so that
# `commsim run` does not pay for the imports of every other command.
SUBCOMMAND_MODULES = {
    "commsim.cli.sweep": ("sweep", "plot"),
    "commsim.cli.algorithms": ("algorithms",),
    "commsim.cli.calibrate": ("calibrate",),
    "commsim.cli.collective": ("collective",),
    "commsim.cli.validate": ("validate",),
    "commsim.cli.compare": ("compare",),
    "commsim.cli.trace_commands": ("import", "blame"),
    "commsim.cli.lab": ("lab",),
}


# Commands whose numpy work is elementwise on vectors and small fits: OpenBLAS's thread pool
# (one thread per core, started when numpy is imported) buys them nothing and costs every
# process about 0.1 s of CPU at start-up, more in a sweep's worker pool. They start numpy with
# one BLAS thread unless the user set OPENBLAS_NUM_THREADS. The commands that launch torch
# (calibrate, validate, lab) keep the user's environment, so their compute timing is untouched.
SINGLE_BLAS_THREAD_COMMANDS = frozenset({"run", "sweep", "plot", "algorithms", "collective", "compare", "import",
                                         "blame"})


class _LazyGroup(Group):
    """The commsim group, registering each subcommand module on first use."""

    def _load(self, name: str) -> None:
        import importlib

        for module, names in SUBCOMMAND_MODULES.items():
            if name in names and name not in self.commands:
                importlib.import_module(module).register(self)

    def list_commands(self, ctx):
        return sorted(set(self.commands) | {n for names in SUBCOMMAND_MODULES.values() for n in names})

    def get_command(self, ctx, name):
        if name in SINGLE_BLAS_THREAD_COMMANDS and "numpy" not in sys.modules:
            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        self._load(name)
        return super().get_command(ctx, name)


EXIT_CODES_HELP = f"""\b
Exit codes:
  0    done
  1    an unexpected error: a bug, shown with its traceback (also: validate --numerics
       when a check fails)
  {EXIT_INPUT}    bad input: a file, key, option or output path (one line on stderr)
  {EXIT_RUN_FAILED}    the job failed at run time: a rank died or hung (validate, calibrate --backend,
       lab), or a sweep's worker died
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C, SIGTERM); what was measured or finished is kept

\b
Output options (--json, --csv, --trace, calibrate -o) take '-' for stdout; the report
then goes to stderr."""


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
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


@command("run")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--steps", type=POSITIVE_INT, help="Number of steps (overrides the scenario's `steps`).")
@click.option("--seed", type=int, help="Random seed (overrides the scenario's `seed`).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help=SET_HELP)
@click.option("--calibration", type=click.Path(dir_okay=False),
              help="Price the ring from this calibration (commsim calibrate) instead of the nominal links.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the summary as JSON here ('-': stdout).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write one row per step as CSV here ('-': stdout).")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write a Chrome/Perfetto trace here ('-': stdout): per rank, its compute (stall, compute, "
                   "wait, optimizer) and, on a second thread, one span per bucket collective, with arrows from "
                   "each late arrival to the end of the collective it delayed.")
@click.option("--trace-ranks", type=POSITIVE_INT, default=64, show_default=True,
              help="Ranks included in the trace (the first N).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Plot step time per step and each rank's waiting time (.png, .svg or .pdf; needs the plot extra).")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
def run(scenario, steps, seed, overrides, calibration, json_path, csv_path, trace_path, trace_ranks, plot_path,
        force, quiet):
    """Simulate SCENARIO and print the predicted step time and its breakdown.

    \b
    Prints step time mean/p50/p95/p99/max, compute, exposed communication and straggler
    cost, throughput, scaling efficiency and the ranks most often last. --json writes the
    same summary (field list in README.md), --csv one row per step
    (step, start_s, end_s, duration_s, last_rank). With an output on stdout ('-'), the
    summary goes to stderr.
    """
    import numpy as np

    from commsim.sim.engine import simulate
    from commsim.output.run_files import chrome_trace, steps_csv, summary_json
    from commsim.output.progress import step_progress
    from commsim.analysis.report import late_ranks, summarize
    from commsim.output.text import print_summary, text_console
    from commsim.mitigations.section import refuse_section
    from commsim.scenario.loader import load_scenario_document

    # every output is checked before the simulation runs, not after
    if plot_path:
        check_plot_output(plot_path)
    stdout_taken = check_outputs({"--json": json_path, "--csv": csv_path, "--trace": trace_path, "--plot": plot_path},
                                 {"SCENARIO": scenario, "--calibration file": calibration})
    # a bad scenario is an InputError: one line, exit 2 (as load_or_fail, which would not hand
    # back the document); `force` passed only when set, as load_or_fail does
    # the budget counts the --trace run and its spans too (--steps 20000 --trace of an 8-rank
    # scenario passed it and outgrew 8 GiB)
    sc, document = load_scenario_document(scenario, overrides, steps, seed, calibration,
                                          **({"force": True} if force else {}),
                                          **({"trace_ranks": trace_ranks} if trace_path else {}))
    # a `mitigation:` section is compare's and sweep's: refused here (a MitigationError, one
    # line, exit 2) rather than ignored; read from the document the loader parsed, not the file again
    refuse_section(scenario, overrides, document=document)
    # the calibration file the scenario names is an input too (--json cal.yaml replaced it)
    check_not_inputs({"--json": json_path, "--csv": csv_path, "--trace": trace_path, "--plot": plot_path},
                     {"scenario's calibration file": scenario_calibration(scenario, document)})
    # per-rank records only for what an output reads (memory O(ranks + steps)): the plot
    # reads every rank's waiting time, the trace its first --trace-ranks ranks; the summary and
    # the CSV read per-step aggregates only
    every_rank = None if plot_path else np.arange(0)
    with step_progress(sc, enabled=not quiet) as on_step:
        result = simulate(sc, on_step=on_step("scenario"), ranks=every_rank)
        baseline = simulate(sc.without_stragglers(), on_step=on_step("baseline"), ranks=every_rank)
        # The trace's per-bucket spans need every collective's times on its first ranks, which
        # turns the engine's shortcuts off (a repeated shift is a sum there, a kernel call here:
        # the last digits differ): a run of its own, so that --trace changes no figure of the
        # summary, the CSV or the plot.
        traced = (simulate(sc, on_step=on_step("the trace"), ranks=np.arange(min(trace_ranks, sc.world_size)),
                           collectives=True) if trace_path else None)
    summary = summarize(sc, result, baseline)
    if json_path:
        write_output(json_path, summary_json(summary), "the JSON summary")
    if csv_path:
        write_output(csv_path, steps_csv(result, late_ranks(result, baseline)), "the step CSV")
    if trace_path:
        write_output(trace_path, chrome_trace(traced, trace_ranks, late_ranks(traced, baseline)), "the trace")
    if plot_path:
        from commsim.output.plots import plot_run

        plot_run(result, summary, plot_path, baseline=baseline)  # a PlotError is an InputError: one line, exit 2
    if not quiet:
        console = text_console(stderr=stdout_taken)
        print_summary(sc, summary, console)
        for note in (physical_fit_note(sc), ring_latency_note(sc, result.bucket_sizes)):
            if note:
                console.print(f"note: {note}", highlight=False)


# A ring whose latency steps are at least this share of its all-reduce time: the run says that a
# tree or NCCL's choice would cut them (scaling_1024.yaml's ring at 2,048 nodes is 99% latency)
RING_LATENCY_NOTE_SHARE = 0.5


def ring_latency_note(sc, bucket_sizes) -> Optional[str]:
    """What `run` says when the alpha-beta ring's 2(n-1) per-hop latencies are most of its
    all-reduce time (:func:`commsim.analysis.report.ring_latency_share`)."""
    from commsim.analysis.report import ring_latency_share

    share = ring_latency_share(sc, bucket_sizes)
    if share is None or share < RING_LATENCY_NOTE_SHARE:
        return None
    n = sc.world_size
    return (f"the ring's 2(n-1) = {2 * (n - 1):,} per-hop latencies are {share:.0%} of its all-reduce time at "
            f"{n:,} ranks; a tree, the hierarchical ring and NCCL's own choice pay fewer "
            "(commsim algorithms --algorithm ring,tree,hierarchical,nccl compares them)")


def physical_fit_note(sc) -> Optional[str]:
    """What `run` says of all-reduces priced by a calibration's physical fit
    (``collective.algorithm: nccl``): whose hardware, and how far beyond the logs' scales."""
    fit = sc.calibration.physical if sc.calibration is not None else None
    if sc.collective.algorithm != "nccl" or fit is None:
        return None
    within = ", ".join(f"{key} {value}" for key, value in (("nccl_algo", sc.collective.nccl_algo),
                                                              ("nccl_proto", sc.collective.nccl_proto)) if value)
    note = f"all-reduces: NCCL's choice{' within ' + within if within else ''}, priced by the calibration's " \
           f"physical fit of {fit.nominal.name}"
    far = fit.extrapolation(sc.cluster.nodes, sc.cluster.gpus_per_node)
    return f"{note}; {far}" if far else note


main.add_command(run)


def run_cli(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point for tests: run the CLI as `commsim ARGV...` and return its exit code."""
    return main.main(args=list(argv) if argv is not None else None, prog_name="commsim", standalone_mode=False)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_cli())
