"""Files in, one job out: read every given file, keep the traces, match them, and say what was used.

The files of one run may mix formats: profiler traces, Flight Recorder dumps and nccl-tests
logs. Profiler traces are the job's timeline; dumps are used when they are all there is for
the ranks (blame works from them alone); nccl-tests logs add measured collective times to a
calibration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Sequence

import numpy as np

from commsim.traces.errors import TraceError
from commsim.traces.files import read_bytes, sniff
from commsim.traces.matching import Job, assemble
from commsim.traces.records import RankTrace


@dataclass
class Inputs:
    """What the given files turned out to be."""

    kineto: List[RankTrace] = field(default_factory=list)
    flight_recorder: List[RankTrace] = field(default_factory=list)
    nccl_logs: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)


def read_inputs(paths: Sequence[str], allow_logs: bool = True) -> Inputs:
    """Read each file by its content (never by its name alone)."""
    from commsim.calibration.nccl_json import opens_like_a_report
    from commsim.traces.flight_recorder import read_flight_recorder
    from commsim.traces.kineto import read_kineto

    out = Inputs()
    if not paths:
        raise TraceError("(no files)", None, "no trace given")
    for p in paths:
        data = read_bytes(p)
        head = data.lstrip()[:1]
        report = opens_like_a_report(data)  # nccl-tests' JSON report (-J): a log, not a trace
        if allow_logs and data[:1] != b"\x80" and (report or head not in (b"{", b"[")):
            if _is_nccl_log(data, p):
                out.nccl_logs.append(p)
                continue
        fmt, doc = sniff(data, p)
        if fmt == "kineto":
            out.kineto.append(read_kineto(doc, p))
        else:
            out.flight_recorder.append(read_flight_recorder(doc, p))
    return out


def _is_nccl_log(data: bytes, path: str) -> bool:
    from commsim.calibration.errors import CalibrationError
    from commsim.calibration.nccl_json import looks_like_json_report, render_json_report
    from commsim.calibration.nccl_log import parse_nccl_log

    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        return False
    try:
        parse_nccl_log(render_json_report(text, path) if looks_like_json_report(text) else text, path)
    except CalibrationError:  # NcclLogError, or a JSON document that is no nccl-tests report
        return False
    return True


def job_from(inputs: Inputs) -> Job:
    """The job of the traces: the profiler traces when there are any, else the dumps."""
    if inputs.kineto:
        if inputs.flight_recorder:
            inputs.notes.append(f"{len(inputs.flight_recorder)} Flight Recorder dump(s) not used: the profiler "
                                "traces hold the same collectives with their timeline")
        return assemble(inputs.kineto)
    if inputs.flight_recorder:
        return assemble(inputs.flight_recorder)
    raise TraceError(", ".join(inputs.nccl_logs) or "(no files)", None,
                     "no profiler trace or Flight Recorder dump among the files (nccl-tests logs alone have no job in them)")


def blame_input(job: Job, timeline=None):
    """The :class:`commsim.analysis.blame.BlameInput` of a job (its steps from `timeline`)."""
    from commsim.analysis.blame import BlameInput

    cs = job.collectives
    C, n = len(cs), job.world_size
    gpu = [t.device == "gpu" for t in job.traces]
    arrival = np.full((C, n), np.nan)
    end = np.full(C, np.nan)
    for i, c in enumerate(cs):
        a = c.issue.copy()
        for r in range(n):  # on a GPU the kernel's start is when the rank could take part
            if gpu[r] and np.isfinite(c.start[r]):
                a[r] = c.start[r]
        arrival[i] = a
        if np.isfinite(c.end).any():
            end[i] = np.nanmax(c.end)
    step = np.full(C, -1)
    position = np.full(C, -1)
    kw = {}
    if timeline is not None:
        for k in range(timeline.steps):
            for j, ci in enumerate(timeline.bucket_index[k]):
                step[ci] = k
                position[ci] = j
        kw = dict(step_end=timeline.step_end, compute_end=timeline.backward_end, comm_end=timeline.comm_end,
                  step_labels=timeline.step_numbers)
    else:  # no steps (dumps): a DDP job repeats its buckets, so position within the period
        period = repeat_period(arrival)
        if period > 1:
            rank_in_time = np.argsort(np.argsort(np.nanmedian(arrival, axis=1), kind="stable"), kind="stable")
            position = rank_in_time % period
            kw["group"] = rank_in_time // period
    return BlameInput(world_size=n, kind=[c.kind for c in cs], nbytes=np.array([c.nbytes for c in cs], dtype=float),
                      step=step, arrival=arrival, end=end,
                      position=position if (timeline is not None or (position >= 0).all()) else None,
                      source="trace", **kw)


def repeat_period(arrival: np.ndarray, max_period: int = 64) -> int:
    """The number of collectives per training step, from arrival times alone (C, n): the
    period whose folding best explains both the gaps between consecutive collectives and each
    rank's offset from the median arrival (the share of their variance between the folded
    classes, less what a random folding explains, (p - 1) / (m - 1)); within 5% of the best,
    the shortest, since multiples of the period fold as well. 1 when no period stands out."""
    order = np.argsort(np.nanmedian(arrival, axis=1))
    a = arrival[order]
    med = np.nanmedian(a, axis=1)
    features = [np.log(np.maximum(np.diff(med), 1e-9))]
    off = (a - med[:, None])[1:]
    features += [np.nan_to_num(off[:, r]) for r in range(off.shape[1])]
    m = len(features[0])
    if m < 6:
        return 1
    scores = {}
    for p in range(2, min(max_period, m // 3) + 1):
        cls = np.arange(m) % p
        share = 0.0
        for f in features:
            total = float(((f - f.mean()) ** 2).sum())
            if total <= 0:
                continue
            between = sum((cls == k).sum() * (f[cls == k].mean() - f.mean()) ** 2 for k in range(p))
            share += between / total - (p - 1) / (m - 1)
        scores[p] = share / len(features)
    best = max(scores.values()) if scores else 0.0
    if best < 0.2:
        return 1
    return min(p for p, v in scores.items() if v >= 0.95 * best)
