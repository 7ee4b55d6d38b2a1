"""Training steps out of a matched job: per step and rank, the phases the simulator models.

Per rank and step (the simulator's step, :mod:`commsim.sim.engine`): the step starts where the
rank's previous step ended; ``forward`` runs until its backward starts (DDP's forward, the loss,
``zero_grad``, the data: everything before the first autograd op); ``backward`` from the first
to the last autograd op (or, on a GPU, backward kernel); during it DDP issues one all-reduce per
gradient bucket (the buckets: the all-reduces issued between the backward's start and the
optimizer's); ``optimizer`` is what follows once both the backward and the rank's last bucket are
done, up to the end of ``Optimizer.step`` (DDP's copy of the reduced gradients included). A
step's end is its last rank's optimizer end, as in the simulator's step time.

Steps whose bucket layout differs from the most common one (the first step after DDP rebuilt
its buckets, a step cut by the profiler window) are left out and said so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

from commsim.traces.errors import TraceError
from commsim.traces.matching import Job
from commsim.traces.records import phase_array


@dataclass
class Timeline:
    """Per step (S), rank (n) and bucket (B) times, seconds on the job's clock."""

    step_numbers: np.ndarray  # (S,) ProfilerStep numbers (or forward counts)
    step_start: np.ndarray  # (S, n) the rank's previous step end (first step: its forward start)
    backward_start: np.ndarray  # (S, n)
    backward_end: np.ndarray  # (S, n)
    optimizer_start: np.ndarray  # (S, n) Optimizer.step's start
    step_end: np.ndarray  # (S, n) Optimizer.step's end
    comm_end: np.ndarray  # (S, n) the rank's last bucket done
    bucket_bytes: np.ndarray  # (B,)
    bucket_issue: np.ndarray  # (S, B, n) when the rank was ready for the bucket's all-reduce (see timeline)
    bucket_start: np.ndarray  # (S, B, n) when it started running there (NaN: unknown)
    bucket_end: np.ndarray  # (S, B, n)
    bucket_index: np.ndarray  # (S, B) index of the bucket's collective in Job.collectives
    grad_dtype: str
    has_optimizer: bool
    other: List[Tuple[str, int]] = field(default_factory=list)  # other collectives of a step (kind, bytes)
    notes: List[str] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.step_numbers)

    @property
    def world_size(self) -> int:
        return self.step_end.shape[1]

    @property
    def forward(self) -> np.ndarray:
        """(S, n) the forward phase: from the step's start to the backward's."""
        return self.backward_start - self.step_start

    @property
    def backward(self) -> np.ndarray:
        return self.backward_end - self.backward_start

    @property
    def optimizer(self) -> np.ndarray:
        """(S, n) what follows the later of backward end and communication end."""
        return self.step_end - np.maximum(self.backward_end, self.comm_end)

    @property
    def step_time(self) -> np.ndarray:
        """(S-1,) from one step's end (its last rank) to the next one's: the simulator's step time."""
        ends = self.step_end.max(axis=1)
        return np.diff(ends)

    @property
    def ready_fraction(self) -> np.ndarray:
        """(S, B, n) share of the backward done when each bucket was issued."""
        b = self.backward[:, None, :]
        return (self.bucket_issue - self.backward_start[:, None, :]) / np.where(b > 0, b, np.nan)


def _per_step(arr: np.ndarray) -> Dict[int, Tuple[float, float]]:
    """step -> (first start, last end) of a (k, 3) phase array."""
    out: Dict[int, Tuple[float, float]] = {}
    for a, b, s in arr:
        s = int(s)
        if s < 0:
            continue
        lo, hi = out.get(s, (np.inf, -np.inf))
        out[s] = (min(lo, a), max(hi, b))
    return out


def job_sources(job: Job) -> str:
    """The job's trace files as an error's source: the first two, then "..."."""
    return ", ".join(job.sources[:2]) + (" ..." if len(job.sources) > 2 else "")


