"""What the mitigation job's ranks' records say, on the launcher's side (numpy and commsim, no
torch): each case's measured step times (:func:`measured_steps`, :func:`measured_step_time`),
the stamped phases of its timed steps (:func:`step_phases`), how much of the sampled products ran
with every rank in them (:func:`products_overlap`), its measured compute as the ranks' spread
(:func:`compute_rows`), and DDP's own costs from every rank's
:class:`~validate.mitigation_probes.DDPCostProbe` (:func:`bucket_overhead_from_ranks`,
:func:`compute_jitter_cv`, :func:`ddp_costs_from_ranks`).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

import numpy as np

if TYPE_CHECKING:
    from commsim.scenario.spec import DDPCosts


def compute_rows(per_rank_samples: Sequence[Dict[str, List[float]]]):
    """A case's measured compute as commsim.mitigations.sampled needs it: (samples, ranks) factors,
    each rank's forward + backward + optimizer of one :class:`~validate.mitigation_sampler.HardwareSampler`
    sample (taken at the same moment on every rank, one before each timed step) over the mean of all of them;
    and the means of forward, backward and optimizer over every rank's samples (the compute the factors
    multiply). Where a rank's core is shared with another process for a run of steps, the ranks' samples are
    ~12 and ~24-37 ms side by side: a step waits for the slow one, and a mean over the ranks before the max
    hides it."""
    from commsim.mitigations.sampled import factor_rows

    totals = [[f + b + o for f, b, o in zip(r["forward_s"], r["backward_s"], r["optimizer_s"])] for r in per_rank_samples]
    k = min(len(t) for t in totals)
    means = {key: float(np.mean([x for r in per_rank_samples for x in r[key][:k]]))
             for key in ("forward_s", "backward_s", "optimizer_s")}
    return factor_rows([t[:k] for t in totals]), means


def measured_steps(blocks: Sequence[Sequence[Dict]]) -> List[float]:
    """Each timed step's time of one case, from every rank's blocks (per rank: [{"start", "ends"}]
    as :func:`~validate.mitigation_job._run_case` returns them): within a block, as
    commsim.analysis.validation.measured_summary defines it (from the previous step's last end,
    the block's common start for its first, to this one's last end), the blocks one after another."""
    out: List[float] = []
    for i, block in enumerate(blocks[0]):
        rank_end = np.array([rank[i]["ends"] for rank in blocks]).T  # (steps, ranks)
        ends = rank_end.max(axis=1)
        out += np.diff(np.concatenate(([block["start"]], ends))).tolist()
    return out


def measured_step_time(blocks: Sequence[Sequence[Dict]]) -> float:
    """Mean step time of one case: the mean of :func:`measured_steps`."""
    return float(np.mean(measured_steps(blocks)))


def _stat(xs: Sequence[float]) -> Optional[Dict[str, float]]:
    if not xs:
        return None
    return {"mean_s": float(np.mean(xs)), "median_s": float(np.median(xs)), "n": len(xs)}


def step_phases(stamps: Sequence[Sequence[Dict]]) -> Dict[str, Optional[Dict[str, float]]]:
    """What the per-rank stamps of a case's timed steps (:func:`~validate.mitigation_job._run_case`'s
    "stamps", per rank) say, each as mean and median seconds over steps (and ranks, for a rank's own phase):

    - ``ready_skew``: how far apart the ranks' last gradients were accumulated (the arrival at the
      step's first sync), max - min over ranks; ``go_skew``: the same for the steps' starts (after
      the stall: what the previous step's tail left); ``hook_entry``: a rank's bucket-ready to
      hook entry;
    - PowerSGD (its three all-reduces stamped: uncompressed, P, Q): ``work_p`` (hook entry to the
      uncompressed launch: error add, clone, orthogonalize Q, P = M Q), ``reduce_unc`` (the last
      rank's launch to the rank's callback: the all-reduce and the callback's dispatch),
      ``unpack`` (the callback to P's launch), ``reduce_p`` (the last launch of P to the rank's
      wait returning), ``work_q`` (that return to Q's launch: the next callback's dispatch,
      orthogonalize P, Q = M^T P), ``reduce_q``, ``tail`` (Q's wait to backward's return:
      decompress, the error, DDP's finalize), split at the new error's assignment into
      ``decompress`` (P Q^T and the new error) and ``finish`` (the callback's return, the main
      thread's wake in DDP's finalize); ``p_launch_skew``, ``q_launch_skew``: max - min
      over ranks of those launches;
    - post-local SGD on its averaging steps: ``flatten`` (optimizer end to the averager's
      all-reduce launch), ``average_reduce`` (the last launch to the rank's end), ``avg_launch_skew``;
    - every case: ``optimizer`` (backward's return to the optimizer's end)."""
    out: Dict[str, List[float]] = {k: [] for k in (
        "ready_skew", "go_skew", "compute", "sync", "hook_entry", "optimizer", "work_p", "reduce_unc", "unpack", "reduce_p", "work_q",
        "reduce_q", "tail", "decompress", "finish", "p_launch_skew", "q_launch_skew", "flatten", "average_reduce", "avg_launch_skew")}
    for steps in zip(*stamps):
        if all("ready" in st for st in steps):
            out["ready_skew"].append(max(st["ready"] for st in steps) - min(st["ready"] for st in steps))
        out["go_skew"].append(max(st["go"] for st in steps) - min(st["go"] for st in steps))
        for st in steps:
            out["optimizer"].append(st["optimizer"] - st["backward"])
            if "ready" in st:
                out["compute"].append(st["ready"] - st["go"])
                if not st.get("reduces"):
                    out["sync"].append(st["backward"] - max(x["ready"] for x in steps))
            if "hook" in st and "ready" in st:
                out["hook_entry"].append(st["hook"] - st["ready"])
        reds = [st.get("reduces") or [] for st in steps]
        if all(len(r) == 3 for r in reds) and all("hook" in st for st in steps):  # PowerSGD's three
            last = [max(r[k]["launch"] for r in reds) for k in range(3)]
            out["p_launch_skew"].append(max(r[1]["launch"] for r in reds) - min(r[1]["launch"] for r in reds))
            out["q_launch_skew"].append(max(r[2]["launch"] for r in reds) - min(r[2]["launch"] for r in reds))
            for st, (u, pp, q) in zip(steps, reds):
                out["work_p"].append(u["launch"] - st["hook"])
                if "callback" in u:
                    out["reduce_unc"].append(u["callback"] - last[0])
                    out["unpack"].append(pp["launch"] - u["callback"])
                if "waited" in pp:
                    out["reduce_p"].append(pp["waited"] - last[1])
                    out["work_q"].append(q["launch"] - pp["waited"])
                if "waited" in q:
                    out["reduce_q"].append(q["waited"] - last[2])
                    out["tail"].append(st["backward"] - q["waited"])
                    if "error_set" in st:
                        out["decompress"].append(st["error_set"] - q["waited"])
                        out["finish"].append(st["backward"] - st["error_set"])
        elif all(len(r) == 1 for r in reds):  # the averager's one all-reduce
            last = max(r[0]["launch"] for r in reds)
            out["avg_launch_skew"].append(last - min(r[0]["launch"] for r in reds))
            for st, r in zip(steps, reds):
                out["flatten"].append(r[0]["launch"] - st["optimizer"])
                out["average_reduce"].append(st["end"] - last)
    return {k: _stat(v) for k, v in out.items()}


def products_overlap(windows: Sequence[Sequence[Sequence[float]]]) -> Optional[float]:
    """How much of the ranks' :class:`~validate.mitigation_sampler.HardwareSampler` products ran with every
    rank in them at once: over the samples, the time all ranks' (start, end) windows overlap over the mean
    window's length (1: side by side, as powerSGD_hook's products run in a step without a slow rank; 0: one
    rank at a time). None without samples."""
    if not windows or not windows[0]:
        return None
    both = total = 0.0
    for ws in zip(*windows):
        both += max(0.0, min(w[1] for w in ws) - max(w[0] for w in ws))
        total += sum(w[1] - w[0] for w in ws) / len(ws)
    return both / total if total > 0 else None


def bucket_overhead_from_ranks(per_rank: Sequence[Dict]) -> float:
    """DDP's own per-step cost from every rank's :class:`~validate.mitigation_probes.DDPCostProbe` samples:
    per round, a rank's synced step minus the *slowest* rank's no-sync compute of that round minus the rank's
    all-reduce (a synced step starts after a barrier and waits for the slowest rank's gradients: that wait is
    the ranks' compute jitter, modeled as such by :func:`compute_jitter_cv`, not DDP's cost), the median over
    ranks, then the mean over rounds; never below 0."""
    rounds = len(per_rank[0]["samples"]["synced"])
    own = []
    for i in range(rounds):
        slowest = max(r["samples"]["nosync"][i] for r in per_rank)
        own.append(statistics.median(r["samples"]["synced"][i] - slowest - r["samples"]["allreduce"][i]
                                     for r in per_rank))
    return max(0.0, statistics.fmean(own))  # the mean over rounds: a mean step carries the mean cost


def compute_jitter_cv(per_rank: Sequence[Dict]) -> float:
    """The coefficient of variation of a rank's step compute about the other ranks' in the same
    step, as commsim's ``Jitter`` straggler draws it (independently per rank and step), from the
    no-sync steps of :class:`~validate.mitigation_probes.DDPCostProbe`: per round, each rank's deviation from
    the round's mean over the ranks, relative to that mean; sigma from the median absolute deviation over
    every round and rank, 1.4826 MAD (a normal's) / sqrt(1 - 1/n) (a deviation from the mean of n draws).
    Within a round, so that the machine's drift between rounds (the rounds are spread over the whole job) is
    not counted; a median, so that a round one burst of load stalled is not either. 0 with one rank (nothing
    to compare; one rank waits for nobody)."""
    n = len(per_rank)
    if n < 2:
        return 0.0
    dev = []
    for xs in zip(*(r["samples"]["nosync"] for r in per_rank)):
        mean = sum(xs) / n
        dev += [abs(x / mean - 1.0) for x in xs]
    if not dev:
        return 0.0
    return float(1.4826 * statistics.median(dev) / (1.0 - 1.0 / n) ** 0.5)


def ddp_costs_from_ranks(per_rank: Sequence[Dict]) -> "DDPCosts":
    """The scenario's ``ddp.costs`` from every rank's :class:`~validate.mitigation_probes.DDPCostProbe`: the
    per-bucket cost of :func:`bucket_overhead_from_ranks` (the job runs one bucket), the memory bandwidth and
    overlap slowdown as medians over the ranks; gradients as bucket views, as the job's DDP runs."""
    from commsim.scenario.spec import DDPCosts

    med = {k: statistics.median(r[k] for r in per_rank) for k in ("memory_bandwidth", "overlap_slowdown")}
    return DDPCosts(bucket_overhead=bucket_overhead_from_ranks(per_rank), memory_bandwidth=med["memory_bandwidth"],
                    gradient_as_bucket_view=True, overlap_slowdown=med["overlap_slowdown"])
