"""The simulation engine: synchronous data-parallel SGD under a SimPy clock.

Per step and rank (docs/collectives.md): an optional stall, then the forward and
backward passes of every micro-batch; during the last backward the gradient buckets become
ready in DDP order (gradient bytes are produced at a uniform rate through backward); each
bucket's all-reduce starts on a rank once the bucket is ready there (with overlap; else
after the whole backward) and the previous bucket's all-reduce is done there (one
communication stream, buckets in order); the optimizer runs after the last bucket; the
rank then starts its next step. Gradient accumulation: only the last micro-batch
all-reduces (no_sync on the others).

DDP's own costs (``ddp`` keys bucket_overhead, memory_bandwidth, gradient_as_bucket_view,
overlap_slowdown: :mod:`commsim.sim.ddp_costs`, on by default) are charged on top: each bucket's
gradients copied into its buffer on the compute stream right after the backward segment that
completes it (delaying the rest of backward), its collective issued ``bucket_overhead`` later
(launches one after another), compute slowed by ``1 / (1 + overlap_slowdown)`` while the rank's
own collectives run (backward; forward too under FSDP), the buckets copied back before the
optimizer (:class:`commsim.sim.ddp_costs.ChargedBackward`; ZeRO-2 and FSDP as their steps say).
With every cost off the engine runs the schedule above, bit for bit. ``rank_busy`` counts compute
at its rate: the costs are waiting, like the summary's exposed communication.

With ``ddp.comm_streams`` k > 1 (gloo's worker threads: up to k of a rank's bucket all-reduces in
flight at once, sharing the bandwidth) the run takes a path of its own,
:class:`commsim.sim.concurrent_streams.ConcurrentStreams`, not the one-stream schedule below.

Rank state lives in numpy vectors. One SimPy process drives the job: it advances the clock
to the end of every step (and, when an event ``log`` is asked for, to the completion of every
collective). A step's ready times are computed for blocks of buckets at once. The engine only schedules: the
collectives of a step are :func:`commsim.sim.sharding.stream_order`'s (one all-reduce per
bucket; reduce-scatters and all-gathers with ``ddp.sharding`` zero2 or fsdp, whose semantics
:mod:`commsim.sim.sharding` states), each planned once per (kind, bucket size) by
:func:`commsim.collectives.kernels.make_kernel` on the scenario's one fabric
(:func:`commsim.sim.links.scenario_fabric`: links, calibration, slow links), and the finish time
of every collective on every rank is that kernel's ``finish_times(launch)``. A process per rank
and an event per ring chunk is the reference model (:mod:`commsim.sim.reference`): the same
semantics in O(n^2) events per collective.

Memory is O(ranks + steps x collectives): the engine keeps per-step aggregates (step end, per
collective the last-issuing rank and the launch spread) and the per-rank records only of the
ranks asked for (``ranks``: all by default; e.g. none for a summary, the first 64 for a trace).
``collectives=True`` also keeps, for those ranks, every collective's issue, start and finish
(O(steps x collectives x kept): for traces and blame, not for summaries at scale).

The bucket layout (:func:`bucket_layout`) is DDP's (a first bucket, then equal caps, gradients
produced at a uniform rate) unless the scenario gives one (``ddp.bucket_sizes`` and
``ddp.bucket_ready``, as a real job's DDP built it).

``log`` (a list, optional) receives ``(time, step, event)`` for every point the clock advances
to: ``"<kind> <k>"`` when the step's k-th collective is done on every rank, ``"end"`` when the
step is (steps filled in as repeats of a steady state are not logged).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import simpy

from commsim.collectives.contract import Kernel
from commsim.collectives.kernels import algorithm_for, make_kernel
from commsim.collectives.maxplus import Responses
from commsim.scenario.spec import Scenario
from commsim.sim.concurrent_streams import ConcurrentStreams
from commsim.sim.ddp_costs import PARTIAL_RANKS, ChargedBackward, InFlight, PartialRanks, charges
from commsim.sim.links import scenario_fabric
from commsim.sim.sharding import SegmentInFlight, optimizer_time, stream_order, unit_shares
from commsim.sim.stragglers import Perturbations, ThermalClock, perturbations

EventLog = List[Tuple[float, int, str]]


def bucket_layout(scenario: Scenario) -> Tuple[np.ndarray, np.ndarray]:
    """(sizes in bytes, ready points) of a step's gradient buckets, in all-reduce order.

    :meth:`commsim.scenario.spec.Scenario.gradient_buckets` and
    :meth:`~commsim.scenario.spec.Scenario.bucket_ready_points` as arrays."""
    return (np.asarray(scenario.gradient_buckets(), dtype=float),
            np.asarray(scenario.bucket_ready_points(), dtype=float))


@dataclass(frozen=True)
class RunResult:
    """Per-step records of one simulated run. Times in seconds from the job's start.

    The per-rank arrays (``rank_*``) hold the ranks listed in ``ranks`` (column j is rank
    ``ranks[j]``; all ranks unless the run was asked for fewer)."""

    scenario: Scenario
    bucket_sizes: np.ndarray  # bytes, in all-reduce (backward) order
    step_start: np.ndarray  # (steps,) when the step began: the previous step's end (0 first)
    step_end: np.ndarray  # (steps,) when the last rank finished the step
    ranks: np.ndarray  # the ranks whose per-rank records are kept
    rank_end: np.ndarray  # (steps, kept) when each rank finished the step: its optimizer (ZeRO-2: its all-gathers)
    rank_backward_end: np.ndarray  # (steps, kept) when each rank finished its last backward
    rank_comm_end: np.ndarray  # (steps, kept) when each rank's gradients were reduced (its last all-reduce or reduce-scatter)
    rank_stall: np.ndarray  # (steps, kept) stall before the step's forward
    # (steps, kept) compute + stall time of each rank (the rest is waiting); compute at its rate
    # without DDP's own costs (copies, the slowdown under overlap: they count as waiting, as the
    # summary's exposed communication counts them: baseline step minus compute)
    rank_busy: np.ndarray
    # per collective of a step, in stream order (one all-reduce per bucket without sharding;
    # sharding.stream_order otherwise):
    last_rank: np.ndarray  # (steps, collectives) rank that issued the collective last
    launch_spread: np.ndarray  # (steps, collectives) last minus first issue time
    comm_time: np.ndarray  # (collectives,) duration of each collective in the last step simulated
    steps_simulated: int  # steps actually stepped through; the rest repeat a steady state
    # per collective and kept rank, only when the run was asked for them (simulate(collectives=True)),
    # else None: (steps, collectives, kept) when the rank issued it (its arrival: the bucket ready,
    # or the sharded step's point of issue), when it started there (launch: the later of issue
    # and the rank's previous collective's finish: one stream) and when it finished there
    coll_issue: Optional[np.ndarray] = None
    coll_start: Optional[np.ndarray] = None
    coll_finish: Optional[np.ndarray] = None

    @property
    def step_time(self) -> np.ndarray:
        """Duration of each step: from the previous step's end to this one's."""
        return self.step_end - self.step_start

    @property
    def rank_wait(self) -> np.ndarray:
        """(steps, kept) time each rank spent waiting on others (step duration minus own work)."""
        start = np.vstack([np.zeros((1, self.rank_end.shape[1])), self.rank_end[:-1]])
        return self.rank_end - start - self.rank_busy


# ready times of a step are computed in blocks of buckets of at most this many elements
# (buckets x ranks): few numpy calls per step, bounded memory at any world size; 2^16 float64
# (512 KiB) stay in a core's L2 cache, which 2^20 did not (10% faster at 16,384 ranks)
READY_BLOCK_ELEMENTS = 1 << 16
# and at least this many buckets: a block's fixed O(n) passes (ChargedBackward.ahead/keep's
# copies, the stream's minimum) are paid once per block, so a block of one bucket pays them per
# bucket; at 131,072 ranks 4 rows (4 MiB per array) took 5.6 s against 12.9 s with 1 and 6.2 s
# with 8, at 32,768 ranks 1.3 s against 1.8 s with 2 (CPU s, the scale benchmark's ring)
READY_BLOCK_MIN_ROWS = 4


# the tolerance of Engine._finish_times's shift test: 8 ulps (np.finfo per call costs ~1 us)
_SHIFT_ULPS = 8 * float(np.finfo(float).eps)
# the reductions ndarray.min/max call, without their Python wrapper (~0.2 us of ~0.8 at small n)
_min, _max = np.minimum.reduce, np.maximum.reduce


def _block_rows(n: int) -> int:
    """Buckets per block of a step's ready times at `n` ranks."""
    return max(READY_BLOCK_MIN_ROWS, READY_BLOCK_ELEMENTS // max(n, 1), 1)


class _Stream:
    """The finish time, on every rank, of the last collective on the communication stream, kept
    as ``vec + off``: a run of collectives that only shifts it costs one scalar addition each
    (:meth:`Engine._run_block`). ``shift``: c when ``kernel`` maps ``vec + off`` to ``vec + off + c``."""

    __slots__ = ("vec", "off", "lo", "kernel", "shift")

    def __init__(self):
        self.vec: Optional[np.ndarray] = None
        self.off = 0.0
        self.lo: Optional[float] = None  # vec.min(), once asked for
        self.kernel: Optional[Kernel] = None
        self.shift: Optional[float] = None

    def value(self) -> Optional[np.ndarray]:
        """The finish times as one vector (None before the step's first collective)."""
        if self.off:
            self.vec = self.vec + self.off
            if self.lo is not None:
                self.lo += self.off  # rounding is monotone: the shifted minimum is the minimum shifted
            self.off = 0.0
        return self.vec

    def low(self) -> float:
        """The earliest finish over the ranks."""
        if self.lo is None:
            self.lo = float(self.vec.min())
        return self.lo + self.off

    def set(self, vec: np.ndarray, kernel: Kernel, shift: Optional[float]) -> None:
        self.vec, self.off, self.lo, self.kernel, self.shift = vec, 0.0, None, kernel, shift


class _Ranks:
    """Turns work (seconds at full clock) into finish times, rank by rank, honoring thermal clocks."""

    def __init__(self, clocks: Dict[int, ThermalClock]):
        self.clocks = clocks
        self.throttled = np.array(sorted(clocks), dtype=np.int64)

    def finish(self, start: np.ndarray, work: np.ndarray) -> np.ndarray:
        end = start + work
        for r in self.throttled:  # plain floats: ThermalClock's scalar path
            end[r] = self.clocks[r].finish(float(start[r]), float(work[r]))
        return end

    def throttled_ready(self, start: np.ndarray, work: np.ndarray, fractions: np.ndarray):
        """(throttled ranks, buckets) times at which each fraction of `work` is done, or None."""
        if not len(self.throttled):
            return None
        return np.stack([self.clocks[r].finish(start[r], work[r] * fractions) for r in self.throttled])


def _with_late_issues(last, high, low, ranks, values):
    """(latest rank, latest issue, earliest issue) of a row from the other ranks' (`last`,
    `high`, `low`) and the late `ranks`' issue `values`, as argmax and min over the whole row
    give them (argmax's tie rule: the lowest rank among equal maxima), on scalars."""
    for r, v in zip(ranks, values):
        if v > high or (v == high and r < last):
            last, high = r, v
        if v < low:
            low = v
    return last, high, low


class Engine:
    """Simulates one scenario. Use :func:`simulate` unless you need the SimPy environment."""

    def __init__(
        self,
        scenario: Scenario,
        perturb: Optional[Perturbations] = None,
        on_step: Optional[Callable[[int, int], None]] = None,
        log: Optional[EventLog] = None,
        ranks: Optional[np.ndarray] = None,
        collectives: bool = False,
    ):
        self.scenario = scenario
        self.collectives = collectives  # keep every collective's issue/start/finish on the kept ranks
        self.on_step = on_step  # called as on_step(steps_done, steps) after every step
        self.log = log
        self.n = scenario.world_size
        self.kept = np.arange(self.n) if ranks is None else np.asarray(ranks, dtype=np.int64).reshape(-1)
        if len(self.kept) and (self.kept.min() < 0 or self.kept.max() >= self.n):
            raise ValueError(f"ranks must lie in [0, {self.n}), got {self.kept.min()}..{self.kept.max()}")
        self._all_kept = ranks is None
        self.perturb = perturb if perturb is not None else perturbations(scenario)
        self.env = simpy.Environment()
        # sizes, and the fraction of backward done when each bucket's gradients are all produced
        self.buckets, self.ready_fraction = bucket_layout(scenario)
        self.sharding = scenario.ddp.sharding
        if self.sharding != "none" and scenario.ddp.gradient_accumulation != 1:
            raise ValueError("gradient accumulation is modeled for ddp.sharding none only (the loader says so too)")
        self.ops = stream_order(self.sharding, len(self.buckets), scenario.ddp.overlap)
        self.kernels = self._plan()
        self.ranks = _Ranks(self.perturb.clocks)
        # periodic stretches are skipped (Engine._run_block) unless every collective's per-rank
        # times are asked for (kept ranks' records, the event log)
        self._shortcut = log is None and not collectives
        self._responses = Responses()  # max-plus response columns of the late ranks (_run_partial)
        self._decided_stream = None  # _run_partial's last stream finish decided by one rank

    def _plan(self) -> List[Kernel]:
        """One kernel per collective of a step (stream order), planned once per (kind, size):
        a step has a few distinct bucket sizes (first, full, remainder)."""
        sc = self.scenario
        fabric = scenario_fabric(sc)
        planned: Dict[Tuple[str, float], Kernel] = {}
        out = []
        for op in self.ops:
            key = (op.kind, float(self.buckets[op.bucket]))
            if key not in planned:
                name = algorithm_for(op.kind, sc.collective.algorithm)
                planned[key] = make_kernel(name, fabric, key[1], sc.collective.model)
            out.append(planned[key])
        return out

    def run(self) -> RunResult:
        sc = self.scenario
        steps, nb, kept = sc.steps, len(self.ops), len(self.kept)
        self._step_end = np.zeros(steps)
        self._rank_end = np.zeros((steps, kept))
        self._rank_backward_end = np.zeros((steps, kept))
        self._rank_comm_end = np.zeros((steps, kept))
        self._rank_busy = np.zeros((steps, kept))
        self._rank_stall = np.zeros((steps, kept))
        self._last_rank = np.zeros((steps, nb), dtype=np.int64)
        self._launch_spread = np.zeros((steps, nb))
        self._comm_time = np.zeros(nb)
        shape = (steps, nb, kept) if self.collectives else (0, nb, kept)
        self._coll = {name: np.zeros(shape) for name in ("issue", "start", "finish")}
        self._steps_simulated = 0
        self._recent: List[np.ndarray] = []  # the last two steps' full rank_end (steady-state test)
        self._steady_possible = self.perturb.deterministic_steps  # then steps may repeat exactly
        if sc.ddp.comm_streams > 1:  # up to k collectives at once per rank: a path of its own
            return self._concurrent_run()
        self.env.process(self._job() if self.sharding == "none" else self._sharded_job())
        self.env.run()
        step_end = self._step_end
        step_start = np.concatenate(([0.0], step_end[:-1]))
        return RunResult(
            scenario=sc,
            bucket_sizes=self.buckets,
            step_start=step_start,
            step_end=step_end,
            ranks=self.kept,
            rank_end=self._rank_end,
            rank_backward_end=self._rank_backward_end,
            rank_comm_end=self._rank_comm_end,
            rank_stall=self._rank_stall,
            rank_busy=self._rank_busy,
            last_rank=self._last_rank,
            launch_spread=self._launch_spread,
            comm_time=self._comm_time,
            steps_simulated=self._steps_simulated,
            coll_issue=self._coll["issue"] if self.collectives else None,
            coll_start=self._coll["start"] if self.collectives else None,
            coll_finish=self._coll["finish"] if self.collectives else None,
        )

    def _concurrent_run(self) -> RunResult:
        """``ddp.comm_streams`` > 1: :class:`commsim.sim.concurrent_streams.ConcurrentStreams`
        (its semantics and what it refuses are in its module), its records as a RunResult."""
        sc = self.scenario
        rec = ConcurrentStreams(sc, self.perturb, self.kernels, scenario_fabric(sc), self.buckets,
                                self.ready_fraction, self.kept, self.collectives, self.log, self.on_step).run()
        return RunResult(
            scenario=sc, bucket_sizes=self.buckets, step_start=np.concatenate(([0.0], rec.step_end[:-1])),
            step_end=rec.step_end, ranks=self.kept, rank_end=rec.rank_end, rank_backward_end=rec.rank_backward_end,
            rank_comm_end=rec.rank_comm_end, rank_stall=rec.rank_stall, rank_busy=rec.rank_busy,
            last_rank=rec.last_rank, launch_spread=rec.launch_spread, comm_time=rec.comm_time,
            steps_simulated=sc.steps, coll_issue=rec.coll_issue, coll_start=rec.coll_start,
            coll_finish=rec.coll_finish)

    def _keep(self, row: np.ndarray) -> np.ndarray:
        return row if self._all_kept else row[self.kept]

    # -- the job: one SimPy process stepping all ranks as vectors ------------------------
    def _job(self):
        if charges(self.scenario.ddp.costs, self.n):
            return (yield from self._charged_job())
        sc = self.scenario
        c = sc.compute
        m = sc.ddp.gradient_accumulation
        steps = sc.steps
        nb = len(self.kernels)
        start = np.zeros(self.n)
        # work (full-clock seconds) before the last backward begins, and of that backward
        work_before = m * c.forward + (m - 1) * c.backward
        # share of the last backward done when each bucket is ready (all of it without overlap)
        fractions = self.ready_fraction if sc.ddp.overlap else np.ones(nb)
        block = _block_rows(self.n)
        for s in range(steps):
            f = self.perturb.factor_at(s)
            stall = self.perturb.stall_at(s)
            t0 = start + stall
            self._begin_step(s)
            backward_start = self.ranks.finish(t0, f * work_before)
            backward = f * c.backward
            # throttled ranks: every bucket's ready time at once (a thermal clock is not linear)
            throttled_ready = self.ranks.throttled_ready(backward_start, backward, fractions)
            stream = _Stream()
            for b0 in range(0, nb, block):
                ready = self._ready_block(backward_start, backward, fractions, throttled_ready, s, b0, block)
                yield from self._run_block(s, ready, self._issue_stats(s, ready), stream, stop=False)
            finish = stream.value()
            backward_end = self.ranks.finish(backward_start, backward)
            if finish is None:  # nothing to all-reduce (a single rank or no parameters)
                finish = backward_end
            optimizer_start = np.maximum(finish, backward_end)
            end = self.ranks.finish(optimizer_start, f * c.optimizer)
            busy = (backward_end - t0) + (end - optimizer_start) + stall
            if (yield from self._close_step(s, end, backward_end, finish, busy, stall)):
                return
            start = end

    def _charged_job(self):
        """:meth:`_job` with DDP's own costs, charged as :class:`commsim.sim.ddp_costs.ChargedBackward`
        says: each bucket's copy-in after the backward segment that completes it, its all-reduce
        issued ``bucket_overhead`` later (launches one after another), backward slowed while the
        rank's own all-reduces run, the copy back before the optimizer."""
        sc = self.scenario
        c = sc.compute
        m = sc.ddp.gradient_accumulation
        work_before = m * c.forward + (m - 1) * c.backward
        charged = ChargedBackward(self.buckets, sc.ddp.overlap, sc.ddp.costs, self.perturb.clocks,
                                  self.ready_fraction)
        start = np.zeros(self.n)
        for s in range(sc.steps):
            f = self.perturb.factor_at(s)
            stall = self.perturb.stall_at(s)
            t0 = start + stall
            self._begin_step(s)
            t = self.ranks.finish(t0, f * work_before)  # no collective in flight before the last backward
            charged.begin(f * c.backward, t)
            stream = yield from self._charged_backward(s, charged)
            t, backward_end = charged.end()
            reduced = t if stream is None else stream
            optimizer_start = np.maximum(reduced, t) + charged.copy_back
            end = self.ranks.finish(optimizer_start, f * c.optimizer)
            busy = (t - t0) - charged.overhead() + (end - optimizer_start) + stall
            if (yield from self._close_step(s, end, backward_end, reduced, busy, stall)):
                return
            start = end

    def _ready_block(self, backward_start, backward, fractions, throttled_ready, s, b0, block):
        """(buckets, n) ready times of buckets b0.. of step s (at most `block`)."""
        fr = fractions[b0:b0 + block]
        ready = np.multiply.outer(fr, backward)
        ready += backward_start
        if throttled_ready is not None:
            ready[:, self.ranks.throttled] = throttled_ready[:, b0:b0 + block].T
        return ready

    def _issue_stats(self, s: int, issue: np.ndarray) -> np.ndarray:
        """Record the last-issuing rank and launch spread of the step's next len(issue)
        collectives ((rows, n) issue times); returns each row's latest issue."""
        rows = np.arange(len(issue))
        last = issue.argmax(axis=1)
        latest = issue[rows, last]
        k = slice(self._op, self._op + len(issue))
        self._last_rank[s, k] = last
        self._launch_spread[s, k] = latest - issue.min(axis=1)
        return latest

    def _run_block(self, s: int, issues: np.ndarray, latest: np.ndarray, stream: _Stream, stop: bool):
        """Run the step's next len(issues) collectives (stream order), issued at the rows of
        `issues` (`latest`: each row's maximum), each after the previous one's finish
        (`stream`, updated). Returns how many ran: all, or with `stop` the rows before the first
        one issued after the previous finish on some rank (a generator: ``yield from`` it).

        Where a row is issued on every rank no later than the earliest previous finish (one
        scalar comparison), its launch is that finish. A kernel is time-invariant (it prices
        links, not moments: finish(L + c) = finish(L) + c), so once such a collective's finish is
        its launch shifted by a constant c on every rank, every following such collective of the
        same kernel finishes c later again: a scalar addition, not a kernel call (the ring's
        max-plus operator, and every other kernel, commutes with a uniform shift)."""
        for i in range(len(issues)):
            k = self._op
            kernel = self.kernels[k]
            if self._shortcut and stream.vec is not None and latest[i] <= stream.low():
                self._op += 1
                if stream.shift is not None and kernel is stream.kernel:
                    stream.off += stream.shift
                    if self._record:
                        self._comm_time[k] = stream.shift
                    continue
                launch = stream.value()
                finish = kernel.finish_times(launch)
                if self._record:
                    self._comm_time[k] = finish.max() - launch.max()
                d = finish - launch
                lo, hi = float(d.min()), float(d.max())
                # constant up to rounding (a few ulps of the times): the shift the next call repeats
                shift = hi if hi - lo <= 1e-12 * max(abs(float(finish[0])), 1.0) else None
                stream.set(finish, kernel, shift)
                continue
            if stop:
                return i
            finish = yield from self._launch(s, issues[i], stream.value())
            stream.set(finish, kernel, None)
        return len(issues)

    def _charged_backward(self, s: int, charged: ChargedBackward):
        """The collectives of a charged backward (plain DDP, ZeRO-2's reduce-scatters) in stream
        order; returns the last one's finish (None without buckets). Blocks of buckets go ahead
        at once where :meth:`ChargedBackward.ahead` applies and the collectives confirm it (each
        issued before the previous finish everywhere); the rest bucket by bucket."""
        nb = len(self.buckets)
        block = _block_rows(self.n)
        stream = _Stream()
        j, retry, misses = 0, 0, 0
        while j < nb:
            if self._shortcut and j >= retry:
                ahead = charged.ahead(j, min(block, nb - j), partial=True)
                if ahead is not None:
                    issue, binding = ahead
                    late = charged.late_ranks
                    done = 0
                    if late is None:
                        done = yield from self._run_block(s, issue, self._issue_stats(s, issue), stream, stop=binding)
                    if not done and binding:
                        # a few ranks behind: they go bucket by bucket, the rest as a block
                        behind = np.flatnonzero(issue[0] > stream.value())
                        late = behind if late is None else np.array(sorted({*late.tolist(), *behind.tolist()}), dtype=np.int64)
                        # none behind: the block failed for another reason, so bucket by bucket
                        if 0 < len(late) <= PARTIAL_RANKS:
                            done = yield from self._run_partial(s, issue, charged.partial(late), stream)
                    if done:
                        charged.keep(done, stream.value())
                        j, misses = j + done, 0
                        continue
                # not now: try again after 1, 3, 7, ... buckets (a compute-bound step never will)
                misses = 2 * misses + 1
                retry = j + misses
            issue = charged.bucket(j)
            previous = stream.value()
            launch = issue if previous is None else np.maximum(issue, previous)
            finish = yield from self._collective(s, issue, previous)
            stream.set(finish, self.kernels[self._op - 1], None)
            charged.ran(launch, finish)
            j += 1
        return stream.value()

    def _run_partial(self, s: int, issues: np.ndarray, partial: PartialRanks, stream: _Stream):
        """Run the step's next collectives at the rows of `issues` except on `partial`'s ranks,
        stepped bucket by bucket (:meth:`ChargedBackward.partial`), while every other rank is
        issued no later than its previous finish (the block's condition, rank by rank: its
        rows are exact then); returns how many ran (a generator: ``yield from`` it).

        Where the kernel is max-plus linear and one late rank p decides a collective (its launch
        later than every other rank's contribution by the scalar gaps of
        :class:`commsim.collectives.maxplus.Responses`), every rank finishes at that launch plus
        p's response column: the stream keeps it as that column plus an offset, the check and
        the issue statistics are scalars, and no kernel is called (:meth:`_decided_by_one`)."""
        ranks = partial.ranks
        issues[:, ranks] = -np.inf  # their rows are partial's: the check below is the others'
        fast = self._shortcut and not self._record and len(ranks) < self.n
        if fast:  # the other ranks' issue statistics, once for the block
            rows = np.arange(len(issues))
            others_last = issues.argmax(axis=1)
            others_high = issues[rows, others_last]
            issues[:, ranks] = np.inf
            others_low = issues.min(axis=1).tolist()
            issues[:, ranks] = -np.inf
            others_last, others_high = others_last.tolist(), others_high.tolist()
            responses, skip = self._responses, tuple(ranks)
        # [(kernel, q, c)]: the stream's finish is the maximum of c + that kernel's column of rank q;
        # carried over from the previous block while the stream still holds that finish (the same array)
        decided = None
        carried = self._decided_stream
        if carried is not None and stream.vec is carried[0] and not stream.off:
            decided = carried[1]
        self._decided_stream = None
        done = len(issues)
        # the loop's lookups once (a few attribute reads per bucket add up at small n)
        kernels, ops, finish_times = self.kernels, self.ops, self._finish_times
        last_rank, launch_spread = self._last_rank[s], self._launch_spread[s]
        bucket, ran_values = partial.bucket, partial.ran_values
        for i in range(len(issues)):
            kernel = kernels[self._op]
            values = None  # the late ranks' issues of this row, once computed
            if fast and getattr(kernel, "maxplus_linear", False):
                decided, values = self._decided_by_one(s, i, kernel, partial, stream, decided,
                                                       (others_last[i], others_high[i], others_low[i]),
                                                       responses, skip)
                if decided is not None:
                    continue
            previous = stream.value()
            row = issues[i]
            if i and values is None and (row > previous).any():
                done = i
                break
            if values is None:
                values = bucket(ops[self._op].bucket)
            if fast:
                for r, v in zip(ranks, values):  # a few scalar stores: cheaper than a fancy-index store
                    row[r] = v
                # the row's issue statistics from the block's (the other ranks') and the late
                # ranks' values: scalars, where argmax and min over the row cost two numpy calls
                # (argmax's tie rule kept: the lowest rank among equal maxima)
                last, high, low = _with_late_issues(others_last[i], others_high[i], others_low[i], ranks, values)
                k = self._op
                last_rank[k] = last
                launch_spread[k] = high - low
                # _launch inline (no generator per bucket): the shortcut runs only without an
                # event log or collective records, and `fast` only where comm_time is not recorded
                self._op = k + 1
                finish = finish_times(kernel, np.maximum(row, previous))
                ran_values(values, [previous.item(r) for r in ranks], [finish.item(r) for r in ranks])
            else:
                row[ranks] = values
                finish = yield from self._collective(s, row, previous)
                partial.ran(row, previous, finish)
            stream.set(finish, kernel, None)
        if decided is not None:
            self._decided_stream = (stream.value(), decided)
        return done

    def _decided_by_one(self, s: int, i: int, kernel: Kernel, partial: PartialRanks, stream: _Stream, decided,
                        others: Tuple[int, float, float], responses: Responses, skip: tuple):
        """Row i of :meth:`_run_partial` (a max-plus linear `kernel`) where the late ranks decide
        it, one of them or a few together: ``(decided, values)``. Where it applies, the row is
        run, and ``decided`` is the list of ``(kernel, q, c)``: the finish is the maximum of
        c + the kernel's column of rank q (one of them: the stream holds that column plus an
        offset; a few: it holds their maximum). Otherwise ``decided`` is None and the caller
        runs the row, with ``values``: the late ranks' issues where they were computed (then
        every other rank is known to be issued by its previous finish), else None. `decided`:
        the previous row's; `others`: the other ranks' (argmax, max, min) issue of the row;
        `skip`: the late ranks as a tuple.

        Max-plus linearity (:class:`commsim.collectives.maxplus.Responses`): the other ranks
        launch at the previous finish, at most max over the previous (source, q, c) of c + the
        source's column of q, so their part of this collective is at most the maximum of
        c + K(that column) (or, from an arbitrary previous finish, its maximum + K(0)); where
        the late ranks' part, max over late q of L_q + A[:, q], is at least that on every rank,
        it is the finish."""
        ranks = partial.ranks
        last, high, low = others
        if decided is not None:
            # every other rank issued by its previous finish: that finish is at least
            # c + min_x A'[x, q] for each (source, q, c) (scalar bound)
            if len(decided) == 1:  # the stream holds the column lazily: the late ranks' values from it
                source, q, c = decided[0]
                _, at_ranks, at_low = responses.at(source, q, skip)
                if i and high > c + at_low:
                    return None, None
                previous = [c + v for v in at_ranks]
            else:
                if i and high > max([c + responses.at(source, q, skip)[2] for source, q, c in decided]):
                    return None, None
                previous = stream.vec[ranks].tolist()
        else:
            if stream.vec is None or (i and high > stream.low()):
                return None, None
            previous = stream.value()[ranks].tolist()
        values = partial.bucket(self.ops[self._op].bucket)
        if len(values) == 1:
            v, b = values[0], previous[0]
            launch = [v if v > b else b]
            top = 0
        else:
            launch = [v if v > b else b for v, b in zip(values, previous)]
            top = max(range(len(ranks)), key=launch.__getitem__)
        p, lp = ranks[top], launch[top]
        # one rank decides (scalar gaps), or the late ranks together (one vector test)
        alone = True
        for m in range(len(ranks)):
            if m != top and lp - launch[m] < responses.pair_gap(kernel, p, ranks[m]):
                alone = False
                break
        if alone and decided is not None:
            for source, q, c in decided:  # the loose gap first: it needs no second response
                if lp - c < responses.loose_gap(kernel, p, source, q) and lp - c < responses.gap(kernel, p, source, q):
                    alone = False
                    break
        if alone:
            finish = None
        else:
            finish = responses.column(kernel, ranks[0]) + launch[0]
            for m in range(1, len(ranks)):
                np.maximum(finish, responses.column(kernel, ranks[m]) + launch[m], out=finish)
        if decided is not None:
            # the loose bound first (max(c + max A'[:, q]) + K(0)): it needs no second response
            if finish is not None and (float((finish - responses.uniform(kernel)).min())
                                       < max(c + responses.top(source, q) for source, q, c in decided)):
                bound = None
                for source, q, c in decided:
                    term = responses.second(kernel, source, q) + c
                    bound = term if bound is None else np.maximum(bound, term, out=bound)
                if float((finish - bound).min()) < 0.0:
                    return None, values
        else:
            others_launch = stream.value().copy()
            others_launch[ranks] = -np.inf
            top_other = float(others_launch.max())
            if finish is None:
                if lp - top_other < responses.cold_gap(kernel, p):
                    return None, values
            elif float((finish - responses.uniform(kernel)).min()) < top_other:
                return None, values
        # the row's issue statistics: its latest issue (the lowest rank among ties, as argmax) and spread
        last, high, low = _with_late_issues(last, high, low, ranks, values)
        k = self._op
        self._last_rank[s, k] = last
        self._launch_spread[s, k] = high - low
        self._op += 1
        if finish is None:
            column, at_ranks, _ = responses.at(kernel, p, skip)
            partial.ran_values(values, previous, [lp + v for v in at_ranks])
            stream.set(column, kernel, None)
            stream.off = lp
            return [(kernel, p, lp)], values
        partial.ran_values(values, previous, finish[ranks].tolist())
        stream.set(finish, kernel, None)
        return [(kernel, q, lq) for q, lq in zip(ranks, launch)], values

    # -- sharded data parallelism: ZeRO-2 and FSDP (commsim/sim/sharding.py) ----------------
    def _sharded_job(self):
        sc = self.scenario
        steps, n = sc.steps, self.n
        optimizer = optimizer_time(sc.compute.optimizer, self.sharding, n)
        if charges(sc.ddp.costs, n):  # DDP's own costs where they apply (the steps' docstrings)
            step = self._charged_zero2_step if self.sharding == "zero2" else self._charged_fsdp_step
            self._charged = ChargedBackward(self.buckets, sc.ddp.overlap, sc.ddp.costs, self.perturb.clocks,
                                            self.ready_fraction)
        else:
            step = self._zero2_step if self.sharding == "zero2" else self._fsdp_step
        start = np.zeros(n)
        for s in range(steps):
            f = self.perturb.factor_at(s)
            stall = self.perturb.stall_at(s)
            t0 = start + stall
            self._begin_step(s)
            end, backward_end, comm_end, busy = yield from step(s, f, t0, optimizer)
            if (yield from self._close_step(s, end, backward_end, comm_end, busy + stall, stall)):
                return
            start = end

    def _begin_step(self, s: int) -> None:
        self._op = 0
        self._seen: Dict[int, Tuple[np.ndarray, np.ndarray, int]] = {}  # kernel -> (launch, finish, misses)
        self._record = self._steady_possible or s == self.scenario.steps - 1  # comm_time is reported for the last step

    def _collective(self, s: int, issue: np.ndarray, stream: Optional[np.ndarray],
                    launch: Optional[np.ndarray] = None):
        """Run the step's next collective (stream order): issued on each rank at `issue`, it
        starts there once the rank's previous collective (`stream`) is done (`launch`: that
        start, when the caller has it). Yields to the clock."""
        last = int(issue.argmax())
        self._last_rank[s, self._op] = last
        self._launch_spread[s, self._op] = issue[last] - issue.min()
        return (yield from self._launch(s, issue, stream, launch))

    def _launch(self, s: int, issue: np.ndarray, stream: Optional[np.ndarray], launch: Optional[np.ndarray] = None,
                shift: Optional[float] = None):
        """:meth:`_collective` once its issue statistics are recorded (`shift`: :meth:`_finish_times`'s)."""
        k = self._op
        if launch is None:
            launch = issue if stream is None else np.maximum(issue, stream)
        finish = self._launch_now(s, issue, launch, shift)
        if self.log is not None:  # the clock stops at every collective only when someone watches it
            yield self.env.timeout(max(finish.max() - self.env.now, 0.0))
            self.log.append((self.env.now, s, f"{self.ops[k].kind} {k}"))
        return finish

    def _finish_times(self, kernel: Kernel, launch: np.ndarray, shift: Optional[float] = None) -> np.ndarray:
        """``kernel.finish_times(launch)``, or, when `launch` is the kernel's previous launch
        shifted by one constant c on every rank (to rounding), its previous finish shifted by c:
        kernels are time-invariant (:meth:`_run_block`). The test costs three O(n) passes, a
        fraction of a kernel call; a kernel whose launches are not such shifts twice in a step
        is not tested again in that step. `shift`: c, where the caller knows it (both launches
        the same vector shifted: no test)."""
        self._last_shift = None  # (base, c) when the result is base + c (the previous finish shifted)
        if not self._shortcut:
            return kernel.finish_times(launch)
        seen = self._seen.get(id(kernel))
        if shift is not None and seen is not None:
            finish = seen[1] + shift
            self._seen[id(kernel)] = (launch, finish, 0)
            self._last_shift = (seen[1], shift)
            return finish
        if seen is not None and seen[2] < 2:
            d = launch - seen[0]
            lo, hi = float(_min(d)), float(_max(d))  # the ufuncs' reduce: ndarray.min's wrapper costs ~0.2 us
            # a few ulps of the times: the error a shift by c adds (the kernels are 1-Lipschitz
            # in the max norm, so these errors add up, to < 1e-10 relative over a run)
            if hi - lo <= _SHIFT_ULPS * max(abs(float(launch[0])), 1.0):
                finish = seen[1] + hi
                self._seen[id(kernel)] = (launch, finish, 0)
                self._last_shift = (seen[1], hi)
                return finish
            misses = seen[2] + 1
        else:
            misses = 0 if seen is None else seen[2]
        self._last_shift = None
        finish = kernel.finish_times(launch)
        self._seen[id(kernel)] = (launch, finish, misses)
        return finish

    def _zero2_step(self, s, f, t0, optimizer):
        """Reduce-scatter each bucket when ready, the 1/n optimizer, then all-gather every bucket
        (inside the optimizer step, as DeepSpeed does: the next forward waits for it)."""
        sc, c = self.scenario, self.scenario.compute
        nb = len(self.buckets)
        backward_start = self.ranks.finish(t0, f * c.forward)
        backward = f * c.backward
        fractions = self.ready_fraction if sc.ddp.overlap else np.ones(nb)
        throttled_ready = self.ranks.throttled_ready(backward_start, backward, fractions)
        stream = None
        for j in range(nb):
            ready = backward_start + backward * fractions[j]
            if throttled_ready is not None:
                ready[self.ranks.throttled] = throttled_ready[:, j]
            stream = yield from self._collective(s, ready, stream)
        backward_end = self.ranks.finish(backward_start, backward)
        reduced = backward_end if stream is None else stream  # the last reduce-scatter's finish
        optimizer_start = np.maximum(reduced, backward_end)
        optimizer_end = self.ranks.finish(optimizer_start, f * optimizer)
        for _ in range(nb):  # all-gathers in forward order, issued together after the optimizer
            stream = yield from self._collective(s, optimizer_end, stream)
        end = optimizer_end if stream is None else stream
        busy = (backward_end - t0) + (optimizer_end - optimizer_start)
        return end, backward_end, reduced, busy

    def _fsdp_step(self, s, f, t0, optimizer):
        """2B compute segments (forward of units B-1..0, backward of units 0..B-1), each after
        its unit's all-gather; the gather of segment x+1 is issued when segment x starts, a
        unit's reduce-scatter when its backward ends (with overlap; else after the backward)."""
        sc, c = self.scenario, self.scenario.compute
        nb = len(self.buckets)
        share = unit_shares(self.buckets)
        work = [c.forward * share[nb - 1 - x] for x in range(nb)] + [c.backward * share[j] for j in range(nb)]
        busy = np.zeros(self.n)
        prev_end = t0
        stream = gathered = None
        if nb:
            stream = gathered = yield from self._collective(s, t0, None)
        backward_end = t0
        for x in range(2 * nb):
            begin = np.maximum(prev_end, gathered)
            if x + 1 < 2 * nb:  # prefetch: the next unit's gather, one unit ahead
                stream = gathered = yield from self._collective(s, begin, stream)
            prev_end = self.ranks.finish(begin, f * work[x])
            busy += prev_end - begin
            if x >= nb and sc.ddp.overlap:
                stream = yield from self._collective(s, prev_end, stream)
        backward_end = prev_end
        if not sc.ddp.overlap:
            for _ in range(nb):
                stream = yield from self._collective(s, backward_end, stream)
        optimizer_start = backward_end if stream is None else np.maximum(stream, backward_end)
        end = self.ranks.finish(optimizer_start, f * optimizer)
        busy += end - optimizer_start
        return end, backward_end, backward_end if stream is None else stream, busy

    def _charged_zero2_step(self, s, f, t0, optimizer):
        """:meth:`_zero2_step` with DDP's own costs: the backward and its reduce-scatters as plain
        DDP's (:class:`commsim.sim.ddp_costs.ChargedBackward`: DeepSpeed copies each gradient into
        its contiguous bucket too), no copy back (the optimizer reads its reduced shard in place),
        the all-gathers issued ``bucket_overhead`` apart after the optimizer."""
        sc, c = self.scenario, self.scenario.compute
        costs = sc.ddp.costs
        charged = self._charged
        nb = len(self.buckets)
        charged.begin(f * c.backward, self.ranks.finish(t0, f * c.forward))
        stream = yield from self._charged_backward(s, charged)
        t, backward_end = charged.end()
        reduced = t if stream is None else stream
        optimizer_start = np.maximum(reduced, t)
        optimizer_end = self.ranks.finish(optimizer_start, f * optimizer)
        issue = optimizer_end
        for _ in range(nb):  # all-gathers in forward order, launched one after another
            issue = issue + costs.bucket_overhead
            stream = yield from self._collective(s, issue, stream)
        end = optimizer_end if stream is None else stream
        busy = (t - t0) - charged.overhead() + (optimizer_end - optimizer_start)
        return end, backward_end, reduced, busy

    def _charged_fsdp_step(self, s, f, t0, optimizer):
        """:meth:`_fsdp_step` with DDP's own costs: every collective issued ``bucket_overhead``
        after the point the plain step issues it (launches one after another), every compute
        segment, forward and backward, slowed while the rank's own gathers and reduce-scatters
        run (:class:`commsim.sim.ddp_costs.InFlight`); no gradient copies (a unit's gradient is
        produced in its flat parameter's buffer)."""
        sc, c = self.scenario, self.scenario.compute
        costs = sc.ddp.costs
        nb = len(self.buckets)
        share = unit_shares(self.buckets)
        work = [c.forward * share[nb - 1 - x] for x in range(nb)] + [c.backward * share[j] for j in range(nb)]
        in_flight = SegmentInFlight(self._charged.throttled, costs.overlap_slowdown)
        issued = None
        bounds = {}  # kernel -> (its last finish, that finish's min and max)
        low = high = 0.0  # the stream's (the last finish's) min and max
        # where each vector comes from: (root, c) for root + c (to rounding), root a kernel's
        # output; two launches of one kernel from the same root differ by the difference of
        # their c's: the shift _finish_times needs, known without its O(n) test
        origins = {}  # kernel -> (its last launch's origin or None, its last finish's origin)
        stream_origin = None

        issued_high = 0.0  # the last issue's max
        shortcut = self._shortcut

        overhead = costs.bucket_overhead
        kernels, last_rank, launch_spread = self.kernels, self._last_rank[s], self._launch_spread[s]
        QUEUED, NEW = InFlight.QUEUED, InFlight.NEW
        seen_map = self._seen  # (_finish_times' memo of this step)
        lean = shortcut and not self._record and not self.collectives

        def run(at, stream, at_low=None, at_floor=None, at_origin=None):
            # issue the next collective at `at` (plus the host cost), after the previous issue;
            # `at_low`: at.min(), `at_floor`: a lower bound of `at`, `at_origin`: where `at` comes
            # from (an origin, below), where known
            # (a plain function: the clock is advanced by the caller, only when an event log is kept)
            nonlocal issued, issued_high, low, high, stream_origin
            issued_origin = None  # the issue's origin, where it is `at`'s shifted by the host cost
            if shortcut and issued is not None and at_low is not None and issued_high <= at_low:
                # `at` (its min known) no earlier than the previous issue anywhere: no maximum, and
                # the min shifted is the shifted min (rounding is monotone)
                issued = at + overhead
                first = at_low + overhead
                if at_origin is not None:
                    issued_origin = (at_origin[0], at_origin[1] + overhead)
            elif shortcut and issued is not None and at_floor is not None and issued_high <= at_floor:
                issued = at + overhead  # (the same, the min to be found)
                first = None
                if at_origin is not None:
                    issued_origin = (at_origin[0], at_origin[1] + overhead)
            else:
                issued = (at if issued is None else np.maximum(at, issued)) + overhead
                first = None
            k = self._op
            last = int(issued.argmax())
            latest = float(issued[last])
            if first is None:
                first = float(issued.min())
            issued_high = latest
            last_rank[k] = last
            launch_spread[k] = latest - first
            # the launch max(issued, stream) from scalars where one side bounds the other on
            # every rank (the stream's bounds are kept, not recomputed: see below); it tells
            # InFlight too whether the stream was idle before it everywhere, or nowhere
            hint = None
            if stream is None:
                launch = issued
            elif not shortcut:  # (the bucket-by-bucket reference: every vector operation)
                launch = np.maximum(issued, stream)
            elif latest <= low:
                launch, hint = stream, QUEUED
            elif first > high:
                launch, hint = issued, NEW
            elif at is stream and overhead >= 0.0:
                # issued at the stream's own finish plus the host cost: max(fl(x + d), x) is
                # fl(x + d) for d >= 0 (rounding is monotone), the issue, with no maximum
                launch = issued
            else:
                launch = np.maximum(issued, stream)
            kid = id(kernels[k])
            high_before = high
            known_origin = origins.get(kid)
            shift = origin = None
            if hint is QUEUED:
                origin = stream_origin
            elif launch is issued:
                origin = issued_origin
            if origin is not None and known_origin is not None and known_origin[0] is not None \
                    and known_origin[0][0] is origin[0]:
                if launch is issued:  # (the shift at the issue's latest rank, read from the vectors)
                    shift = latest - float(seen_map[kid][0][last])
                else:
                    shift = origin[1] - known_origin[0][1]
            if lean:  # _launch_now where it records nothing (no comm_time this step, no per-collective times)
                self._op = k + 1
                finish = self._finish_times(kernels[k], launch, shift)
            else:
                finish = self._launch_now(s, issued, launch, shift)
            last_shift = self._last_shift
            if last_shift is not None and known_origin is not None:  # finish = the kernel's previous finish + c
                stream_origin = (known_origin[1][0], known_origin[1][1] + last_shift[1])
            else:
                stream_origin = (finish, 0.0)
            origins[kid] = (origin, stream_origin)
            # rounding is monotone, so a finish that is a previous one shifted by c has that
            # one's bounds shifted by c: one scalar addition each, not two O(n) passes
            known = bounds.get(kid)
            if last_shift is not None and known is not None and known[0] is last_shift[0]:
                low, high = known[1] + last_shift[1], known[2] + last_shift[1]
            else:
                low, high = float(finish.min()), float(finish.max())
            bounds[kid] = (finish, low, high)
            # the launch's latest rank: the stream's (queued) or the issue's (after an idle stream),
            # and a new chain's earliest begin, the issue's (SegmentInFlight's closed form)
            if hint is QUEUED:
                in_flight.add(launch, finish, at, hint, (high_before, low))
            elif launch is issued:
                in_flight.add(launch, finish, at, hint, (latest, low, first))
            else:
                in_flight.add(launch, finish, at, hint)
            return finish

        log = self.log
        busy = np.zeros(self.n)
        spent = np.empty(self.n)  # (each segment's compute time, before it is added to busy)
        prev_end = t0
        stream = gathered = None
        if nb:
            stream = gathered = run(t0, None)
            if log is not None:
                yield from self._sharded_logged(s, stream)
            gather_low, gather_high, gathered_origin = low, high, stream_origin
        factor_high, factor_low = float(np.max(f)), float(np.min(f))
        scaled_work = scaled = None  # the last segment's work and f x work
        for x in range(2 * nb):
            # a segment starts once its unit is gathered; where every rank's previous segment
            # ended by the gather's earliest finish, the start is that finish, and its bounds
            # are the gather's (kept by run): InFlight.compute's scalar test needs them
            ends = in_flight.finish_bounds  # (a closed form's bounds of prev_end, else None)
            if shortcut and (ends[1] if ends is not None and x else float(prev_end.max())) <= gather_low:
                begin, start_bounds = gathered, (gather_low, gather_high, factor_high * work[x], factor_low * work[x])
            else:
                begin, start_bounds = np.maximum(prev_end, gathered), None
            if x + 1 < 2 * nb:  # prefetch: the next unit's gather, one unit ahead
                # (a start that is the gather's finish has that finish's origin: the next gather's
                # launch, where it is that start plus the host cost, is a known shift of its kernel's
                # previous launch, FSDP's forward when communication-bound)
                stream = gathered = run(begin, stream, None if start_bounds is None else gather_low, None,
                                        None if start_bounds is None else gathered_origin)
                if log is not None:
                    yield from self._sharded_logged(s, stream)
                gather_low, gather_high, gathered_origin = low, high, stream_origin
            w = work[x]
            if w != scaled_work:  # (f x work: one vector per unit size, SegmentInFlight keeps it x slowdown)
                scaled_work, scaled = w, f * w
            prev_end = in_flight.compute(begin, scaled, start_bounds)
            busy += np.subtract(prev_end, begin, out=spent)
            if x >= nb and sc.ddp.overlap:
                ends = in_flight.finish_bounds
                stream = run(prev_end, stream, None, None if ends is None else ends[0])
                if log is not None:
                    yield from self._sharded_logged(s, stream)
        backward_end = prev_end
        if not sc.ddp.overlap:
            for _ in range(nb):
                stream = run(backward_end, stream)
                if log is not None:
                    yield from self._sharded_logged(s, stream)
        optimizer_start = backward_end if stream is None else np.maximum(stream, backward_end)
        end = self.ranks.finish(optimizer_start, f * optimizer)
        busy += end - optimizer_start - in_flight.stretch  # the slowdown counts as waiting, not compute
        return end, backward_end, backward_end if stream is None else stream, busy

    def _launch_now(self, s: int, issue: np.ndarray, launch: np.ndarray, shift: Optional[float]) -> np.ndarray:
        """:meth:`_launch` without the clock (FSDP's charged step calls it directly;
        :meth:`_sharded_logged` advances the clock where an event log is kept): the step's next
        collective, launched at `launch`, its finish times (`shift`: :meth:`_finish_times`'),
        recorded where they are asked for."""
        k = self._op
        self._op += 1
        finish = self._finish_times(self.kernels[k], launch, shift)
        if self._record:
            self._comm_time[k] = finish.max() - launch.max()
        if self.collectives:
            self._coll["issue"][s, k] = self._keep(issue)
            self._coll["start"][s, k] = self._keep(launch)
            self._coll["finish"][s, k] = self._keep(finish)
        return finish

    def _sharded_logged(self, s: int, finish: np.ndarray):
        """Advance the clock to the last collective's end on every rank and log it, as
        :meth:`_launch` does (a generator: ``yield from`` it)."""
        k = self._op - 1
        yield self.env.timeout(max(finish.max() - self.env.now, 0.0))
        self.log.append((self.env.now, s, f"{self.ops[k].kind} {k}"))

    def _close_step(self, s: int, end, backward_end, comm_end, busy, stall):
        """Record step s and advance the clock to its end (a generator: ``yield from`` it).

        Returns True when the run is deterministic and steps s-1 and s left every rank in the
        same relative state: the remaining steps are then filled in as repeats.
        """
        self._step_end[s] = end.max()
        self._rank_end[s] = self._keep(end)
        self._rank_backward_end[s] = self._keep(backward_end)
        self._rank_comm_end[s] = self._keep(comm_end)
        self._rank_busy[s] = self._keep(busy)
        self._rank_stall[s] = self._keep(stall)
        self._steps_simulated = s + 1
        if self._steady_possible:
            self._recent = (self._recent + [end])[-2:]
        if self.on_step is not None:
            self.on_step(s + 1, self.scenario.steps)
        yield self.env.timeout(max(self._step_end[s] - self.env.now, 0.0))
        if self.log is not None:
            self.log.append((self.env.now, s, "end"))
        if self._steady_possible and s >= 1 and self._is_steady(s):
            self._repeat_steady_state(s)
            return True
        return False

    def _is_steady(self, s: int) -> bool:
        """Steps s-1 and s left every rank in the same relative state: all later steps repeat."""
        prev, end = self._recent
        top, prev_top = self._step_end[s], self._step_end[s - 1]
        duration = top - prev_top
        prev_duration = prev_top - (self._step_end[s - 2] if s >= 2 else 0.0)
        scale = 1e-12 * max(top, 1.0)
        return (
            abs(duration - prev_duration) <= scale
            and np.all(np.abs((end - top) - (prev - prev_top)) <= scale)
        )

    def _repeat_steady_state(self, s: int) -> None:
        """Fill steps s+1.. with the steady step (exact: the system is deterministic and periodic)."""
        duration = self._step_end[s] - self._step_end[s - 1]
        k = np.arange(1, self.scenario.steps - s)
        self._step_end[s + 1:] = self._step_end[s] + k * duration
        for times in (self._rank_end, self._rank_backward_end, self._rank_comm_end):
            times[s + 1 :] = times[s] + k[:, None] * duration
        if self.collectives:
            for times in self._coll.values():
                times[s + 1 :] = times[s] + k[:, None, None] * duration
        for per_step in (self._rank_busy, self._rank_stall, self._last_rank, self._launch_spread):
            per_step[s + 1 :] = per_step[s]


def simulate(scenario: Scenario, on_step: Optional[Callable[[int, int], None]] = None,
             log: Optional[EventLog] = None, ranks: Optional[np.ndarray] = None,
             collectives: bool = False) -> RunResult:
    """Run the scenario and return its per-step records (`on_step(done, total)` reports progress;
    `log` receives the engine's events, see the module docstring; `ranks`: the ranks whose
    per-rank records are kept, all by default; `collectives`: also keep each of their
    collectives' issue, start and finish times, ``RunResult.coll_*``)."""
    return Engine(scenario, on_step=on_step, log=log, ranks=ranks, collectives=collectives).run()
