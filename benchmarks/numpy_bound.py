"""The tight numpy loop: a lower bound for what the engine does per step, kept as the yardstick.

The same job as :mod:`commsim.sim.engine` on the simplest fabric it can take: uniform links (every
collective takes its algorithm's simultaneous-launch time after the last launch, on every rank:
:meth:`commsim.collectives.contract.Kernel.uniform_time`; for the ring K * (mean alpha + (S/n) / B)
at the slowest link), per-bucket closed forms, the same per-rank random streams
(:class:`commsim.sim.stragglers.RankStreams`) and thermal clocks. DDP, per step: the jitter
draws, the ranks' backward start, then per bucket one vector of ready times and its maximum.
FSDP (``ddp.sharding: fsdp``), per step: per unit segment one vector of compute ends, with the
collectives (two all-gathers and a reduce-scatter per unit, in the engine's stream order) one
scalar each. Nothing else (no per-rank launch, no dependency structure, no records beyond each
step's end). It answers "how fast can numpy do this model's arithmetic at all", so the engine is
measured against it side by side (benchmarks/scale.py). Usage:

    python benchmarks/numpy_bound.py RANKS [--steps 100] [--algorithm ring|tree|...|fsdp]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's commsim

import numpy as np  # noqa: E402

from commsim.collectives.kernels import algorithm_for, make_kernel  # noqa: E402
from commsim.network.costs import ddp_buckets  # noqa: E402
from commsim.scenario.spec import Scenario  # noqa: E402
from commsim.sim.links import scenario_fabric  # noqa: E402
from commsim.sim.sharding import optimizer_time, stream_order, unit_shares  # noqa: E402
from commsim.sim.stragglers import perturbations  # noqa: E402


def collective_times(sc: Scenario, buckets) -> list:
    """Seconds of each collective of a step (stream order) when its ranks launch together."""
    fabric = scenario_fabric(sc)
    ops = stream_order(sc.ddp.sharding, len(buckets), sc.ddp.overlap)
    times = {}
    for op in ops:
        key = (op.kind, float(buckets[op.bucket]))
        if key not in times:
            name = algorithm_for(op.kind, sc.collective.algorithm)
            times[key] = make_kernel(name, fabric, key[1], sc.collective.model).uniform_time()
    return [times[(op.kind, float(buckets[op.bucket]))] for op in ops]


def bound_run(sc: Scenario) -> np.ndarray:
    """Step end times of `sc` with uniform links; see the module docstring."""
    if sc.ddp.sharding == "fsdp":
        return bound_run_fsdp(sc)
    if sc.ddp.sharding != "none":
        raise ValueError(f"no bound loop for ddp.sharding {sc.ddp.sharding!r}")
    n, steps = sc.world_size, sc.steps
    c = sc.compute
    buckets = ddp_buckets(sc.model.grad_bytes, sc.ddp.first_bucket, sc.ddp.bucket_cap)
    fractions = np.cumsum(buckets) / max(buckets.sum(), 1.0) if sc.ddp.overlap else np.ones(len(buckets))
    if sc.collective.algorithm == "ring" and sc.collective.model == "alpha-beta":
        fabric = scenario_fabric(sc)
        alpha, bandwidth = fabric.ring_links()
        k = 2 * (n - 1)
        T = [k * (float(np.mean(alpha)) + (size / n) / float(bandwidth.min())) for size in buckets]
    else:
        T = collective_times(sc, buckets)
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


def bound_run_fsdp(sc: Scenario) -> np.ndarray:
    """FSDP's step end times with uniform links: the engine's segment loop, each collective one
    scalar (every rank finishes at the last launch plus its uniform time)."""
    n, steps = sc.world_size, sc.steps
    c = sc.compute
    buckets = ddp_buckets(sc.model.grad_bytes, sc.ddp.first_bucket, sc.ddp.bucket_cap)
    nb = len(buckets)
    T = collective_times(sc, buckets)
    share = unit_shares(buckets)
    work = [c.forward * share[nb - 1 - x] for x in range(nb)] + [c.backward * share[j] for j in range(nb)]
    optimizer = optimizer_time(c.optimizer, "fsdp", n)
    p = perturbations(sc)
    throttled = sorted(p.clocks)

    def finish(start, w, f):
        end = start + f * w
        for r in throttled:
            end[r] = p.clocks[r].finish(start[r], f[r] * w)
        return end

    start = np.zeros(n)
    step_end = np.empty(steps)
    for s in range(steps):
        f = p.factor_at(s)
        t0 = start
        stream = gathered = float(t0.max()) + T[0]  # the first gather, issued at the step's start
        op = 1
        prev_end = t0
        for x in range(2 * nb):
            begin = np.maximum(prev_end, gathered)
            if x + 1 < 2 * nb:  # the next unit's gather, issued as this segment starts
                stream = gathered = max(float(begin.max()), stream) + T[op]
                op += 1
            prev_end = finish(begin, work[x], f)
            if x >= nb and sc.ddp.overlap:
                stream = max(float(prev_end.max()), stream) + T[op]
                op += 1
        if not sc.ddp.overlap:
            for _ in range(nb):
                stream = max(float(prev_end.max()), stream) + T[op]
                op += 1
        end = finish(np.maximum(prev_end, stream), optimizer, f)
        step_end[s] = end.max()
        start = end
    return step_end


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ranks", type=int)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--algorithm", default="ring", help="an all-reduce algorithm, or fsdp (ring halves)")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scale import scenario

    sc = scenario(a.ranks, steps=a.steps, algorithm=a.algorithm)
    t = time.perf_counter()
    end = bound_run(sc)
    print(f"{a.ranks} ranks x {a.steps} steps: {time.perf_counter() - t:.3f} s, mean step {np.diff(end, prepend=0).mean():.4f} s")


if __name__ == "__main__":
    main()
