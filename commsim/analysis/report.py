"""Summary statistics of a run against its straggler-free baseline: the `commsim run` JSON.

Only reads :class:`commsim.sim.engine.RunResult` records. Definitions (issue 2, section 4):

- step time: from the previous step's end (the last rank's optimizer) to this step's end;
- baseline: the same scenario with every straggler removed;
- compute_time_s: forward + backward (all micro-batches) + optimizer of a healthy rank (with
  ``ddp.sharding`` its 1/n share of the optimizer, :func:`commsim.sim.sharding.optimizer_time`);
- comm_time_s: the sum of one baseline step's collective durations (first launch on the
  last-ready rank to the last finish), every kind: all-reduces, or with sharding
  reduce-scatters and all-gathers;
- exposed_comm_s = baseline step time - compute_time_s;
- straggler_cost_s = mean step time - baseline step time; slowdown = their ratio;
- scaling_efficiency = compute_time_s / mean step time (1.0: communication fully hidden, no
  stragglers);
- stragglers_top: ranks whose gradients were ready last (beyond the ring's own skew, see
  :func:`late_ranks`), as a fraction of all collectives.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from commsim.sim.engine import RunResult, simulate
from commsim.sim.sharding import optimizer_time
from commsim.scenario.spec import Scenario

TOP_STRAGGLERS = 5


def compute_time(scenario: Scenario) -> float:
    """Forward + backward of every micro-batch plus the optimizer, on a healthy rank (seconds)."""
    c = scenario.compute
    optimizer = optimizer_time(c.optimizer, scenario.ddp.sharding, scenario.world_size)
    return scenario.ddp.gradient_accumulation * (c.forward + c.backward) + optimizer


def late_ranks(result: RunResult, baseline: RunResult) -> np.ndarray:
    """(steps, buckets): the rank whose gradients were ready last for each collective, or -1.

    Even without stragglers ranks are not ready at exactly the same time: a ring finishes
    slightly earlier on ranks just downstream of a slow hop, and they start the next step
    earlier. That skew is the ring's, not a straggler's, so a collective has a late rank
    only when its spread of ready times exceeds the straggler-free baseline's for that bucket.
    """
    tolerance = baseline.launch_spread.max(axis=0) * (1 + 1e-9) + 1e-9 * compute_time(result.scenario)
    return np.where(result.launch_spread > tolerance, result.last_rank, -1)


def stragglers_top(late: np.ndarray, world_size: int, limit: int = TOP_STRAGGLERS):
    """Up to `limit` ranks most often late (see :func:`late_ranks`), with the fraction of collectives."""
    last = late.ravel()
    total = last.size
    counts = np.bincount(last[last >= 0], minlength=world_size)
    order = sorted((r for r in np.flatnonzero(counts)), key=lambda r: (-counts[r], r))[:limit]
    return [{"rank": int(r), "fraction": float(counts[r] / total)} for r in order]


def linear_percentiles(values: np.ndarray, q) -> np.ndarray:
    """``np.percentile(values, q)`` (method "linear", Hyndman & Fan's 7th) for a 1-D float
    vector, computed as numpy does (same index arithmetic, same interpolation, so the same
    bits) but without ``np.unique``, which imports numpy.ma: 10 ms of every run's start-up."""
    a = np.sort(np.asarray(values, dtype=np.float64).ravel())
    n = a.size
    virtual = (n - 1) * np.true_divide(np.asarray(q, dtype=np.float64), 100)
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1  # past the last value: the largest (numpy's index -1)
    previous[above] = -1
    following[above] = -1
    below = virtual < 0
    previous[below] = 0
    following[below] = 0
    previous, following = previous.astype(np.intp), following.astype(np.intp)
    gamma = virtual - previous
    lo, hi = a[previous], a[following]
    diff = hi - lo
    out = lo + diff * gamma
    np.subtract(hi, diff * (1 - gamma), out=out, where=gamma >= 0.5)  # numpy's _lerp
    return out


def percentiles(values: np.ndarray) -> Dict[str, float]:
    """mean, p50, p95, p99 and max (numpy's linear interpolation between order statistics)."""
    p50, p95, p99 = linear_percentiles(values, [50, 95, 99])
    return {
        "mean": float(values.mean()),
        "p50": float(p50),
        "p95": float(p95),
        "p99": float(p99),
        "max": float(values.max()),
    }


def summarize(scenario: Scenario, result: Optional[RunResult] = None, baseline: Optional[RunResult] = None) -> Dict[str, Any]:
    """Run (unless given) the scenario and its baseline and return the summary dict."""
    result = result if result is not None else simulate(scenario)
    baseline = baseline if baseline is not None else simulate(scenario.without_stragglers())
    step = result.step_time
    mean = float(step.mean())
    base_mean = float(baseline.step_time.mean())
    compute = compute_time(scenario)
    samples = scenario.world_size * scenario.compute.batch_size * scenario.ddp.gradient_accumulation
    return {
        "scenario": scenario.name,
        "world_size": scenario.world_size,
        "steps": scenario.steps,
        "seed": scenario.seed,
        "buckets": int(len(result.bucket_sizes)),
        "step_time_s": percentiles(step),
        "baseline_step_time_s": base_mean,
        "slowdown": mean / base_mean,
        "compute_time_s": compute,
        "comm_time_s": float(baseline.comm_time.sum()),
        "exposed_comm_s": base_mean - compute,
        "straggler_cost_s": mean - base_mean,
        "scaling_efficiency": compute / mean,
        "throughput_samples_per_s": samples / mean,
        "stragglers_top": stragglers_top(late_ranks(result, baseline), scenario.world_size),
    }


def ring_latency_share(scenario: Scenario, bucket_sizes) -> Optional[float]:
    """The share of a step's ring all-reduce time that is the ring's 2(n-1) per-hop latencies
    (each bucket's ring priced at no bytes, over the same ring at its bytes), for a scenario
    whose all-reduces run the alpha-beta ring on its nominal links; None for any other (a tree,
    NCCL's choice, a calibration, sharded collectives, one rank). At 16,384 ranks the ring pays
    32,766 latency steps per bucket, which no bucket size hides: `run` says so."""
    c = scenario.collective
    if (c.algorithm, c.model) != ("ring", "alpha-beta") or scenario.calibration is not None \
            or scenario.ddp.sharding != "none" or scenario.world_size < 2 or not len(bucket_sizes):
        return None
    from commsim.collectives.kernels import collective_time
    from commsim.sim.links import scenario_fabric

    fabric = scenario_fabric(scenario.without_stragglers())
    sizes, counts = np.unique(np.asarray(bucket_sizes, dtype=float), return_counts=True)
    full = sum(k * collective_time("ring", fabric, s) for s, k in zip(sizes, counts))
    latency = len(bucket_sizes) * collective_time("ring", fabric, 0.0)
    return float(latency / full) if full > 0 else None
