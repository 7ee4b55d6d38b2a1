"""The tight numpy loop: a lower bound for what the engine does per step, kept as the yardstick.

The same job as :mod:`commsim.sim.engine` on the simplest fabric it can take: uniform links (every
ring hop at the scenario's slowest link, so every all-reduce takes its closed form
K * (mean alpha + (S/n) / B) after the last launch, on every rank), per-bucket closed forms,
the same per-rank random streams (:class:`commsim.sim.stragglers.RankStreams`) and thermal
clocks. Per step: the jitter draws, the ranks' backward start, then per bucket one vector of
ready times and its maximum; nothing else (no per-rank launch, no dependency structure, no
records beyond each step's end). It answers "how fast can numpy do this model's arithmetic at
all", so the engine is measured against it side by side (benchmarks/scale.py). Usage:

    python benchmarks/numpy_bound.py RANKS [--steps 100]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's commsim

import numpy as np  # noqa: E402

from commsim.network.costs import ddp_buckets  # noqa: E402
from commsim.scenario.spec import Scenario  # noqa: E402
from commsim.sim.links import scenario_fabric  # noqa: E402
from commsim.sim.stragglers import perturbations  # noqa: E402


def bound_run(sc: Scenario) -> np.ndarray:
    """Step end times of `sc` (ring, DDP without sharding) with uniform links; see the module docstring."""
    n, steps = sc.world_size, sc.steps
    c = sc.compute
    buckets = ddp_buckets(sc.model.grad_bytes, sc.ddp.first_bucket, sc.ddp.bucket_cap)
    fractions = np.cumsum(buckets) / max(buckets.sum(), 1.0) if sc.ddp.overlap else np.ones(len(buckets))
    fabric = scenario_fabric(sc)
    alpha, bandwidth = fabric.ring_links()
    k = 2 * (n - 1)
    T = [k * (float(np.mean(alpha)) + (size / n) / float(bandwidth.min())) for size in buckets]
    p = perturbations(sc)
    throttled = sorted(p.clocks)
    start = np.zeros(n)
    step_end = np.empty(steps)
    for s in range(steps):
        f = p.factor_at(s)
        backward_start = start + f * c.forward
        backward = f * c.backward
        for r in throttled:
            backward_start[r] = p.clocks[r].finish(start[r], f[r] * c.forward)
        thr_ready = [p.clocks[r].finish(backward_start[r], backward[r] * fractions) for r in throttled]
        done = -np.inf
        for j in range(len(buckets)):
            ready = backward_start + backward * fractions[j]
            top = ready.max()
            for r, times in zip(throttled, thr_ready):
                top = max(top, times[j])
            done = max(top, done) + T[j]
        backward_end = backward_start + backward
        for r in throttled:
            backward_end[r] = p.clocks[r].finish(backward_start[r], backward[r])
        end = np.maximum(backward_end, done) + f * c.optimizer
        for r in throttled:
            end[r] = p.clocks[r].finish(max(backward_end[r], done), f[r] * c.optimizer)
        step_end[s] = end.max()
        start = end
    return step_end


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ranks", type=int)
    ap.add_argument("--steps", type=int, default=100)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scale import scenario

    sc = scenario(a.ranks, steps=a.steps)
    t = time.perf_counter()
    end = bound_run(sc)
    print(f"{a.ranks} ranks x {a.steps} steps: {time.perf_counter() - t:.3f} s, mean step {np.diff(end, prepend=0).mean():.4f} s")


if __name__ == "__main__":
    main()
