"""One job from per-rank traces: check they belong together, line up clocks, match collectives.

A collective is matched across the ranks of its process group by its sequence number where
every rank's record has one (NCCL's ``Seq``, the Flight Recorder's ``collective_seq_id``); else
by (profiler step, index within the step) when the traces have ``ProfilerStep`` spans (step
numbers are the same on every rank); else by order within the group, the ranks' sequences
aligned at the shift that makes the most kinds and sizes agree (traces start and stop at
slightly different collectives), ties broken by the closest issue times. Every matched
collective must have the same kind and size on every rank: anything else means a dropped
collective or traces of different jobs, and is refused.

Ranks on different hosts have different clocks: each host's clock is shifted so that the
collectives' ends agree (every rank leaves a collective at about the same moment), the median
over all matched collectives.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from commsim.traces.errors import TraceError
from commsim.traces.records import RankTrace

MAX_SHIFT = 64  # collectives a trace may start before or after another's


@dataclass(frozen=True)
class Collective:
    """One collective matched across its group's ranks: per-rank times (NaN off the group or
    where the record has none), indexed by global rank."""

    group: str
    kind: str
    nbytes: int
    dtype: str
    ranks: Tuple[int, ...]
    issue: np.ndarray
    start: np.ndarray
    end: np.ndarray
    step: int = -1
    seq: Optional[int] = None


@dataclass
class Job:
    """The matched job: its traces (by rank, on one clock), collectives in issue order."""

    traces: List[RankTrace]
    collectives: List[Collective]
    origin_ns: int
    notes: List[str] = field(default_factory=list)
    matched_by: str = ""

    @property
    def world_size(self) -> int:
        return len(self.traces)

    @property
    def sources(self) -> List[str]:
        return [t.source for t in self.traces]


def _files(traces: Sequence[RankTrace]) -> str:
    names = [t.source for t in traces]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def assemble(traces: Sequence[RankTrace]) -> Job:
    """Check that `traces` are every rank of one job and match their collectives."""
    if not traces:
        raise TraceError("(no files)", None, "no trace given")
    by_rank: Dict[int, RankTrace] = {}
    for t in traces:
        if t.rank in by_rank:
            raise TraceError(t.source, None, f"is rank {t.rank}, and so is {by_rank[t.rank].source}: two traces of one "
                                             "rank (ranks from different jobs, or one job's file given twice)")
        by_rank[t.rank] = t
    worlds = {t.world_size for t in traces if t.world_size}
    if len(worlds) > 1:
        said = "; ".join(f"{t.source} says {t.world_size}" for t in traces if t.world_size)
        raise TraceError(_files(traces), None, f"ranks from different jobs: their world sizes differ ({said})")
    n = worlds.pop() if worlds else max(by_rank) + 1
    if len(traces) == 1:
        t = traces[0]
        raise TraceError(t.source, None, f"a trace of one rank only (rank {t.rank} of {n}): who waited for whom "
                                         "needs every rank's trace of the same run")
    missing = sorted(set(range(n)) - set(by_rank))
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
        raise TraceError(_files(traces), None, f"ranks {shown} of world size {n} are missing: give every rank's trace")
    ordered = [by_rank[r] for r in range(n)]
    if not any(t.comms for t in ordered):
        raise TraceError(_files(ordered), None, "no collectives in any trace: record a job of two or more ranks, "
                                                "with the profiler on while it communicates")
    empty = [t for t in ordered if not t.comms]
    if empty:
        raise TraceError(empty[0].source, None, f"rank {empty[0].rank} has no collectives while rank "
                                                f"{next(t.rank for t in ordered if t.comms)} has some: not the same run")
    origin = min(t.origin_ns for t in ordered)
    ordered = [t.shifted((t.origin_ns - origin) * 1e-9) for t in ordered]
    _check_overlap(ordered)
    notes: List[str] = []
    collectives, how = _match(ordered, notes)
    job = Job(ordered, collectives, origin, notes, how)
    _align_hosts(job)
    _align_steps(job)
    return job


def _check_overlap(traces: List[RankTrace]) -> None:
    """Ranks on one host share its clock: their traces must overlap in time."""
    by_host: Dict[Optional[str], List[RankTrace]] = {}
    for t in traces:
        by_host.setdefault(t.host, []).append(t)
    for host, ts in by_host.items():
        if host is None and len(by_host) > 1:
            continue
        spans = [t.span for t in ts]
        latest_start = max(range(len(ts)), key=lambda i: spans[i][0])
        earliest_end = min(range(len(ts)), key=lambda i: spans[i][1])
        gap = spans[latest_start][0] - spans[earliest_end][1]
        if gap > 0:
            a, b = ts[earliest_end], ts[latest_start]
            raise TraceError(b.source, None, f"ranks from different jobs or runs: it begins {gap:.3g} s after "
                                             f"{a.source} ends (same host clock, no overlap)")


def _group_members(traces: List[RankTrace], group: str) -> Tuple[int, ...]:
    for t in traces:
        for name, ranks in t.groups:
            if name == group and ranks:
                return tuple(ranks)
    for t in traces:
        for c in t.comms:
            if c.group == group and c.group_ranks:
                return tuple(c.group_ranks)
    return tuple(t.rank for t in traces if any(c.group == group for c in t.comms))


def _match(traces: List[RankTrace], notes: List[str]) -> Tuple[List[Collective], str]:
    n = len(traces)
    groups = sorted({c.group for t in traces for c in t.comms})
    out: List[Collective] = []
    how = set()
    for g in groups:
        members = _group_members(traces, g)
        bad = [r for r in members if r >= n]
        if bad:
            raise TraceError(traces[0].source, None, f"process group {g!r} names rank {bad[0]}, outside world size {n}")
        seqs = {r: [c for c in traces[r].comms if c.group == g] for r in members}
        if len(members) < 2:
            continue
        if any(not s for s in seqs.values()):
            r = next(r for r, s in seqs.items() if not s)
            raise TraceError(traces[r].source, None, f"rank {r} has no collectives in process group {g!r}, which "
                                                     f"rank {members[0]} has: not the same run")
        if all(c.seq is not None for s in seqs.values() for c in s):
            keyed = {r: {c.seq: c for c in s} for r, s in seqs.items()}
            how.add("sequence number")
        elif all(t.steps for t in traces) and all(c.step >= 0 for s in seqs.values() for c in s) \
                and not any("no ProfilerStep" in note for t in traces for note in t.notes):
            keyed = _by_step(traces, seqs, g, notes)
            how.add("profiler step and order")
        else:
            keyed = _by_order(traces, seqs, g, notes)
            how.add("order")
        common = set.intersection(*(set(k) for k in keyed.values()))
        dropped = max(len(k) for k in keyed.values()) - len(common)
        if dropped:
            notes.append(f"group {g}: {dropped} collectives recorded by some ranks only (the traces start or stop at "
                         "different moments) were left out")
        for key in sorted(common):
            evs = {r: keyed[r][key] for r in members}
            ref = evs[members[0]]
            for r, c in evs.items():
                if c.kind != ref.kind or (c.nbytes and ref.nbytes and c.nbytes != ref.nbytes):
                    raise TraceError(traces[r].source, c.where,
                                     f"collective {key} of process group {g!r} is {c.kind} of {c.nbytes} B on rank {r} "
                                     f"but {ref.kind} of {ref.nbytes} B on rank {members[0]} ({traces[members[0]].source}): "
                                     "a dropped collective, or ranks from different jobs")
            issue = np.full(n, np.nan)
            start = np.full(n, np.nan)
            end = np.full(n, np.nan)
            for r, c in evs.items():
                issue[r] = c.issue
                start[r] = np.nan if c.start is None else c.start
                end[r] = np.nan if c.end is None else c.end
            out.append(Collective(g, ref.kind, max(c.nbytes for c in evs.values()), ref.dtype or "",
                                  tuple(members), issue, start, end, ref.step, ref.seq))
    if not out:
        raise TraceError(_files(traces), None, "no collective is shared by two or more ranks")
    out.sort(key=lambda c: np.nanmin(c.issue))
    return out, " / ".join(sorted(how))


def _by_step(traces, seqs, g, notes):
    """Key = (step, index within the step); steps whose count differs between ranks are
    dropped when they are the first or last step a rank recorded (the profiler window cut
    them), and refused in between (a collective is missing)."""
    keyed = {}
    counts: Dict[int, Dict[int, int]] = {}
    for r, s in seqs.items():
        per: Dict[int, int] = {}
        k = {}
        for c in s:
            i = per.get(c.step, 0)
            per[c.step] = i + 1
            k[(c.step, i)] = c
        keyed[r] = k
        counts[r] = per
    steps = sorted(set.intersection(*(set(p) for p in counts.values())))
    for st in steps:
        have = {r: counts[r][st] for r in counts}
        if len(set(have.values())) > 1:
            edge = st in (steps[0], steps[-1])
            if not edge:
                lo = min(have, key=have.get)
                hi = max(have, key=have.get)
                raise TraceError(traces[lo].source, None,
                                 f"rank {lo} has {have[lo]} collectives of process group {g!r} in step {st}, rank {hi} "
                                 f"has {have[hi]} ({traces[hi].source}): a dropped collective, or ranks from different jobs")
            for r in keyed:
                keyed[r] = {k: v for k, v in keyed[r].items() if k[0] != st}
            notes.append(f"step {st} left out: its collectives were cut by the profiler window on some ranks")
    return keyed


def _by_order(traces, seqs, g, notes):
    """Key = index in the first member's order; other ranks shifted to agree best."""
    members = list(seqs)
    ref = seqs[members[0]]
    keyed = {members[0]: {i: c for i, c in enumerate(ref)}}
    for r in members[1:]:
        s = seqs[r]
        best = None
        for d in range(-min(MAX_SHIFT, len(s) - 1), min(MAX_SHIFT, len(ref) - 1) + 1):
            # ref[i] <-> s[i - d]
            lo, hi = max(0, d), min(len(ref), len(s) + d)
            if hi - lo <= 0:
                continue
            agree = sum(1 for i in range(lo, hi) if ref[i].kind == s[i - d].kind and ref[i].nbytes == s[i - d].nbytes)
            gaps = np.median([abs(ref[i].issue - s[i - d].issue) for i in range(lo, hi)])
            score = (agree / (hi - lo), hi - lo, -gaps)
            if best is None or score > best[0]:
                best = (score, d)
        d = best[1]
        keyed[r] = {i + d: c for i, c in enumerate(s)}
        if d:
            notes.append(f"group {g}: rank {r}'s trace starts {abs(d)} collectives {'later' if d > 0 else 'earlier'} "
                         f"than rank {members[0]}'s")
    return keyed


