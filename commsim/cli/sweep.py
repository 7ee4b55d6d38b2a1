"""`commsim sweep` and `commsim plot`: thin click wrappers over :mod:`commsim.sweep.run` and
:mod:`commsim.output.plots`. Parse, call the library, print, return an exit code: 2 for bad
input (one line on stderr, no traceback; also an output directory in use by another sweep or a
file that cannot be written), 130 for a sweep stopped by Ctrl-C or SIGTERM, 3 when a worker
process died under a point."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence, Tuple

import click

from commsim.cli.common import Fraction, command, fail
from commsim.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED, InputError
from commsim.sweep import signals
from commsim.sweep.errors import SweepInterrupted, SweepRunFailed, os_error_text


@click.command("sweep")
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--grid", "grids", multiple=True, required=True, metavar="KEY=V1,V2,...|GRID.yaml",
              help="Values to sweep: KEY=V1,V2,... (each value parsed as YAML, like --set) or a grid "
                   "YAML file mapping keys to lists. Repeat for more keys: points are the cartesian product.")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output directory: results.csv, results.json, points.jsonl (the journal).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a scenario key for every point (as in commsim run).")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Steps per point.")
@click.option("--seed", type=int, default=None, help="Seed for every point.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Local worker processes (default: the number of CPUs; 1 runs in this process).")
@click.option("--dask-scheduler", metavar="ADDRESS", default=None,
              help="Run the points on this Dask distributed scheduler (tcp://host:8786) instead.")
@click.option("--resume", is_flag=True,
              help="Skip points already finished in the output directory and run the rest.")
@click.option("--plot", "make_plots", is_flag=True, help="Write the plots (commsim plot) when done.")
@click.option("--quiet", "-q", is_flag=True,
              help="Print nothing but errors: no progress bar, no summary (the results are still written).")
def sweep_command(scenario: Path, grids: Tuple[str, ...], out_dir: Path, overrides: Tuple[str, ...],
                  steps: Optional[int], seed: Optional[int], jobs: Optional[int],
                  dask_scheduler: Optional[str], resume: bool, make_plots: bool, quiet: bool) -> None:
    """Run SCENARIO at every point of a grid of overrides and tabulate the results.

    \b
    Example:
      commsim sweep scenarios/scaling_1024.yaml -o out/ \\
        --grid cluster.nodes=4,16,64,128 --grid "cluster.inter_node.bandwidth=100 Gbps,400 Gbps"
    """
    from commsim.sweep.grid import parse_grid_args  # heavy (the loader, the engine): only when run
    from commsim.sweep.run import run_sweep

    # SIGTERM stops the command like Ctrl-C, from the first line to the plots.
    with signals.interrupts_handled():
        try:
            grid = parse_grid_args(grids)
            _check_not_over_calibration(scenario, overrides, grid, out_dir)
            result = run_sweep(scenario, grid, out_dir, overrides=overrides, steps=steps, seed=seed,
                               jobs=jobs, dask_scheduler=dask_scheduler, resume=resume,
                               progress=not quiet and sys.stderr.isatty())
        except InputError as exc:
            fail(str(exc))
        except SweepInterrupted as exc:
            fail(str(exc), EXIT_INTERRUPTED)
        except SweepRunFailed as exc:
            fail(str(exc), EXIT_RUN_FAILED)
        except KeyboardInterrupt:  # outside the run proper (planning the grid, a second Ctrl-C)
            fail(f"interrupted; rerun with --resume to complete the sweep in {out_dir}", EXIT_INTERRUPTED)
        if not quiet:
            click.echo(result.summary())
        if make_plots:
            try:
                _plot(out_dir, (), None, 0.85, quiet)
            except KeyboardInterrupt:
                fail(f"interrupted while plotting; the sweep's results are complete in {out_dir}",
                     EXIT_INTERRUPTED)


def _check_not_over_calibration(scenario: Path, overrides: Sequence[str], grid, out_dir: Path) -> None:
    """Refuse a sweep whose -o folder would write one of its files (results, journal, lock)
    over a calibration file the scenario or a --grid calibration=... names."""
    from commsim.cli.outputs import check_not_inputs, named_calibrations
    from commsim.sweep.journal import JOURNAL
    from commsim.sweep.lock import LOCK_FILE
    from commsim.sweep.results import RESULTS_CSV, RESULTS_JSON

    try:
        named = named_calibrations(str(scenario), overrides, grid.as_dict().get("calibration", ()))
    except InputError:
        return  # a scenario that cannot be read, or a bad --set: run_sweep reports it, as before
    for name in (RESULTS_CSV, RESULTS_JSON, JOURNAL, LOCK_FILE):
        check_not_inputs({"-o": str(out_dir / name)}, {"scenario's calibration file": named})


def _plot(directory: Path, validations: Sequence[Path], calibration: Optional[Path],
          threshold: float, quiet: bool = False) -> None:
    from commsim.output.plots import PlotError, plot_directory

    try:
        written = plot_directory(directory, validations=validations, calibration=calibration,
                                 threshold=threshold)
    except (PlotError, InputError) as exc:
        fail(str(exc))
    except OSError as exc:  # a read-only or full directory
        where = f"{exc.filename}: " if exc.filename else f"{directory}: "
        fail(f"{where}cannot write the plots: {os_error_text(exc)}")
    for path in written if not quiet else ():
        click.echo(str(path))


@command("plot")  # a commsim Command: SIGTERM stops it as Ctrl-C does (SIGTERM_AS_CTRL_C)
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--validation", "validations", multiple=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="A commsim validate JSON file (repeatable); *.json files in DIRECTORY that look "
                   "like validate output are picked up too.")
@click.option("--calibration", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A calibration YAML whose measured busbw points are drawn over the predicted curves.")
@click.option("--threshold", type=Fraction(), default=0.85,
              show_default=True, help="Scaling-efficiency threshold whose crossing (the knee) is marked.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors (the plots are still written).")
def plot_command(directory: Path, validations: Tuple[Path, ...], calibration: Optional[Path],
                 threshold: float, quiet: bool) -> None:
    """Write PNG and SVG plots into DIRECTORY, chosen by what its sweep varied."""
    _plot(directory, validations, calibration, threshold, quiet)


def register(group: click.Group) -> None:
    """Add `sweep` and `plot` to the main commsim group."""
    group.add_command(sweep_command)
    group.add_command(plot_command)
