"""The tight numpy loop: the engine's model computed as plainly as numpy allows, kept as the yardstick.

The same job as :mod:`commsim.sim.engine` on the simplest fabric it can take: uniform links (every
collective takes its algorithm's simultaneous-launch time after the last launch, on every rank:
:meth:`commsim.collectives.contract.Kernel.uniform_time`; for the ring K * (mean alpha + (S/n) / B)
at the slowest link), per-bucket closed forms, the same per-rank random streams
(:class:`commsim.sim.stragglers.RankStreams`), stalls and thermal clocks, the engine's bucket
layout (:meth:`commsim.scenario.spec.Scenario.gradient_buckets`). DDP, per step: the jitter
draws, the ranks' backward start, then per bucket one vector of ready times and its maximum.
FSDP (``ddp.sharding: fsdp``), per step: per unit segment one vector of compute ends, with the
collectives (two all-gathers and a reduce-scatter per unit, in the engine's stream order) one
scalar each.

DDP's own costs (:mod:`commsim.sim.ddp_costs`; on by default) are charged as the engine charges
them: per bucket its backward segment, its copy-in, its issue ``max(copy done, previous issue) +
bucket_overhead``, its launch ``max(issue, previous finish)``, one finish ``max(launch) + T``, the
copy back before the optimizer (:func:`bound_run_charged`); FSDP's collectives issued
``bucket_overhead`` apart, forward and backward slowed (:func:`bound_run_fsdp_charged`). Compute
runs at ``1 / (1 + overlap_slowdown)`` inside the rank's own collectives (:class:`Busy`): since
every collective ends at one time on all ranks, the first one a compute can meet is a scalar
``searchsorted``, and where the stream is one unbroken chain past the compute's end on every rank
(the communication-bound case) the compute is ``work * (1 + slowdown)`` in closed form.

What it leaves out, so where it is the engine's model (tests/unit/benchmarks: equal to
:func:`commsim.sim.engine.simulate`'s step ends at 1e-9, costs off and on) and where not:

- a collective's per-rank finish times: the bound gives every rank ``max(launch) + T``. That is
  the kernel's exact result, for any launch vector, for the ring (alpha-beta, one link class:
  its 2(n-1) or n-1 pipelined steps reach every rank, so each finishes at the latest launch plus
  K hops), the ring halves of FSDP, hierarchical on uniform links, halving-doubling (and auto
  where it picks one of these) at a power-of-two world. Not for the tree (its ranks finish at
  different depths; T is the latest's, so the bound lies above the engine) nor halving-doubling
  at other world sizes (the extra ranks' fold and unfold): there the bound prices the same work
  but is not the engine's schedule.
- links of more than one class (the scale benchmark's scenario: NVLink in a node, a slower
  network between): the ring is priced at the slowest link and the mean latency throughout.
- ZeRO-2 (no loop here), per-rank records, slow links, calibrations beyond what ``uniform_time``
  prices, the event log.

It answers "how fast can numpy do this model's arithmetic at all", so the engine is measured
against it side by side, costs on in both and off in both (benchmarks/scale.py). Usage:

    python benchmarks/numpy_bound.py RANKS [--steps 100] [--algorithm ring|tree|...|fsdp] [--costs-off]
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
from commsim.scenario.spec import Scenario  # noqa: E402
from commsim.sim.ddp_costs import bucket_copy_in_time, charges, copy_back_time  # noqa: E402
from commsim.sim.links import scenario_fabric  # noqa: E402
from commsim.sim.sharding import optimizer_time, stream_order, unit_shares  # noqa: E402
from commsim.sim.stragglers import perturbations  # noqa: E402

# the algorithms whose kernel finishes, on a uniform fabric, at max(launch) + uniform_time on
# every rank for any launch vector (module docstring): where the bound computes the engine's model
EXACT_ALGORITHMS = ("ring", "fsdp", "hierarchical", "halving_doubling (power-of-two ranks)", "auto (power-of-two ranks)")


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


def all_reduce_times(sc: Scenario, buckets: np.ndarray) -> list:
    """Each bucket's all-reduce seconds: the ring's closed form K (mean alpha + (S/n) / B) at
    the slowest link (exact on uniform links), else the kernel's uniform time."""
    if sc.collective.algorithm == "ring" and sc.collective.model == "alpha-beta":
        n = sc.world_size
        alpha, bandwidth = scenario_fabric(sc).ring_links()
        k = 2 * (n - 1)
        return [k * (float(np.mean(alpha)) + (size / n) / float(bandwidth.min())) for size in buckets]
    return collective_times(sc, buckets)


