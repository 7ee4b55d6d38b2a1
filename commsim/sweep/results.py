"""``results.csv`` and ``results.json``: one row per finished point of the current grid.

Rows are in grid order (last key varying fastest), with the swept values and every metric of
``commsim run``'s JSON. They are rendered from the finished points only, so they are
byte-identical for the same grid whatever order the points finished in, and rewritten
atomically at most once a second while the sweep runs and once at the end.
"""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from commsim.atomic import atomic_write_text
from commsim.sweep.errors import SweepWriteError
from commsim.sweep.grid import value_text
from commsim.sweep.journal import Journal
from commsim.sweep.plan import Point

RESULTS_CSV = "results.csv"
RESULTS_JSON = "results.json"

# Rewrite results.csv/json at most this often while points finish: the journal is the
# durable record, and rewriting N rows per finished point would be O(N^2) on big sweeps.
FLUSH_INTERVAL_S = 1.0


def flatten_summary(summary: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Nested metrics become dotted columns (step_time_s.mean); lists stay whole."""
    flat: Dict[str, Any] = {}
    for k, v in summary.items():
        if isinstance(v, dict):
            flat.update(flatten_summary(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


def csv_cell(value: Any) -> Any:
    """A metric as a CSV cell: empty for None, compact JSON for a list, mapping or boolean
    (true/false, as the JSON says it), the value itself otherwise (csv writes a float's repr)."""
    if value is None:
        return ""
    if isinstance(value, (list, dict, bool)):
        return json.dumps(value, separators=(",", ":"), default=str)
    return value


def result_rows(points: Sequence[Point], done: Mapping[str, Dict[str, Any]]) -> Tuple[List[str], List[Dict[str, Any]]]:
    """The columns and the rows (finished points only, in grid order) of the results table."""
    grid_keys = [k for k, _ in points[0].params] if points else []
    columns = ["point", *grid_keys]
    rows = []
    for p in points:
        summary = done.get(p.key)
        if summary is None:
            continue
        flat = flatten_summary(summary)
        for col in flat:
            # A swept key that is also a metric (e.g. `steps`) is the same number: keep one column.
            if col not in columns:
                columns.append(col)
        row = {"point": p.index, **dict(p.params)}
        row.update({k: v for k, v in flat.items() if k not in row})
        rows.append(row)
    return columns, rows


def write_results(out_dir: Path, points: Sequence[Point], done: Mapping[str, Dict[str, Any]],
                  meta: Mapping[str, Any]) -> None:
    """Render results.csv and results.json (atomically) from the finished points.

    Raises SweepWriteError naming the file that could not be written."""
    columns, rows = result_rows(points, done)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        cells = []
        for col in columns:
            v = row.get(col)
            cells.append(value_text(v) if col in meta["grid"] else csv_cell(v))
        writer.writerow(cells)
    doc = {**meta, "points_total": len(points), "points_done": len(rows), "complete": len(rows) == len(points),
           "columns": columns, "rows": rows}
    for name, text in ((RESULTS_CSV, buf.getvalue()), (RESULTS_JSON, json.dumps(doc, indent=1, default=str) + "\n")):
        path = Path(out_dir) / name
        try:
            atomic_write_text(path, text)
        except OSError as exc:
            raise SweepWriteError(path, exc) from None


class ResultsWriter:
    """Appends finished points to the journal and keeps results.csv / results.json up to date.

    ``done`` (fingerprint -> summary) starts as what the journal already holds and grows by each
    recorded point, only once its journal line is on disk: the results are rendered from it, so
    they never show a point the journal lacks."""

    def __init__(self, out_dir: Path, points: Sequence[Point], meta: Dict[str, Any],
                 done: Dict[str, Dict[str, Any]], journal: Journal):
        self.out_dir, self.points, self.meta, self.done = Path(out_dir), points, meta, done
        self.journal = journal
        self._last_flush = 0.0
        self._dirty = True
        self.results_match = True  # False once settle() could not bring the results up to date

    def record(self, point: Point, summary: Dict[str, Any]) -> None:
        """Journal a finished point, then rewrite the results if the last rewrite is a second old."""
        self.journal.append(point.key, dict(point.params), summary)
        self.done.setdefault(point.key, summary)
        self._dirty = True
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        """Rewrite results.csv and results.json if a point was recorded since the last rewrite."""
        if not self._dirty:
            return
        write_results(self.out_dir, self.points, self.done, self.meta)
        self._last_flush = time.monotonic()
        self._dirty = False

    def settle(self) -> str:
        """After a failure: make the results agree with the journal, never raising. Says how.

        On a full disk the atomic rewrite needs room for the old and the new file at once; the
        results are only a rendering of the journal, so when the rewrite fails the stale ones
        are removed (which frees that room) and the rewrite is tried once more. If that fails
        too, none are left: better than results that contradict the journal."""
        self._dirty = True
        for _ in range(2):
            try:
                self.flush()
                return f"{RESULTS_CSV} and {RESULTS_JSON} match it"
            except SweepWriteError:
                self._remove_results()
        self.results_match = False
        if any((self.out_dir / name).exists() for name in (RESULTS_CSV, RESULTS_JSON)):
            return (f"{RESULTS_CSV} and {RESULTS_JSON} could not be updated and may lag it "
                    "(--resume rewrites them)")
        return f"{RESULTS_CSV} and {RESULTS_JSON} removed (no room to rewrite them; --resume does)"

    def _remove_results(self) -> None:
        for name in (RESULTS_CSV, RESULTS_JSON):
            try:
                (self.out_dir / name).unlink()
            except OSError:
                pass  # absent, or a read-only filesystem: reported by settle()
