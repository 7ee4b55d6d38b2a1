"""Bucket-size tuning: the DDP bucket cap (``bucket_cap_mb``) with the lowest mean step time.

A one-dimensional search over :func:`commsim.sim.engine.simulate`: the step time is evaluated
at bucket caps on a log grid (1 MiB to the whole gradient in one bucket), then refined by a
golden-section search in log(cap) between the best grid point's neighbours. The step time is
not unimodal in the cap in general (the last bucket's remainder changes with it), so the
search returns the best point it evaluated, and every point it evaluated (the curve).
Each evaluation simulates at most ``search_steps`` steps (the same seed: the same first draws);
the chosen cap is then run at the scenario's full length by the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import List, Tuple

from commsim.scenario.spec import Scenario
from commsim.sim.engine import simulate

MIB = 1024 * 1024
GRID_MIB = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
SEARCH_STEPS = 20
REFINE = 6
GOLDEN = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class BucketTuning:
    bucket_cap: float                     # bytes: the best cap evaluated
    step_time_s: float                    # its mean step time over the search's steps
    curve: Tuple[Tuple[float, float], ...]  # (cap, mean step time), sorted by cap


def with_bucket_cap(scenario: Scenario, cap: float) -> Scenario:
    """The scenario with DDP's layout at this cap. An explicit layout (``ddp.bucket_sizes``, e.g.
    from ``commsim import``) is replaced: tuning the cap means letting DDP build the buckets."""
    return replace(scenario, ddp=replace(scenario.ddp, bucket_cap=float(cap), bucket_sizes=None, bucket_ready=None))


def tune_buckets(scenario: Scenario, search_steps: int = SEARCH_STEPS, refine: int = REFINE) -> BucketTuning:
    """Search the bucket cap (module docstring)."""
    total = float(scenario.model.grad_bytes)
    short = replace(scenario, steps=min(scenario.steps, search_steps))
    seen = {}

    def cost(cap: float) -> float:
        cap = float(round(cap))
        if cap not in seen:
            seen[cap] = float(simulate(with_bucket_cap(short, cap)).step_time.mean())
        return seen[cap]

    grid: List[float] = [m * MIB for m in GRID_MIB if m * MIB < total] + [max(total, 1.0)]
    times = [cost(c) for c in grid]
    i = min(range(len(grid)), key=lambda k: (times[k], grid[k]))
    lo = math.log(grid[max(i - 1, 0)])
    hi = math.log(grid[min(i + 1, len(grid) - 1)])
    # golden-section in log(cap) on [lo, hi]
    a, b = lo, hi
    x1, x2 = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    f1, f2 = cost(math.exp(x1)), cost(math.exp(x2))
    for _ in range(max(refine - 2, 0)):
        if f1 <= f2:
            b, x2, f2 = x2, x1, f1
            x1 = b - GOLDEN * (b - a)
            f1 = cost(math.exp(x1))
        else:
            a, x1, f1 = x1, x2, f2
            x2 = a + GOLDEN * (b - a)
            f2 = cost(math.exp(x2))
    best = min(seen, key=lambda c: (seen[c], c))
    return BucketTuning(bucket_cap=best, step_time_s=seen[best], curve=tuple(sorted(seen.items())))
