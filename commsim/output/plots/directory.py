"""`commsim plot DIR` and `commsim sweep --plot`: every figure a folder's files call for.

What is drawn is chosen by what the sweep varied:

- GPU count varied (``world_size`` takes several values): step time stacked into compute,
  exposed communication and straggler cost, with the ideal (compute-only) line; scaling
  efficiency with one line per combination of the other swept values and the knee where it
  first falls below the threshold;
- GPU count and a straggler key (``stragglers...``) varied: a slowdown heatmap;
- GPU count fixed: the stacked step time over the first swept key;
- a link (``cluster.intra_node``/``cluster.inter_node``) varied, or a calibration given:
  predicted all-reduce busbw vs message size, the calibration's measured points overlaid;
- ``commsim validate`` JSON files given or found: predicted vs measured step time.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from commsim.analysis.busbw_curve import BusbwCurve, calibration_points, stored_curves, sweep_curves
from commsim.analysis.sweep_table import GPU_KEYS, MAX_JSON_BYTES, SweepTable
from commsim.analysis.validation_cases import is_validation, load_cases
from commsim.errors import InputError
from commsim.sweep.grid import Grid
from commsim.sweep.plan import plan_sweep

from commsim.output.plots.busbw import plot_busbw
from commsim.output.plots.common import PlotError, check_plot_folder
from commsim.output.plots.sweep import (plot_breakdown_by_key, plot_scaling_efficiency, plot_step_breakdown,
                                        plot_straggler_heatmap)
from commsim.output.plots.validation import plot_validation


def _replanned_curves(table: SweepTable) -> List[BusbwCurve]:
    """The busbw curves of a results.json written without them: the sweep re-planned from the
    scenario path it stores, which only works from the folder the sweep ran in."""
    meta = table.meta
    grid = Grid(tuple(table.grid), tuple(tuple(v) for v in table.grid.values()))
    points = plan_sweep(meta["scenario"], grid, meta.get("overrides") or (), meta.get("steps"), meta.get("seed"))
    return sweep_curves(points, table.link_keys())


def sweep_busbw_curves(table: SweepTable) -> List[BusbwCurve]:
    """The curves stored in results.json, else re-planned (with a note on stderr when that fails)."""
    stored = stored_curves(table.meta, table.source)
    if stored is not None:
        return stored
    try:
        return _replanned_curves(table)
    except (InputError, KeyError) as exc:
        sys.stderr.write(f"commsim: note: predicted busbw curves skipped: {table.source} holds none and the sweep "
                         f"cannot be re-planned from {table.meta.get('scenario')!r} ({exc})\n")
        return []


def plot_sweep(table: SweepTable, out_dir: Path, threshold: float = 0.85,
               calibration: Optional[Path] = None) -> List[Path]:
    """Every plot the sweep's varied keys call for (see the module docstring)."""
    written: List[Path] = []
    varied = table.varied()
    if len(table.gpu_counts()) > 1:
        written += plot_step_breakdown(table, out_dir)
        written += plot_scaling_efficiency(table, out_dir, threshold)
        severity = table.straggler_key()
        if severity is not None:
            written += plot_straggler_heatmap(table, severity, out_dir)
    else:
        for key in [k for k in varied if k not in GPU_KEYS][:1]:
            written += plot_breakdown_by_key(table, key, out_dir)
    if table.link_keys() or calibration is not None:
        # a results.json written before one-rank sweeps stored no curve holds one of NaN only:
        # nothing a log axis can draw
        curves = [c for c in sweep_busbw_curves(table) if any(b > 0 for b in c.busbw_Bps)]
        measured = calibration_points(calibration) if calibration is not None else []
        if curves or measured:
            written += plot_busbw(curves, out_dir, measured)
    return written


# A validate report is a few kB; a *.json in the folder far larger than this is something else
# and is not read whole to find out (the limit every JSON input of the plots is read under).
MAX_FOUND_JSON_BYTES = MAX_JSON_BYTES


def _regular(path: Path) -> bool:
    """Whether `path` (its symlinks followed) is a regular file: a device (/dev/zero) or FIFO
    would be read forever or block for a writer."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def _check_input_file(path: Path, expected: str) -> None:
    """A given input that exists must be a regular file (a missing one is its reader's to name)."""
    if path.exists() and not _regular(path):
        raise PlotError(str(path), f"expected {expected} (a regular file), got a device, FIFO or socket")


def _validation_files(directory: Path) -> List[Path]:
    found = []
    for f in sorted(directory.glob("*.json")):
        if f.name == "results.json" or not _regular(f) or f.stat().st_size > MAX_FOUND_JSON_BYTES:
            continue
        try:
            if is_validation(json.loads(f.read_text())):
                found.append(f)
        except (OSError, ValueError, RecursionError):  # not JSON, or nested deeper than json decodes: not validate's
            continue
    return found


def plot_directory(directory: Path, validations: Sequence[Path] = (), calibration: Optional[Path] = None,
                   threshold: float = 0.85) -> List[Path]:
    """`commsim plot DIR`: sweep plots from DIR/results.json, the validation plot from the given
    files plus any validate JSON in DIR. Returns the files written (PNG and SVG).

    Every input problem (a foreign results.json, a bad calibration, an unwritable DIR) is a
    :class:`PlotError`."""
    directory = Path(directory)
    check_plot_folder(directory)
    results = directory / "results.json"
    _check_input_file(results, "the results.json of commsim sweep")
    for given in validations:
        _check_input_file(Path(given), "commsim validate JSON")
    try:
        written: List[Path] = []
        table = SweepTable.load(results) if results.exists() else None
        if table is not None:
            written += plot_sweep(table, directory, threshold, calibration)
        files = list(dict.fromkeys([*validations, *_validation_files(directory)]))
        if files:
            written += plot_validation(load_cases(files), directory)
        if not results.exists() and not files and calibration is not None:
            written += plot_busbw([], directory, calibration_points(calibration))
    except PlotError:
        raise
    except InputError as exc:  # one error type for the CLI: the file, the key path, the message
        raise PlotError(exc.source, exc.message, exc.path) from None
    if not written and table is not None and not table.varied():  # one value per key: no axis to draw
        raise PlotError(str(results), "nothing to plot: expected a sweep with a key of two or more values "
                                      "(commsim sweep --grid KEY=V1,V2), got one point per key")
    if not written:
        raise PlotError(str(directory), "nothing to plot: expected results.json from commsim sweep, "
                                        "commsim validate JSON files, or --calibration")
    return written