class Busy:
    """One step's collectives on the communication stream, each running on rank r from its
    launch ``L[k, r]`` to one finish ``F[k]`` common to every rank (uniform links), and compute
    run at ``1 / (1 + slowdown)`` of its rate inside them (:func:`commsim.sim.ddp_costs.stretched_finish`
    over rank vectors). A rank launches a collective no earlier than the previous one's finish,
    so its busy intervals are disjoint and in order, and ``F`` increases: the first interval a
    compute started at t can meet is ``searchsorted(F, t, 'right')``, with no state.
    Thermally throttled ranks are stretched in their clock's work units (ddp_costs' docstring)."""

    def __init__(self, n: int, count: int, slowdown: float, clocks: dict):
        self.L = np.empty((count, n))
        self.F = np.empty(count)
        self.k = 0  # collectives so far
        self.clocks = [(r, clocks[r]) for r in sorted(clocks)]
        self.throttled = np.array(sorted(clocks), dtype=np.int64)
        # collectives chain_from..k-1 ran back to back on every rank but the throttled ones (each
        # launched at the previous finish everywhere): one busy stretch from L[chain_from] to F[k-1]
        self.chain_from = 0
        self.slowdown = slowdown
        self.rate = 1.0 / (1.0 + slowdown)

    def add(self, launch: np.ndarray, finish: float) -> None:
        """The next collective: launched at `launch` (no earlier than the previous finish), done at `finish`."""
        row = self.L[self.k]
        row[:] = launch
        if len(self.throttled):  # the throttled ranks' compute is not the vector path's (compute)
            saved = row[self.throttled]
            row[self.throttled] = -np.inf
            latest = float(row.max())
            row[self.throttled] = saved
        else:
            latest = float(row.max())
        if self.k == 0 or latest > self.F[self.k - 1]:
            self.chain_from = self.k  # a gap before it on some rank: the unbroken chain starts here
        self.F[self.k] = finish
        self.k += 1

    def compute(self, t: np.ndarray, work: np.ndarray) -> np.ndarray:
        """When `work` (full-clock seconds per rank) started at `t` is done on each rank."""
        k = self.k
        if self.slowdown <= 0 or k == 0:
            end = t + work
        elif self.clocks:
            # the throttled ranks go their own way (below): out of the vector path's scalar tests,
            # where a rank far behind would hold every other one in the walk
            tv, wv = t.copy(), work.copy()
            tv[self.throttled] = float(t.max())
            wv[self.throttled] = 0.0
            end = self._walk(tv, wv)
        else:
            end = self._walk(t, work)
        for r, clock in self.clocks:
            end[r] = self._throttled(clock, float(t[r]), float(work[r]), r) if self.slowdown > 0 and k \
                else clock.finish(float(t[r]), float(work[r]))
        return end

    def _walk(self, t: np.ndarray, work: np.ndarray) -> np.ndarray:
        F, rate, k = self.F[:self.k], self.rate, self.k
        t_low = float(t.min())
        lo = int(np.searchsorted(F, t_low, side="right"))  # the first interval not over at t anywhere
        if lo == k:  # every interval over before t everywhere: full rate
            return t + work
        start = self.chain_from
        if lo >= start and (F[k - 1] - float(t.max())) * rate >= float(work.max()) \
                and (lo > start or bool(np.all(self.L[start] <= t))):
            # the communication-bound case in closed form: every rank starts inside the unbroken
            # chain of back-to-back collectives (past its begin on that rank) and ends before the
            # chain does, so all of its work runs slowed
            return t + work * (1.0 + self.slowdown)
        # the general case: interval by interval from lo, every rank at once (an interval over
        # on a rank, or one its work ends before, adds exact zeros there)
        end = t.copy()
        left = work.copy()
        zero = np.zeros(len(t))
        for p in range(lo, k):
            free = np.minimum(np.maximum(self.L[p] - end, zero), left)  # full rate before the interval
            end += free
            left -= free
            slow = np.minimum(np.maximum(F[p] - end, zero) * rate, left)  # work done while it runs
            end += slow / rate
            left -= slow
            if float(left.max()) <= 0.0:
                break
        end += left  # past the last interval: full rate
        return end

    def _throttled(self, clock, t: float, w: float, r: int) -> float:
        """:meth:`_walk` of one thermally throttled rank, in its clock's work units."""
        F, L, k, rate = self.F, self.L, self.k, self.rate
        u, left = clock.work_done_float(t), w
        p = int(np.searchsorted(F[:k], t, side="right"))
        while p < k and left > 0:
            b = max(clock.work_done_float(float(L[p, r])), u)
            free = min(b - u, left)
            u += free
            left -= free
            slow = min(max(clock.work_done_float(float(F[p])) - u, 0.0) * rate, left)
            u += slow / rate
            left -= slow
            p += 1
        return clock.time_for_work_float(u + left)


