"""Who everyone waits for: per collective, per rank and per step, from arrival times.

A collective can only run once its last rank has arrived, so the rank that arrives last makes
the others wait. For each collective c with arrival times a[c, r] (when rank r was ready to take
part: the bucket's gradients were done and it issued the all-reduce):

- the last rank L = argmax_r a[c, r], and its **lateness** a[c, L] minus the second-latest
  arrival: how much sooner the collective could have started had L been on time with the rest;
- the **wait it caused**: sum over the other ranks of a[c, L] - a[c, r].

Per step, the **critical path**, walked back from the step's end: the collectives of a DDP step
run one after another on a rank's communication stream, so the step's last collective started
either when its last rank arrived or when the previous collective ended; walking back while
the previous one ended after the last arrival (the stream was the bottleneck) gives the chain
of collectives that set the step's end and the arrival that started it. The step was set by a
**rank** when that arrival was late beyond noise (the rank is named), by **communication**
when no rank was late and the chain holds two or more collectives, by **compute** otherwise
(every rank busy alike, or a rank's own backward ending after its communication).

Noise: arrivals jitter even without a straggler. Each rank's offset from the collective's median
arrival is compared with its own typical offset at that bucket position (the median over steps,
which absorbs a rank that is consistently late there); 1.4826 x the median absolute residual
estimates the jitter's standard deviation sigma, and a lateness counts only above
NOISE_SIGMAS x sigma. A rank is a **culprit** when it is named in significantly more steps than
chance (1/n of them) would give: one-sided binomial tail below ALPHA / n (Bonferroni over
ranks), at least MIN_STEPS steps. Its delay is estimated as its median lateness when named.

For a simulated run (:func:`blame_run`) the arrivals are the engine's own: each rank's issue
time of each collective and each collective's end, recorded by ``simulate(collectives=True)``
(:func:`simulate_for_blame`), so lateness, the wait caused and the critical path are exact.
The threshold there is the larger of NOISE_SIGMAS x sigma (the jitter's) and the
straggler-free baseline's spread of arrivals for that collective (a ring's own skew, as
:func:`commsim.analysis.report.late_ranks` has it). A run too large to record every
collective on every rank (more than MAX_RECORDED arrivals) falls back to what the engine
always keeps, per collective the last rank and the spread (last minus first): lateness is then
that spread, the wait an upper bound, and the critical path read from the ranks' backward and
communication ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

NOISE_SIGMAS = 5.0
ALPHA = 0.01
MIN_STEPS = 3
MAX_ARRIVALS_LISTED = 64  # per-collective arrival lists in the JSON only up to this many ranks
MAX_RECORDED = 20_000_000  # arrivals (steps x collectives x ranks) a simulated run records for blame: 3 x 160 MB


@dataclass(frozen=True)
class BlameInput:
    """Arrivals and ends of a job's collectives, with its steps where known.

    C collectives, n ranks, S steps. ``arrival`` (C, n) NaN where a rank is not in the
    collective's group; ``end`` (C,) when the collective finished (its last rank), NaN unknown;
    ``step`` (C,) the step index 0..S-1 (-1: none); ``position`` (C,) the index of the collective
    within its step (-1: unknown). ``step_end``/``compute_end``/``comm_end`` (S, n): each rank's
    end of the step, of its backward, of its last bucket. For a simulated run ``arrival`` is None
    and ``last_rank``/``lateness`` (C,) are given, with ``tolerance`` (C,) the baseline's spread;
    with arrivals, a ``tolerance`` is a floor under the noise threshold (the ring's own skew)."""

    world_size: int
    kind: Sequence[str]
    nbytes: np.ndarray
    step: np.ndarray
    arrival: Optional[np.ndarray] = None
    end: Optional[np.ndarray] = None
    position: Optional[np.ndarray] = None
    step_end: Optional[np.ndarray] = None
    compute_end: Optional[np.ndarray] = None
    comm_end: Optional[np.ndarray] = None
    step_labels: Optional[np.ndarray] = None
    last_rank: Optional[np.ndarray] = None
    lateness: Optional[np.ndarray] = None
    tolerance: Optional[np.ndarray] = None
    group: Optional[np.ndarray] = None  # (C,) without steps: the repeat period each collective is in
    source: str = "trace"  # "trace" or "simulation"


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), exactly (sum of the upper terms)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return float(min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))))


