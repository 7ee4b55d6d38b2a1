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

The names below are re-exported so that ``commsim.sweep.run`` stays the sweep's one entry point.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple

from commsim.sweep.errors import SweepError, SweepInterrupted
from commsim.sweep.executors import iter_dask, iter_process_pool, progress_bar
from commsim.sweep.grid import Grid, combine_grids, load_grid_file, parse_grid_args, parse_grid_option
from commsim.sweep.journal import JOURNAL, read_journal
from commsim.sweep.plan import Point, fingerprint, plan_sweep, run_point
from commsim.sweep.results import RESULTS_CSV, RESULTS_JSON, ResultsWriter, result_rows, write_results

__all__ = [
    "JOURNAL", "RESULTS_CSV", "RESULTS_JSON", "Grid", "Point", "ProgressHook", "SweepError",
    "SweepInterrupted", "SweepResult", "combine_grids", "fingerprint", "load_grid_file",
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
    Raises SweepInterrupted on Ctrl-C after saving what finished."""
    t0 = time.perf_counter()
    points = plan_sweep(scenario_path, grid, overrides, steps, seed)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise SweepError(f"-o {out}", None, "expected a directory, got a file")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SweepError(f"-o {out}", None, f"cannot create the output directory: {exc.strerror or exc}") from None
    journal = out / JOURNAL
    if not resume and journal.is_file() and journal.stat().st_size > 0:
        raise SweepError(
            f"-o {out}", None,
            f"already holds sweep results ({JOURNAL}); pass --resume to complete them "
            "or choose another directory",
        )
    done = read_journal(out) if resume else {}
    meta = {
        "scenario": str(scenario_path),
        "overrides": list(overrides),
        "steps": steps,
        "seed": seed,
        "grid": grid.as_dict(),
    }
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
    writer = ResultsWriter(out, points, meta, done)
    if dask_scheduler is not None or dask_client is not None:
        stream = iter_dask(todo, dask_client, dask_scheduler)
    else:
        stream = iter_process_pool(todo, jobs or os.cpu_count() or 1)
    ran = 0
    try:
        with bar:
            for p, summary in stream:
                writer.record(p, summary)
                ran += 1
                finished += per_key[p.key]
                bar.update(task, completed=finished)
                if on_point is not None:
                    on_point(finished, total)
    except KeyboardInterrupt:
        stream.close()
        writer.close()
        raise SweepInterrupted(finished, total, out) from None
    finally:
        stream.close()
        writer.close()
    return SweepResult(out, tuple(points), ran, reused, time.perf_counter() - t0)