def _align_hosts(job: Job) -> None:
    """Shift each host's clock so that collectives end together (median over collectives)."""
    hosts = [t.host for t in job.traces]
    if len(set(hosts)) <= 1 or None in hosts:
        return
    ref_host = hosts[0]
    offsets = {}
    for h in sorted(set(hosts) - {ref_host}):
        ranks = [r for r, x in enumerate(hosts) if x == h]
        ref_ranks = [r for r, x in enumerate(hosts) if x == ref_host]
        diffs = [np.nanmedian(c.end[ranks]) - np.nanmedian(c.end[ref_ranks]) for c in job.collectives
                 if np.isfinite(c.end[ranks]).any() and np.isfinite(c.end[ref_ranks]).any()]
        if not diffs:
            job.notes.append(f"host {h}: no collective end times to align its clock with {ref_host}'s; left as recorded")
            continue
        offsets[h] = float(np.median(diffs))
    if not offsets:
        return
    for r, t in enumerate(job.traces):
        if t.host in offsets:
            job.traces[r] = t.shifted(-offsets[t.host])
    shift = np.array([-offsets.get(h, 0.0) for h in hosts])
    job.collectives = [replace(c, issue=c.issue + shift, start=c.start + shift, end=c.end + shift) for c in job.collectives]
    job.notes.append("clocks aligned on collective ends: " + ", ".join(f"{h} {-o * 1e3:+.3f} ms" for h, o in offsets.items()))