def _last_and_lateness(arrival: np.ndarray):
    """Per collective: last rank, lateness (last minus second-latest), wait caused, first arrival."""
    a = np.where(np.isfinite(arrival), arrival, -np.inf)
    count = np.isfinite(arrival).sum(axis=1)
    last = np.argmax(a, axis=1)
    top = a[np.arange(len(a)), last]
    b = a.copy()
    b[np.arange(len(a)), last] = -np.inf
    second = b.max(axis=1)
    lateness = np.where(count >= 2, top - second, np.nan)
    waited = np.nansum(np.where(np.isfinite(arrival), top[:, None] - arrival, np.nan), axis=1)
    first = np.nanmin(arrival, axis=1)
    return last, lateness, waited, first


def noise_sigma(arrival: np.ndarray, position: Optional[np.ndarray]) -> float:
    """Robust standard deviation of arrival jitter (see the module docstring)."""
    med = np.nanmedian(arrival, axis=1, keepdims=True)
    off = arrival - med
    resid = np.full_like(off, np.nan)
    classes = position if position is not None else np.zeros(len(off), dtype=int)
    for k in np.unique(classes):
        rows = classes == k
        resid[rows] = off[rows] - np.nanmedian(off[rows], axis=0, keepdims=True)
    vals = np.abs(resid[np.isfinite(resid)])
    if vals.size == 0:
        return 0.0
    return float(1.4826 * np.median(vals))


def _critical(inp: BlameInput, s: int, members: np.ndarray, last, lateness, threshold) -> Dict[str, Any]:
    """The critical path of step s (members: indices of its collectives, in position order)."""
    out: Dict[str, Any] = {"set_by": "compute", "rank": None, "collective": None, "chain": 0, "lateness_s": None}
    if inp.step_end is not None:
        e = int(np.argmax(inp.step_end[s]))
        out["end_rank"] = e
        if (inp.compute_end is not None and inp.comm_end is not None and members.size
                and inp.compute_end[s, e] >= inp.comm_end[s, e]):
            # the end rank's own backward outlasted its communication: its compute set the
            # step, a rank's doing when it ended later than every other rank's beyond noise
            ends = np.sort(inp.compute_end[s])
            late = float(ends[-1] - ends[-2]) if len(ends) > 1 else 0.0
            named = late > threshold[int(members[-1])]
            out.update(set_by="rank" if named else "compute", rank=e if named else None, lateness_s=late,
                       reason="its backward ended after its communication")
            return out
    if not members.size:
        return out
    c = int(members[-1])
    chain = 1
    if inp.arrival is not None and inp.end is not None and np.all(np.isfinite(inp.end[members])):
        k = len(members) - 1
        while k > 0 and inp.end[members[k - 1]] > np.nanmax(inp.arrival[members[k]]):
            k -= 1
        c = int(members[k])
        chain = len(members) - k
    late = float(lateness[c]) if np.isfinite(lateness[c]) else 0.0
    out.update(collective=c, chain=chain, lateness_s=late, rank=int(last[c]))
    if late > threshold[c]:
        out["set_by"] = "rank"
    else:
        out["set_by"] = "communication" if chain >= 2 else "compute"
        out["rank"] = None
    return out


