"""Results as the text of their files: JSON, CSV and Chrome/Perfetto traces.

These functions return text; the CLI writes each file through
:func:`commsim.atomic.atomic_write_text`, so an existing file is never left half-written.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import TYPE_CHECKING, Any, Dict, Optional

import numpy as np


if TYPE_CHECKING:  # annotations only: `commsim collective` and `validate` write JSON without the engine
    from commsim.sim.engine import RunResult


def summary_json(summary: Dict[str, Any]) -> str:
    """Canonical JSON text of a summary: stable key order, so equal runs give identical bytes."""
    return json.dumps(summary, indent=2, sort_keys=True) + "\n"


def json_safe(obj: Any) -> Any:
    """`obj` made strict JSON: inf/nan become the strings "inf"/"nan", numpy scalars Python
    numbers, tuples lists."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        return json_safe(obj.item())
    return obj


def json_text(obj: Any) -> str:
    """Strict JSON text of a report or table (:func:`json_safe`), keys in the order given."""
    return json.dumps(json_safe(obj), indent=2, sort_keys=False, allow_nan=False) + "\n"


def rows_csv(rows) -> str:
    """CSV text of a table's rows (mappings of column -> value, as its JSON lists them), as a
    sweep's results.csv writes its rows (:func:`commsim.sweep.results.flatten_summary`,
    :func:`~commsim.sweep.results.csv_cell`): a nested mapping becomes dotted columns
    (step_time_s.mean), in the order they first appear; an empty cell where a row has no value."""
    from commsim.sweep.results import csv_cell, flatten_summary

    flat = [flatten_summary(json_safe(row)) for row in rows]
    columns: Dict[str, None] = {}
    for row in flat:
        columns.update(dict.fromkeys(row))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(list(columns))
    for row in flat:
        w.writerow([csv_cell(row.get(c)) for c in columns])
    return buf.getvalue()


def step_last_rank(late: np.ndarray) -> np.ndarray:
    """Per step, the rank most often late among that step's collectives (-1: none), given
    :func:`commsim.analysis.report.late_ranks`."""
    out = np.full(len(late), -1, dtype=np.int64)
    for s, row in enumerate(late):
        row = row[row >= 0]
        if row.size:
            out[s] = int(np.bincount(row).argmax())
    return out


def steps_csv(result: RunResult, late: np.ndarray) -> str:
    """One row per step: step, start_s, end_s, duration_s, last_rank (the step's most often
    late rank, -1 if none; `late` from :func:`commsim.analysis.report.late_ranks`)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["step", "start_s", "end_s", "duration_s", "last_rank"])
    last = step_last_rank(late)
    for s, (a, b) in enumerate(zip(result.step_start, result.step_end)):
        w.writerow([s, repr(float(a)), repr(float(b)), repr(float(b - a)), int(last[s])])
    return buf.getvalue()


def chrome_trace(result: RunResult, max_ranks: int = 64, late: Optional[np.ndarray] = None) -> str:
    """Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev) of the first `max_ranks` ranks
    whose records the run kept (``result.ranks``): one process per rank with a ``compute``
    thread (per step a "stall", "forward+backward", "wait for all-reduce" and "optimizer" span;
    all-reduces overlap backward, so "wait" is only the exposed part; with ``ddp.sharding`` the
    spans say what they hold: ZeRO-2's "optimizer+all-gather", FSDP's "forward+backward+gather
    waits" and "wait for reduce-scatter") and, when the run recorded its collectives
    (``simulate(collectives=True)``), a ``comm`` thread with a span per bucket collective
    ("bucket 3 all-reduce", its bucket, bytes, kind and issue time in ``args``) and flow arrows
    from each late rank's issue to the end of the collective it delayed (`late`: (steps,
    collectives) the late rank or -1, :func:`commsim.analysis.report.late_ranks`). Times in
    microseconds (:func:`commsim.traces.perfetto.run_events`)."""
    # the trace writer is imported for a trace only: `commsim run` without --trace skips it
    from commsim.traces.perfetto import run_events, trace_json

    return trace_json(run_events(result, max_ranks, late))