def bound_run(sc: Scenario) -> np.ndarray:
    """Step end times of `sc` with uniform links; see the module docstring."""
    if sc.ddp.sharding == "fsdp":
        return bound_run_fsdp(sc)
    if sc.ddp.sharding != "none":
        raise ValueError(f"no bound loop for ddp.sharding {sc.ddp.sharding!r}")
    if charges(sc.ddp.costs, sc.world_size):
        return bound_run_charged(sc)
    n, steps = sc.world_size, sc.steps
    c = sc.compute
    m = sc.ddp.gradient_accumulation
    work_before = m * c.forward + (m - 1) * c.backward  # before the last backward (no_sync micro-batches)
    buckets = np.asarray(sc.gradient_buckets(), dtype=float)
    fractions = np.asarray(sc.bucket_ready_points(), dtype=float) if sc.ddp.overlap else np.ones(len(buckets))
    T = all_reduce_times(sc, buckets)
    p = perturbations(sc)
    throttled = sorted(p.clocks)
    start = np.zeros(n)
    step_end = np.empty(steps)
    for s in range(steps):
        f = p.factor_at(s)
        t0 = start + p.stall_at(s)
        backward_start = t0 + f * work_before
        backward = f * c.backward
        for r in throttled:
            backward_start[r] = p.clocks[r].finish(t0[r], f[r] * work_before)
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


def bound_run_charged(sc: Scenario) -> np.ndarray:
    """:func:`bound_run` with DDP's own costs, charged as the engine charges them
    (:class:`commsim.sim.ddp_costs.ChargedBackward`): per bucket, its backward segment (slowed
    inside the rank's own collectives: :class:`Busy`), its copy-in, its issue
    ``max(copy done, previous issue) + bucket_overhead``, its launch ``max(issue, previous
    finish)`` and its one finish ``max(launch) + T``; the copy back before the optimizer."""
    n, steps = sc.world_size, sc.steps
    c, costs = sc.compute, sc.ddp.costs
    m = sc.ddp.gradient_accumulation
    work_before = m * c.forward + (m - 1) * c.backward
    buckets = np.asarray(sc.gradient_buckets(), dtype=float)
    nb = len(buckets)
    # the engine's ChargedBackward: the scenario's ready points (an explicit ddp.bucket_ready included)
    fractions = np.asarray(sc.bucket_ready_points(), dtype=float) if sc.ddp.overlap else np.ones(nb)
    share = np.diff(fractions, prepend=0.0)
    remainder = 1.0 - (fractions[-1] if nb else 0.0)
    copy_in = [bucket_copy_in_time(float(b), costs) for b in buckets]
    copy_back = copy_back_time(float(buckets.sum()), costs)
    overhead = costs.bucket_overhead
    T = all_reduce_times(sc, buckets)
    p = perturbations(sc)
    throttled = sorted(p.clocks)
    start = np.zeros(n)
    step_end = np.empty(steps)
    for s in range(steps):
        f = p.factor_at(s)
        t0 = start + p.stall_at(s)
        t = t0 + f * work_before  # no collective in flight before the last backward
        for r in throttled:
            t[r] = p.clocks[r].finish(t0[r], f[r] * work_before)
        backward = f * c.backward
        busy = Busy(n, nb, costs.overlap_slowdown, p.clocks)
        issued = None
        done = -np.inf
        for j in range(nb):
            if share[j] > 0:
                t = busy.compute(t, backward * share[j])
            if copy_in[j] > 0:
                t = t + copy_in[j]
            issued = (t if issued is None else np.maximum(t, issued)) + overhead
            launch = np.maximum(issued, done)
            done = float(launch.max()) + T[j]
            busy.add(launch, done)
        if remainder > 0:
            t = busy.compute(t, backward * remainder)
        optimizer_start = (t if nb == 0 else np.maximum(t, done)) + copy_back
        end = optimizer_start + f * c.optimizer
        for r in throttled:
            end[r] = p.clocks[r].finish(optimizer_start[r], f[r] * c.optimizer)
        step_end[s] = end.max()
        start = end
    return step_end