def blame(inp: BlameInput) -> Dict[str, Any]:
    """The blame report of a job: per collective, per rank, per step, and the verdict."""
    n = inp.world_size
    C = len(inp.kind)
    if inp.arrival is not None:
        last, lateness, waited, first = _last_and_lateness(inp.arrival)
        sigma = noise_sigma(inp.arrival, inp.position)
        threshold = np.full(C, NOISE_SIGMAS * sigma)
        if inp.tolerance is not None:
            threshold = np.maximum(threshold, np.asarray(inp.tolerance, dtype=float))
    else:
        last = np.asarray(inp.last_rank, dtype=np.int64)
        lateness = np.asarray(inp.lateness, dtype=float)
        waited = lateness * (n - 1)  # an upper bound: the engine records only the spread
        first = np.full(C, np.nan)
        sigma = float("nan")
        threshold = np.asarray(inp.tolerance, dtype=float) if inp.tolerance is not None else np.zeros(C)
    late = lateness > threshold

    collectives = []
    for c in range(C):
        row: Dict[str, Any] = {
            "index": c, "step": int(inp.step[c]),
            "position": int(inp.position[c]) if inp.position is not None else -1,
            "kind": inp.kind[c], "bytes": int(inp.nbytes[c]), "last_rank": int(last[c]),
            "lateness_s": _f(lateness[c]), "late": bool(late[c]), "waited_on_s": _f(waited[c]),
        }
        if inp.end is not None:
            row["end_s"] = _f(inp.end[c] - first[c]) if np.isfinite(first[c]) else None
        if inp.arrival is not None and n <= MAX_ARRIVALS_LISTED:
            row["arrival_s"] = [_f(x - first[c]) for x in inp.arrival[c]]
        collectives.append(row)

    ranks = []
    for r in range(n):
        mine = last == r
        mine_late = mine & late
        ranks.append({
            "rank": r, "last_count": int(mine.sum()), "last_share": float(mine.mean()) if C else 0.0,
            "late_count": int(mine_late.sum()),
            "mean_lateness_s": _f(np.nanmean(lateness[mine_late])) if mine_late.any() else 0.0,
            "total_lateness_s": float(np.nansum(lateness[mine_late])),
            "waited_on_s": float(np.nansum(waited[mine_late])),
        })

    steps = []
    S = 0 if inp.step_end is None else inp.step_end.shape[0]
    if S == 0 and inp.step.size and inp.step.max() >= 0:
        S = int(inp.step.max()) + 1
    named = np.full(S, -1)
    for s in range(S):
        members = np.flatnonzero(inp.step == s)
        if inp.position is not None and members.size:
            members = members[np.argsort(inp.position[members], kind="stable")]
        crit = _critical(inp, s, members, last, lateness, threshold)
        if crit["set_by"] == "rank":
            named[s] = crit["rank"]
        row = {"step": int(inp.step_labels[s]) if inp.step_labels is not None else s, **crit}
        if inp.step_end is not None and s > 0:
            row["step_time_s"] = float(inp.step_end[s].max() - inp.step_end[s - 1].max())
        steps.append(row)
    for r in range(n):
        ranks[r]["steps_named"] = int((named == r).sum())

    # culprits: named in more steps than chance; without steps, in more late collectives
    if S:
        units, hits = S, [int((named == r).sum()) for r in range(n)]
    elif inp.group is not None:  # no steps, but the collectives' period: one vote per period
        ids = np.unique(inp.group)
        worst = []
        for g in ids:
            rows = np.flatnonzero((inp.group == g) & late)
            if rows.size:
                worst.append(int(last[rows[np.nanargmax(lateness[rows])]]))
        units, hits = len(ids), [worst.count(r) for r in range(n)]
    else:  # one vote per episode: a run of consecutive late collectives with the same last rank
        order = np.argsort(first, kind="stable") if np.isfinite(first).all() else np.arange(C)
        votes, prev = [], None
        for c in order:
            who = int(last[c]) if late[c] else None
            if who is not None and who != prev:
                votes.append(who)
            prev = who
        units, hits = C, [votes.count(r) for r in range(n)]
    trials = int(sum(hits))  # units in which some rank was late beyond noise
    culprits = []
    for r in range(n):
        k = hits[r]
        # without a culprit, the rank late in a unit is any of the n alike
        p = binomial_tail(k, trials, 1.0 / n) if trials else 1.0
        if k >= MIN_STEPS and p < ALPHA / n:
            when = [st["lateness_s"] for st in steps if st["set_by"] == "rank" and st["rank"] == r] if S else \
                list(lateness[late & (last == r)])
            culprits.append({"rank": r, "named": k, "of": units, "share": k / units, "late_units": trials,
                             "p_value": p, "delay_estimate_s": float(np.median(when)) if when else 0.0})
    culprits.sort(key=lambda x: (-x["named"], x["rank"]))
    unit = "steps" if S else ("periods" if inp.group is not None else "collectives (episodes of late ones)")
    if culprits:
        verdict = "; ".join(f"rank {c['rank']} makes the others wait in {c['named']} of {c['of']} {unit} "
                            f"(by {c['delay_estimate_s'] * 1e3:.3g} ms, median)" for c in culprits)
    else:
        verdict = (f"no rank is late above noise more often than chance ({trials} of {units} {unit} had a rank late "
                   f"above noise, spread over the ranks)")
    return {
        "source": inp.source, "world_size": n, "collectives": C, "steps": S,
        "noise_sigma_s": _f(sigma), "threshold_s": _f(float(np.nanmedian(threshold))) if C else None,
        "unit": unit, "late_units": trials, "culprits": culprits, "verdict": verdict,
        "ranks": ranks, "per_step": steps, "per_collective": collectives,
    }


