"""Parameter sweeps: the cartesian product of a grid of scenario overrides, one full simulation per point.

:func:`run_sweep` ties the stages together: the grid (:mod:`~commsim.sweep.grid`), the
validated points (:mod:`~commsim.sweep.plan`), the journal (:mod:`~commsim.sweep.journal`)
and the results files (:mod:`~commsim.sweep.results`) in the output directory, and where the
points run (:mod:`~commsim.sweep.executors`).

Files in the output directory:

- ``points.jsonl``: the journal, one fsync'ed JSON line per finished point, what ``--resume``
  reads: a point whose resolved scenario is already in the journal is not run again, so a grid
  that grew is completed, not restarted, and a changed scenario file is rerun.
- ``results.csv`` and ``results.json``: one row per finished point of the current grid, in
  grid order, byte-identical for the same grid whatever order the points finished in.
- ``sweep.lock``: held for the whole run, so a second sweep into the directory is refused.

However a sweep stops (done, Ctrl-C, SIGTERM, a full disk, a dead worker), the results files
agree with the journal, and no worker process is left behind.

The names below are re-exported so that ``commsim.sweep.run`` stays the sweep's one entry point.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple

from commsim.analysis.busbw_curve import RESULTS_KEY, results_field
from commsim.sweep import signals
from commsim.sweep.errors import (SweepError, SweepInterrupted, SweepLocked, SweepRunFailed, SweepWriteError,
                                  os_error_text)
from commsim.sweep.executors import WorkerDied, check_scheduler_address, iter_dask, iter_process_pool, progress_bar
from commsim.sweep.grid import Grid, combine_grids, load_grid_file, parse_grid_args, parse_grid_option
from commsim.sweep.journal import JOURNAL, Journal, read_journal
from commsim.sweep.lock import LOCK_FILE, sweep_lock
from commsim.sweep.plan import Point, fingerprint, plan_sweep, run_point
from commsim.sweep.results import RESULTS_CSV, RESULTS_JSON, ResultsWriter, result_rows, write_results
from commsim.units import counted

__all__ = [
    "JOURNAL", "LOCK_FILE", "RESULTS_CSV", "RESULTS_JSON", "Grid", "Point", "ProgressHook", "SweepError",
    "SweepInterrupted", "SweepLocked", "SweepResult", "SweepRunFailed", "SweepWriteError", "combine_grids", "fingerprint", "load_grid_file",
    "parse_grid_args", "parse_grid_option", "plan_sweep", "read_journal", "result_rows",
    "run_point", "run_sweep", "write_results",
]


@dataclass(frozen=True)
class SweepResult:
    """What a finished sweep did: all points, how many were run now and how many reused."""

    out_dir: Path
    points: Tuple[Point, ...]
    ran: int
    reused: int
    wall_s: float

    def summary(self) -> str:
        """The line `commsim sweep` prints when done: "1 point (1 run, 0 reused) in 0.4 s -> ..."."""
        return (f"{counted(len(self.points), 'point')} ({self.ran} run, {self.reused} reused) in "
                f"{self.wall_s:.1f} s -> {self.out_dir / RESULTS_CSV}, {self.out_dir / RESULTS_JSON}")


ProgressHook = Callable[[int, int], None]


def run_sweep(
    scenario_path: os.PathLike | str,
    grid: Grid,
    out_dir: os.PathLike | str,
    *,
    overrides: Sequence[str] = (),
    steps: Optional[int] = None,
    seed: Optional[int] = None,
    jobs: Optional[int] = None,
    dask_scheduler: Optional[str] = None,
    dask_client=None,
    resume: bool = False,
    progress: bool = False,
    on_point: Optional[ProgressHook] = None,
) -> SweepResult:
    """Run every point of `grid` on `scenario_path` and write the results into `out_dir`.

    Validates the whole grid first (raising ScenarioError/SweepError before anything runs).
    `jobs` local processes (default: the CPU count; 1 runs inline), or a Dask cluster given by
    `dask_scheduler` (an address) or `dask_client` (a ``dask.distributed.Client``).
    `on_point(done, total)` is called after each finished point (tests use it to interrupt).

    Raises SweepLocked if another sweep holds `out_dir`; SweepInterrupted on Ctrl-C or SIGTERM
    (from the main thread) and SweepWriteError when an output file cannot be written (a full
    disk), both after saving what finished; SweepRunFailed if a pool worker dies."""
    t0 = time.perf_counter()
    if dask_scheduler is not None:
        check_scheduler_address(dask_scheduler)
    points = plan_sweep(scenario_path, grid, overrides, steps, seed)
    out = _output_dir(Path(out_dir))
    meta = {
        "scenario": str(scenario_path),
        "overrides": list(overrides),
        "steps": steps,
        "seed": seed,
        "grid": grid.as_dict(),
        # the predicted busbw curves of the planned points, so that `commsim plot` draws them
        # from results.json alone (from any folder, after the scenario file moved)
        RESULTS_KEY: results_field(points, grid.as_dict()),
    }
    # The lock covers the whole run, from the "already holds results" check to the last write:
    # two sweeps into one directory would otherwise interleave (or lose) each other's points.
    with signals.interrupts_handled(), sweep_lock(out):
        journal_path = out / JOURNAL
        if not resume and journal_path.is_file() and journal_path.stat().st_size > 0:
            raise SweepError(
                f"-o {out}", None,
                f"already holds sweep results ({JOURNAL}); pass --resume to complete them "
                "or choose another directory",
            )
        journal = Journal(out)  # repairs a torn last line before anything is read or appended
        try:
            done = read_journal(out) if resume else {}
            writer = ResultsWriter(out, points, meta, done, journal)
            ran, reused = _run_points(points, writer, jobs, dask_scheduler, dask_client, progress, on_point)
        finally:
            journal.close()
    return SweepResult(out, tuple(points), ran, reused, time.perf_counter() - t0)


def _output_dir(out: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise SweepError(f"-o {out}", None, "expected a directory, got a file")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SweepError(f"-o {out}", None, f"cannot create the output directory: {os_error_text(exc)}") from None
    return out


def _run_points(points: Sequence[Point], writer: ResultsWriter, jobs: Optional[int],
                dask_scheduler: Optional[str], dask_client, progress: bool,
                on_point: Optional[ProgressHook]) -> Tuple[int, int]:
    """Run the points the journal lacks and record each as it finishes: (run now, reused)."""
    done, out = writer.done, writer.out_dir
    # Two grid points that resolve to the same scenario run once.
    todo, seen = [], set(done)
    for p in points:
        if p.key not in seen:
            seen.add(p.key)
            todo.append(p)
    reused = sum(1 for p in points if p.key in done)
    total = len(points)
    # Several grid points may resolve to one scenario: count them all when it finishes.
    per_key: Dict[str, int] = {}
    for p in points:
        per_key[p.key] = per_key.get(p.key, 0) + 1
    finished = sum(n for k, n in per_key.items() if k in done)
    bar, task = progress_bar(total, finished, progress)
    if dask_scheduler is not None or dask_client is not None:
        stream = iter_dask(todo, dask_client, dask_scheduler)
    else:
        stream = iter_process_pool(todo, jobs or os.cpu_count() or 1)
    ran = 0
    try:
        with bar:
            for p, summary in stream:
                with signals.deferred():  # the journal line and the count go together
                    writer.record(p, summary)
                    ran += 1
                    finished += per_key[p.key]
                bar.update(task, completed=finished)
                if on_point is not None:
                    on_point(finished, total)
        writer.flush()
    except KeyboardInterrupt:
        stream.close()  # stops the workers now, not after the points in flight
        state = writer.settle()
        raise SweepInterrupted(finished, total, out, "" if writer.results_match else state) from None
    except SweepWriteError as exc:
        stream.close()
        state = writer.settle()
        raise exc.with_summary(
            f"{finished} of {counted(total, 'point')} saved in {writer.journal.path}, {state}; "
            "make room and rerun with --resume to complete the sweep"
        ) from None
    except WorkerDied as exc:
        stream.close()
        state = writer.settle()
        raise SweepRunFailed(f"{exc}; {state}", finished, total, out) from None
    finally:
        stream.close()
    return ran, reused
