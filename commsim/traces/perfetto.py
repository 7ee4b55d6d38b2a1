"""Perfetto / Chrome trace-event JSON of a blamed job: who waited for whom, drawn.

One process per rank (``pid`` = rank), two tracks each: ``compute`` (per step: forward,
backward, waiting for communication, optimizer) and ``comm`` (one span per bucket
all-reduce, from when it ran on the rank to when it ended there). A flow arrow runs from each
late arrival (the last rank's issue of a collective late beyond noise) to the end of that
collective on the rank that arrived first, the one that waited longest. Open the file in
ui.perfetto.dev or chrome://tracing. Times are microseconds from the job's first event.

A simulated run (:func:`run_events`, also ``commsim run --trace``) has the same two tracks from
the engine's recorded collectives (``simulate(collectives=True)``): the same arrows, from the
late rank's issue to the collective's end on the rank that issued it first.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

import numpy as np

COMPUTE, COMM = 0, 1


def _meta(events: List[dict], ranks) -> None:
    for r in ranks:
        events.append({"name": "process_name", "ph": "M", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": r, "tid": 0, "args": {"sort_index": r}})
        events.append({"name": "thread_name", "ph": "M", "pid": r, "tid": COMPUTE, "args": {"name": "compute"}})
        events.append({"name": "thread_name", "ph": "M", "pid": r, "tid": COMM, "args": {"name": "comm"}})


def _span(events, name, pid, tid, t0, t1, origin, args=None, cat="step"):
    if np.isfinite(t0) and np.isfinite(t1) and t1 > t0:
        events.append({"name": name, "cat": cat, "ph": "X", "pid": int(pid), "tid": tid,
                       "ts": (t0 - origin) * 1e6, "dur": (t1 - t0) * 1e6, "args": args or {}})


def job_trace(job, tl, report: Dict[str, Any]) -> str:
    """The trace of a job read from traces (`tl`: its Timeline, or None without steps)."""
    n = job.world_size
    events: List[dict] = []
    _meta(events, range(n))
    times = [np.nanmin(c.issue) for c in job.collectives]
    if tl is not None:
        times.append(float(np.nanmin(tl.step_start)))
    origin = float(np.nanmin(times))
    if tl is not None:
        done = np.maximum(tl.backward_end, tl.comm_end)
        for k in range(tl.steps):
            step = int(tl.step_numbers[k])
            for r in range(n):
                a = {"step": step}
                _span(events, "forward", r, COMPUTE, tl.step_start[k, r], tl.backward_start[k, r], origin, a)
                _span(events, "backward", r, COMPUTE, tl.backward_start[k, r], tl.backward_end[k, r], origin, a)
                _span(events, "wait for all-reduce", r, COMPUTE, tl.backward_end[k, r], done[k, r], origin, a)
                _span(events, "optimizer", r, COMPUTE, done[k, r], tl.step_end[k, r], origin, a)
    position = {}
    if tl is not None:
        for k in range(tl.steps):
            for j, ci in enumerate(tl.bucket_index[k]):
                position[int(ci)] = (int(tl.step_numbers[k]), j)
    rows = report["per_collective"]
    for ci, c in enumerate(job.collectives):
        where = position.get(ci)
        label = f"bucket {where[1]} all-reduce" if where else c.kind
        for r in c.ranks:
            t0 = c.start[r] if np.isfinite(c.start[r]) else c.issue[r]
            args = {"bytes": int(c.nbytes), "collective": ci, "issued_us": (c.issue[r] - origin) * 1e6}
            if where:
                args["step"] = where[0]
            if np.isfinite(c.end[r]):
                _span(events, label, r, COMM, t0, c.end[r], origin, args, cat="collective")
            else:
                events.append({"name": f"{label} issued", "cat": "collective", "ph": "i", "s": "t", "pid": int(r),
                               "tid": COMM, "ts": (c.issue[r] - origin) * 1e6, "args": args})
        row = rows[ci]
        if not row["late"]:
            continue
        late = row["last_rank"]
        arrivals = np.array([c.issue[r] if r in c.ranks else np.nan for r in range(n)])
        first = int(np.nanargmin(arrivals))
        end = c.end[first]
        if not np.isfinite(end):
            continue
        flow = {"cat": "blame", "name": f"rank {late} late by {row['lateness_s'] * 1e3:.3g} ms", "id": ci}
        events.append({**flow, "ph": "s", "pid": late, "tid": COMPUTE, "ts": (arrivals[late] - origin) * 1e6})
        events.append({**flow, "ph": "f", "bp": "e", "pid": first, "tid": COMM,
                       "ts": (end - origin) * 1e6 - 0.001})
    return trace_json(events, {"verdict": report["verdict"]})


def run_events(result, max_ranks: int = 64, late: Optional[np.ndarray] = None) -> List[dict]:
    """Trace events of a simulated run (a RunResult) for the first `max_ranks` ranks it kept.

    One process per rank, two threads: ``compute`` (per step: stall, compute, the exposed wait
    for communication, optimizer; named for ``ddp.sharding``: ZeRO-2's "optimizer+all-gather",
    FSDP's "forward+backward+gather waits") and ``comm``, one span per collective from its start
    on the rank (the later of its issue and the rank's previous collective's end) to its end
    there, with the bucket, its bytes, the kind and the issue time in ``args`` (only when the
    run recorded its collectives: ``simulate(collectives=True)``). `late` (steps, collectives):
    the rank late to each collective, -1 for none (:func:`commsim.analysis.report.late_ranks`);
    an arrow runs from that rank's issue to the collective's end on the kept rank that issued
    it first, the one that waited longest."""
    from commsim.sim.sharding import stream_order

    sc = result.scenario
    kept = [int(r) for r in result.ranks[:max_ranks]]
    events: List[dict] = []
    _meta(events, kept)
    sharding = sc.ddp.sharding
    compute_name = "forward+backward+gather waits" if sharding == "fsdp" else "forward+backward"
    wait_name = "wait for all-reduce" if sharding == "none" else "wait for reduce-scatter"
    optimizer_name = "optimizer+all-gather" if sharding == "zero2" else "optimizer"
    start = np.vstack([np.zeros((1, result.rank_end.shape[1])), result.rank_end[:-1]])
    steps = result.rank_end.shape[0]
    for j, r in enumerate(kept):  # column j holds rank r
        for s in range(steps):
            t0 = start[s, j]
            c0 = t0 + result.rank_stall[s, j]
            bwd, comm = result.rank_backward_end[s, j], result.rank_comm_end[s, j]
            done = max(bwd, comm)
            a = {"step": s}
            _span(events, "stall", r, COMPUTE, t0, c0, 0.0, a)
            _span(events, compute_name, r, COMPUTE, c0, bwd, 0.0, a)
            _span(events, wait_name, r, COMPUTE, bwd, done, 0.0, a)
            _span(events, optimizer_name, r, COMPUTE, done, result.rank_end[s, j], 0.0, a)
    if result.coll_start is None or not kept:
        return events
    ops = stream_order(sharding, len(result.bucket_sizes), sc.ddp.overlap)
    issue, begin, end = (x[:, :, :len(kept)] for x in (result.coll_issue, result.coll_start, result.coll_finish))
    for s in range(steps):
        for k, op in enumerate(ops):
            label = f"bucket {op.bucket} {op.kind.replace('_', '-')}"
            for j, r in enumerate(kept):
                args = {"step": s, "collective": k, "bucket": op.bucket, "bytes": int(result.bucket_sizes[op.bucket]),
                        "kind": op.kind, "phase": op.phase, "issued_us": issue[s, k, j] * 1e6}
                _span(events, label, r, COMM, begin[s, k, j], end[s, k, j], 0.0, args, cat="collective")
    if late is None:
        return events
    column = {r: j for j, r in enumerate(kept)}
    nc = len(ops)
    for s, k in zip(*np.nonzero(late >= 0)):
        who = int(late[s, k])
        if who not in column:
            continue
        first = int(np.argmin(issue[s, k]))
        others = np.delete(issue[s, k], column[who])
        # blame's lateness: the late issue minus the latest other one (here: of the kept ranks)
        lateness = issue[s, k, column[who]] - (others.max() if others.size else issue[s, k, column[who]])
        flow = {"cat": "blame", "name": f"rank {who} late by {lateness * 1e3:.3g} ms", "id": int(s) * nc + int(k)}
        events.append({**flow, "ph": "s", "pid": who, "tid": COMPUTE, "ts": issue[s, k, column[who]] * 1e6 - 0.001})
        events.append({**flow, "ph": "f", "bp": "e", "pid": kept[first], "tid": COMM,
                       "ts": end[s, k, first] * 1e6 - 0.001})
    return events


def trace_json(events: List[dict], other: Optional[Dict[str, Any]] = None) -> str:
    """The trace file's text: the events, milliseconds as the display unit, `other` as ``otherData``."""
    doc: Dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ms"}
    if other:
        doc["otherData"] = other
    return json.dumps(doc) + "\n"


def run_trace(result, report: Dict[str, Any], max_ranks: int = 64) -> str:
    """The trace of a simulated run (a RunResult) with its blame arrows, for the first
    `max_ranks` ranks: :func:`run_events`, late collectives as the report has them. A run
    without recorded collectives has no comm spans; its arrows then run from the late
    rank's backward end to the step's end on the rank that ended it."""
    steps, nc = result.last_rank.shape
    if result.coll_start is not None:
        late = np.full((steps, nc), -1, dtype=np.int64)
        for row in report["per_collective"]:
            if row["late"]:
                late[row["step"], row["position"]] = row["last_rank"]
        return trace_json(run_events(result, max_ranks, late), {"verdict": report["verdict"]})
    events = run_events(result, max_ranks)
    n = min(len(result.ranks), max_ranks)
    for st in report["per_step"]:
        s = st["step"]
        late, e = st.get("rank"), st.get("end_rank")
        if st["set_by"] != "rank" or late is None or e is None or late >= n or e >= n:
            continue
        flow = {"cat": "blame", "name": f"rank {late} late by {st['lateness_s'] * 1e3:.3g} ms", "id": s}
        events.append({**flow, "ph": "s", "pid": late, "tid": COMPUTE, "ts": result.rank_backward_end[s, late] * 1e6 - 0.001})
        events.append({**flow, "ph": "f", "bp": "e", "pid": e, "tid": COMPUTE, "ts": result.rank_end[s, e] * 1e6 - 0.001})
    return trace_json(events, {"verdict": report["verdict"]})