def timeline(job: Job) -> Timeline:
    """Reconstruct the steps of `job` (TraceError when its traces hold no usable step)."""
    n = job.world_size
    srcs = job_sources(job)
    if any(t.format != "kineto" for t in job.traces):
        t = next(t for t in job.traces if t.format != "kineto")
        raise TraceError(t.source, None, "a Flight Recorder dump has collectives only, no forward, backward or "
                                         "optimizer: import needs the ranks' profiler traces (blame works on dumps)")
    # when a rank was ready for a collective: its host's issue on a CPU backend; on a GPU,
    # where the host runs ahead of the device, the kernel's start (it waits for the gradients
    # on the device; also for the stream, which this cannot tell apart)
    gpu = np.array([t.device == "gpu" for t in job.traces])

    def ready(c):
        return np.where(gpu & np.isfinite(c.start), c.start, c.issue)

    phases = []
    for t in job.traces:
        phases.append({p: _per_step(phase_array(t, p)) for p in ("forward", "backward", "optimizer")})
    common = set.intersection(*(set(p["backward"]) for p in phases))
    if not common:
        raise TraceError(srcs, None, "no step with a backward pass on every rank: record the profiler over whole "
                                     "training steps (prof.step() after each) with autograd ops in the trace")
    has_opt = any(p["optimizer"] for p in phases)
    if has_opt:
        common &= set.intersection(*(set(p["optimizer"]) for p in phases))
    steps = sorted(common)
    # the buckets of each step: the all-reduces issued on every rank between its backward's
    # start and its optimizer's (or step end)
    by_step: Dict[int, List[int]] = {s: [] for s in steps}
    others: Dict[int, List[Tuple[str, int]]] = {s: [] for s in steps}
    for ci, c in enumerate(job.collectives):
        if c.step not in by_step:
            continue
        if c.kind != "all_reduce" or len(c.ranks) != n:
            others[c.step].append((c.kind, c.nbytes))
            continue
        inside = True
        at = ready(c)
        for r in range(n):
            b0 = phases[r]["backward"][c.step][0]
            lim = phases[r]["optimizer"][c.step][0] if has_opt else np.inf
            if not (b0 <= at[r] <= lim):
                inside = False
                break
        (by_step[c.step] if inside else others[c.step]).append(ci if inside else (c.kind, c.nbytes))
    layouts = {s: tuple(job.collectives[ci].nbytes for ci in by_step[s]) for s in steps}
    counted = Counter(v for v in layouts.values() if v)
    if not counted:
        raise TraceError(srcs, None, "no all-reduce was issued during any backward pass: not a DDP job (or the trace "
                                     "does not cover its communication)")
    layout, _ = counted.most_common(1)[0]
    notes = []
    off = [s for s in steps if layouts[s] != layout]
    if off:
        notes.append(f"{len(off)} step(s) left out for a different bucket layout ({', '.join(map(str, off[:6]))}"
                     f"{' ...' if len(off) > 6 else ''}): warm-up, DDP's bucket rebuild, or cut by the profiler window")
    steps = [s for s in steps if layouts[s] == layout]
    S, B = len(steps), len(layout)
    shape = (S, n)
    fs, bs, be, os_, oe = (np.zeros(shape) for _ in range(5))
    bi = np.zeros((S, B, n))
    bst = np.full((S, B, n), np.nan)
    ben = np.full((S, B, n), np.nan)
    idx = np.zeros((S, B), dtype=np.int64)
    for k, s in enumerate(steps):
        for r in range(n):
            p = phases[r]
            bs[k, r], be[k, r] = p["backward"][s]
            fs[k, r] = p["forward"][s][0] if s in p["forward"] else bs[k, r]
            if has_opt:
                os_[k, r], oe[k, r] = p["optimizer"][s]
        for j, ci in enumerate(by_step[s]):
            c = job.collectives[ci]
            idx[k, j] = ci
            bi[k, j], bst[k, j], ben[k, j] = ready(c), c.start, c.end
    if has_opt:
        # the worker's span can close after the rank already moved on (its thread descheduled
        # once the work was marked done): a bucket was done by the time Optimizer.step began
        ben = np.minimum(ben, os_[:, None, :])
    # fmax ignores NaN like nanmax, without its "All-NaN slice" warning on stderr for a step
    # none of whose buckets has an end (those steps get the fallback below)
    comm_end = np.fmax.reduce(ben, axis=1) if B else be.copy()
    comm_end = np.where(np.isfinite(comm_end), comm_end, os_ if has_opt else be)
    if not has_opt:
        oe = np.maximum(be, comm_end)
        os_ = oe.copy()
        notes.append("no Optimizer.step spans: the optimizer is taken as zero")
    start = np.vstack([fs[:1], oe[:-1]])
    # a step directly after a left-out one starts where that one ended, which the timeline
    # does not hold: its forward is measured from its own forward's start instead
    gaps = np.flatnonzero(np.diff(steps) != 1) + 1 if S > 1 else []
    for k in gaps:
        start[k] = fs[k]
    # a collective whose span was cut (the trace ends inside it) records no dtype: it says
    # nothing against the others' ("" only when none says one; several: all of them, '+'-joined)
    dtypes = {job.collectives[ci].dtype for s in steps for ci in by_step[s]} - {""}
    grad = "+".join(sorted(dtypes))
    other_kinds = Counter(x for s in steps for x in others[s])
    other = [(kind, size) for (kind, size), cnt in sorted(other_kinds.items()) if cnt >= max(1, S // 2)]
    return Timeline(
        step_numbers=np.array(steps), step_start=start, backward_start=bs, backward_end=be,
        optimizer_start=os_, step_end=oe, comm_end=comm_end, bucket_bytes=np.array(layout, dtype=float),
        bucket_issue=bi, bucket_start=bst, bucket_end=ben, bucket_index=idx, grad_dtype=grad,
        has_optimizer=has_opt, other=other, notes=job.notes + notes,
    )