def _f(x) -> Optional[float]:
    x = float(x)
    return x if math.isfinite(x) else None


def records_every_collective(scenario) -> bool:
    """Whether a simulated run of `scenario` may record every collective's arrival on every rank
    (at most MAX_RECORDED of them): then :func:`blame_run` is exact."""
    from commsim.sim.engine import bucket_layout
    from commsim.sim.sharding import stream_order

    sizes, _ = bucket_layout(scenario)
    collectives = len(stream_order(scenario.ddp.sharding, len(sizes), scenario.ddp.overlap))
    return scenario.steps * collectives * scenario.world_size <= MAX_RECORDED


def simulate_for_blame(scenario):
    """(run, straggler-free baseline) of `scenario` for :func:`blame_run`: the run records every
    collective's issue and end on every rank when that fits (:func:`records_every_collective`)."""
    from commsim.sim.engine import simulate

    result = simulate(scenario, collectives=records_every_collective(scenario))
    return result, simulate(scenario.without_stragglers(), ranks=np.arange(0))


def blame_run(result, baseline=None) -> Dict[str, Any]:
    """The blame report of a simulated run (a :class:`commsim.sim.engine.RunResult`), against
    its straggler-free baseline (simulated here when not given). Exact when the run recorded
    its collectives on every rank (``simulate(collectives=True)``); else the approximation of
    the module docstring, said so in the report's notes."""
    from commsim.analysis.report import compute_time
    from commsim.sim.engine import simulate

    if baseline is None:
        baseline = simulate(result.scenario.without_stragglers(), ranks=np.arange(0))
    steps, nc = result.last_rank.shape
    n = result.scenario.world_size
    tol = baseline.launch_spread.max(axis=0) * (1 + 1e-9) + 1e-9 * compute_time(result.scenario)
    kinds = _stream_kinds(result)
    common = dict(
        world_size=n,
        kind=[kinds[j] for _ in range(steps) for j in range(nc)],
        nbytes=np.tile(_stream_bytes(result), steps),
        step=np.repeat(np.arange(steps), nc),
        position=np.tile(np.arange(nc), steps),
        tolerance=np.tile(tol, steps), source="simulation",
    )
    exact = result.coll_issue is not None and np.array_equal(result.ranks, np.arange(n))
    if exact:
        inp = BlameInput(
            **common, arrival=result.coll_issue.reshape(steps * nc, n),
            end=result.coll_finish.max(axis=2).reshape(steps * nc) if nc else np.zeros(0),
            step_end=result.rank_end, compute_end=result.rank_backward_end, comm_end=result.rank_comm_end,
        )
        note = ("simulated: arrivals are the engine's recorded issue times of every collective on every rank "
                "(exact); late means beyond 5 sigma of their jitter and the straggler-free baseline's spread")
    else:
        inp = BlameInput(
            **common, step_end=result.rank_end if result.rank_end.shape[1] == n else None,
            compute_end=result.rank_backward_end if result.rank_end.shape[1] == n else None,
            comm_end=result.rank_comm_end if result.rank_end.shape[1] == n else None,
            last_rank=result.last_rank.ravel(), lateness=result.launch_spread.ravel(),
        )
        note = ("simulated without per-collective records (too many to keep: more than "
                f"{MAX_RECORDED} arrivals): per collective the engine's last rank and spread of arrivals (last "
                "minus first) stand for lateness, the others' waiting is an upper bound ((n - 1) x spread), and a "
                "step's critical path is read from the ranks' backward and communication ends")
    report = blame(inp)
    report["notes"] = [note]
    return report


def _stream_kinds(result) -> List[str]:
    from commsim.sim.sharding import stream_order

    sc = result.scenario
    if sc.ddp.sharding == "none":
        return ["all_reduce"] * result.last_rank.shape[1]
    return [op.kind for op in stream_order(sc.ddp.sharding, len(result.bucket_sizes), sc.ddp.overlap)]


def _stream_bytes(result) -> np.ndarray:
    from commsim.sim.sharding import stream_order

    sc = result.scenario
    if sc.ddp.sharding == "none":
        return np.asarray(result.bucket_sizes, dtype=float)
    ops = stream_order(sc.ddp.sharding, len(result.bucket_sizes), sc.ddp.overlap)
    return np.array([result.bucket_sizes[op.bucket] for op in ops], dtype=float)