def fsdp_plan(sc: Scenario):
    """(collective times in stream order, compute work per segment (forward units in reverse,
    then backward), optimizer time, perturbations, throttled ranks) of an FSDP step."""
    c = sc.compute
    buckets = np.asarray(sc.gradient_buckets(), dtype=float)
    nb = len(buckets)
    share = unit_shares(buckets)
    work = [c.forward * share[nb - 1 - x] for x in range(nb)] + [c.backward * share[j] for j in range(nb)]
    p = perturbations(sc)
    return (collective_times(sc, buckets), work, optimizer_time(c.optimizer, "fsdp", sc.world_size), p,
            sorted(p.clocks))


def bound_run_fsdp(sc: Scenario) -> np.ndarray:
    """FSDP's step end times with uniform links: the engine's segment loop, each collective one
    scalar (every rank finishes at the last launch plus its uniform time)."""
    if charges(sc.ddp.costs, sc.world_size):
        return bound_run_fsdp_charged(sc)
    n, steps = sc.world_size, sc.steps
    T, work, optimizer, p, throttled = fsdp_plan(sc)
    nb = len(work) // 2

    def finish(start, w, f):
        end = start + f * w
        for r in throttled:
            end[r] = p.clocks[r].finish(start[r], f[r] * w)
        return end

    start = np.zeros(n)
    step_end = np.empty(steps)
    for s in range(steps):
        f = p.factor_at(s)
        t0 = start + p.stall_at(s)
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


def bound_run_fsdp_charged(sc: Scenario) -> np.ndarray:
    """:func:`bound_run_fsdp` with DDP's own costs as the engine charges FSDP's: every collective
    issued ``max(its point of issue, the previous issue) + bucket_overhead``, launched after the
    previous finish, every compute segment (forward and backward) slowed inside the rank's own
    collectives (:class:`Busy`); no gradient copies."""
    n, steps = sc.world_size, sc.steps
    costs = sc.ddp.costs
    overhead = costs.bucket_overhead
    T, work, optimizer, p, throttled = fsdp_plan(sc)
    nb = len(work) // 2
    start = np.zeros(n)
    step_end = np.empty(steps)
    for s in range(steps):
        f = p.factor_at(s)
        t0 = start + p.stall_at(s)
        busy = Busy(n, len(T), costs.overlap_slowdown, p.clocks)
        issued, stream = None, -np.inf

        def run(at):
            nonlocal issued, stream
            issued = (at if issued is None else np.maximum(at, issued)) + overhead
            launch = np.maximum(issued, stream)
            stream = float(launch.max()) + T[busy.k]
            busy.add(launch, stream)
            return stream

        prev_end = t0
        gathered = run(t0) if nb else None
        for x in range(2 * nb):
            begin = np.maximum(prev_end, gathered)
            if x + 1 < 2 * nb:  # the next unit's gather, issued as this segment starts
                gathered = run(begin)
            prev_end = busy.compute(begin, f * work[x])
            if x >= nb and sc.ddp.overlap:
                run(prev_end)
        if not sc.ddp.overlap:
            for _ in range(nb):
                run(prev_end)
        optimizer_start = np.maximum(prev_end, stream)
        end = optimizer_start + f * optimizer
        for r in throttled:
            end[r] = p.clocks[r].finish(optimizer_start[r], f[r] * optimizer)
        step_end[s] = end.max()
        start = end
    return step_end


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ranks", type=int, help="ranks of the scale scenario")
    ap.add_argument("--steps", type=int, default=100, help="steps simulated")
    ap.add_argument("--algorithm", default="ring", help="an all-reduce algorithm, or fsdp (ring halves)")
    ap.add_argument("--costs-off", action="store_true", help="without DDP's own costs (the engine's ddp costs all off)")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scale import costs_off, scenario

    sc = scenario(a.ranks, steps=a.steps, algorithm=a.algorithm)
    if a.costs_off:
        sc = costs_off(sc)
    t = time.perf_counter()
    end = bound_run(sc)
    print(f"{a.ranks} ranks x {a.steps} steps: {time.perf_counter() - t:.3f} s, mean step {np.diff(end, prepend=0).mean():.4f} s")


if __name__ == "__main__":
    main()
