"""Writing results: JSON, CSV and Chrome/Perfetto traces, always atomically.

Every file is written through :func:`commsim.atomic.atomic_write_text`, so an existing file is
never left half-written.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Dict

import numpy as np

from commsim.atomic import atomic_write_text  # noqa: F401 - re-exported: every output file is written through it
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


def chrome_trace(result: RunResult, max_ranks: int = 64) -> str:
    """Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev), one track per rank for the
    first `max_ranks` ranks whose records the run kept (``result.ranks``): per step a "stall", "forward+backward", "wait for all-reduce" and
    "optimizer" span. All-reduces overlap backward, so "wait" is only the exposed part.
    With ``ddp.sharding`` the spans say what they hold: ZeRO-2's "optimizer+all-gather" (the
    gather follows the optimizer), FSDP's "forward+backward+gather waits" (units wait for their
    all-gathers) and "wait for reduce-scatter". Times in microseconds."""
    events = []
    kept = result.ranks[:max_ranks]
    sharding = result.scenario.ddp.sharding
    compute_name = "forward+backward+gather waits" if sharding == "fsdp" else "forward+backward"
    wait_name = "wait for all-reduce" if sharding == "none" else "wait for reduce-scatter"
    optimizer_name = "optimizer+all-gather" if sharding == "zero2" else "optimizer"
    start = np.vstack([np.zeros((1, result.rank_end.shape[1])), result.rank_end[:-1]])

    def span(name, rank, step, t0, t1):
        if t1 > t0:
            events.append({"name": name, "cat": "step", "ph": "X", "pid": 0, "tid": rank,
                           "ts": t0 * 1e6, "dur": (t1 - t0) * 1e6, "args": {"step": step}})

    for j, r in enumerate(int(r) for r in kept):  # column j holds rank r
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": r, "args": {"name": f"rank {r}"}})
        for s in range(result.rank_end.shape[0]):
            t0 = start[s, j]
            compute_start = t0 + result.rank_stall[s, j]
            bwd_end, comm_end = result.rank_backward_end[s, j], result.rank_comm_end[s, j]
            opt_start = max(bwd_end, comm_end)
            span("stall", r, s, t0, compute_start)
            span(compute_name, r, s, compute_start, bwd_end)
            span(wait_name, r, s, bwd_end, opt_start)
            span(optimizer_name, r, s, opt_start, result.rank_end[s, j])
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}) + "\n"