def _align_steps(job: Job) -> None:
    """Renumber each rank's steps so that a matched collective is in the same step on every rank."""
    ref = job.traces[0]
    for r, t in enumerate(job.traces[1:], start=1):
        diffs = []
        by_issue = {round(c.issue, 9): c.step for c in t.comms}
        ref_by_issue = {round(c.issue, 9): c.step for c in ref.comms}
        for c in job.collectives:
            a = ref_by_issue.get(round(float(c.issue[0]), 9)) if np.isfinite(c.issue[0]) else None
            b = by_issue.get(round(float(c.issue[r]), 9)) if np.isfinite(c.issue[r]) else None
            if a is not None and b is not None and a >= 0 and b >= 0:
                diffs.append(b - a)
        if not diffs:
            continue
        vals, counts = np.unique(diffs, return_counts=True)
        d = int(vals[np.argmax(counts)])
        if d:
            job.traces[r] = replace(
                t,
                comms=tuple(replace(c, step=c.step - d if c.step >= 0 else -1) for c in t.comms),
                intervals=tuple(replace(i, step=i.step - d if i.step >= 0 else -1) for i in t.intervals),
                steps=tuple((k - d, a, b) for k, a, b in t.steps),
            )
            job.notes.append(f"rank {r}'s steps renumbered by {-d:+d} to match rank 0's")
