"""ZeRO-2 and FSDP (ZeRO-3): which collectives one step runs, in which order, and their traffic.

Pure data and formulas (no SimPy): the engine (:mod:`commsim.sim.engine`) and the per-chunk
reference (:mod:`commsim.sim.reference`) both follow the order given here.

``ddp.sharding`` (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", sec. 5 and 7):

- ``none``: PyTorch DDP. Each gradient bucket is all-reduced when ready (2(n-1)/n * S bytes
  sent per rank and bucket).
- ``zero2`` (optimizer states and gradients partitioned, ZeRO stage 2 as in DeepSpeed's
  ``stage_1_and_2.py``): each bucket is reduce-scattered when ready, in DDP's bucket order
  on the one communication stream; after the last one the rank updates its 1/n shard of the
  parameters (``compute.optimizer / n``: ``optimizer`` is DDP's full-model optimizer time);
  then the updated parameters are all-gathered bucket by bucket, in forward order. As in
  DeepSpeed, that all-gather runs inside the optimizer step, before the next forward: it
  does not overlap compute (DeepSpeed prefetches parameters only in stage 3). Traffic:
  (n-1)/n * S + (n-1)/n * S = DDP's (ZeRO sec. 7.2.1).
- ``fsdp`` (parameters partitioned too: ZeRO stage 3, PyTorch FSDP ``FULL_SHARD``): the DDP
  buckets are the FSDP units. A step computes 2B segments: the forward of units B-1 .. 0,
  then the backward of units 0 .. B-1, forward and backward time split over units in
  proportion to their bytes. Every segment needs its unit's parameters all-gathered first
  (each unit is resharded after its forward and gathered again for its backward); the
  all-gather of segment x+1 is issued when segment x starts computing (one unit of prefetch,
  FSDP's forward prefetch and ``BACKWARD_PRE``), and a unit's gradients are reduce-scattered
  after its backward segment (with ``overlap``; else after the whole backward). Then the
  1/n optimizer. Traffic: two all-gathers and one reduce-scatter per unit, 1.5x DDP's
  (ZeRO sec. 7.2.2: 3 Psi instead of 2 Psi).

One communication stream per rank runs the collectives in issue order (FSDP issues
all-gathers and reduce-scatters on two CUDA streams, but they share the same links: running
them one after the other is the bandwidth-sharing approximation). Every collective moves the
bucket's bytes (parameters all-gathered in the gradient dtype).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Tuple

import numpy as np

from commsim.sim.ddp_costs import InFlight

SHARDING = ("none", "zero2", "fsdp")
Kind = Literal["all_reduce", "reduce_scatter", "all_gather"]
Phase = Literal["backward", "forward", "optimizer"]


@dataclass(frozen=True)
class Op:
    """One collective of a step: its kind, the bucket (FSDP unit) it moves, and what it serves:
    ``backward`` (gradient reduction, or FSDP's gather before a unit's backward), ``forward``
    (FSDP's gather before a unit's forward) or ``optimizer`` (ZeRO-2's gather after the step)."""

    kind: Kind
    bucket: int
    phase: Phase


def stream_order(sharding: str, buckets: int, overlap: bool = True) -> Tuple[Op, ...]:
    """The collectives of one step, in the order the communication stream runs them.

    ``buckets`` is the number of DDP buckets (B), numbered in backward (reduction) order.
    """
    if sharding not in SHARDING:
        raise ValueError(f"sharding must be one of {', '.join(SHARDING)}, got {sharding!r}")
    B = buckets
    if sharding == "none":
        return tuple(Op("all_reduce", j, "backward") for j in range(B))
    if sharding == "zero2":
        reduce = [Op("reduce_scatter", j, "backward") for j in range(B)]
        gather = [Op("all_gather", j, "optimizer") for j in reversed(range(B))]  # forward order
        return tuple(reduce + gather)
    # fsdp: gathers for the forward of units B-1..0, then for the backward of units 0..B-1;
    # the gather of segment x+1 is issued when segment x starts, a reduce-scatter when its
    # backward segment ends: gather(b, j+1) precedes reduce(j), which precedes gather(b, j+2).
    ops = [Op("all_gather", u, "forward") for u in reversed(range(B))]
    if B:
        ops.append(Op("all_gather", 0, "backward"))
    for j in range(B):
        if j + 1 < B:
            ops.append(Op("all_gather", j + 1, "backward"))
        if overlap:
            ops.append(Op("reduce_scatter", j, "backward"))
    if not overlap:
        ops.extend(Op("reduce_scatter", j, "backward") for j in range(B))
    return tuple(ops)


def collective_steps(kind: Kind, n: int) -> int:
    """Ring steps of a collective over n ranks: 2(n-1) for an all-reduce, n-1 for either half."""
    if n <= 1:
        return 0
    return 2 * (n - 1) if kind == "all_reduce" else n - 1


def optimizer_time(optimizer: float, sharding: str, n: int) -> float:
    """Optimizer time per step: ``compute.optimizer`` is DDP's full-model time; a sharded rank
    updates 1/n of the parameters (ZeRO sec. 5.1: each rank updates only its partition)."""
    return optimizer if sharding == "none" else optimizer / n


def unit_shares(buckets: np.ndarray) -> np.ndarray:
    """Fraction of forward or backward time spent on each unit: proportional to its bytes."""
    total = float(np.sum(buckets))
    return np.asarray(buckets, dtype=float) / total if total > 0 else np.zeros(len(buckets))


def traffic_bytes(sharding: str, buckets: np.ndarray, n: int) -> float:
    """Bytes each rank sends per step on a ring: (n-1)/n * S per half, two halves per all-reduce."""
    if n <= 1:
        return 0.0
    sizes = np.asarray(buckets, dtype=float)
    return float(sum(collective_steps(op.kind, n) / n * sizes[op.bucket]
                     for op in stream_order(sharding, len(sizes))))


class SegmentInFlight(InFlight):
    """:class:`commsim.sim.ddp_costs.InFlight` for FSDP's compute segments, with one more closed
    form: a segment that starts shortly before its one chain of collectives begins (its unit's
    gather finished, the next gather issued the launch cost later on an idle stream: FSDP's
    forward when communication-bound) and ends inside that chain on every rank. Its finish is
    ``t + w + slowdown x (w - free)``, ``free = begin - t`` the full-rate time before the chain:
    :func:`commsim.sim.ddp_costs._through_chains`' arithmetic of one chain, bit for bit, once
    scalar bounds (rounding is monotone, so bounds of the operands bound every rank's terms)
    show that no ``max(., 0)`` or ``min`` in it binds. ``add``'s `bounds` may carry a third
    element, the chain's earliest begin; ``compute``'s a fourth, the work's minimum. Everything
    else is InFlight's.

    Without copies: the one chain's rows are views of the vectors ``add`` was given, and an
    inside-chain ``compute`` reuses ``work x slowdown`` when it gets the same `work` vector again,
    so the vectors passed in (the engine's fresh launches, finishes and scaled work) must not be
    written afterwards."""

    begin_low: Optional[float] = None  # the last chain's earliest begin, where known
    # (min, max) of the last compute's finish where a closed form gave it (scalar bounds of its
    # operands, and the throttled ranks' own values): the caller's tests need no O(n) pass
    finish_bounds: Optional[Tuple[float, float]] = None

    # the one chain's rows are views of the caller's vectors (the launch and finish of its
    # collectives: fresh arrays, never written afterwards) instead of copies of them, until
    # InFlight's own add, which writes its rows in place, needs them: then they are copied
    _borrowed = False

    def add(self, begin, end, floor, hint=None, bounds=None) -> None:
        if self.last is None or hint == InFlight.NEW:  # a new chain: its begin is this launch
            self.begin_low = None if bounds is None or len(bounds) < 3 else bounds[2]
        elif hint != InFlight.QUEUED:  # (queued: the chain, and its begin, go on)
            self.begin_low = None
        if self.slowdown > 0 and self.last is not None and len(self.begin) == 1:
            if hint == InFlight.QUEUED:
                # InFlight.add's queued case with one chain: it goes on (its begin, and
                # begin_high, stay), ending where this collective does
                self.end_low = None if bounds is None else bounds[1]
                self.end = end[None]
                self._borrowed = True
                self.last = end
                return
            if hint == InFlight.NEW and floor is self.last:
                # a new chain where later compute starts no sooner than the last chain's end (the
                # floor is that very vector: InFlight.add's ``end > floor`` is false everywhere):
                # the new chain replaces the old one, InFlight.add's result without its two passes
                self.begin_high = None if bounds is None else bounds[0]
                self.end_low = None if bounds is None else bounds[1]
                self.begin, self.end = begin[None], end[None]
                self._borrowed = True
                self.last = end
                return
        if self._borrowed:
            self.begin, self.end = self.begin.copy(), self.end.copy()
            self._borrowed = False
        super().add(begin, end, floor, hint, None if bounds is None else bounds[:2])

    def compute(self, start, work, bounds=None):
        self.finish_bounds = None
        if (self.slowdown <= 0 or self.last is None or bounds is None or len(bounds) < 4 or len(self.begin) != 1
                or self.begin_high is None or self.end_low is None
                or (self.throttled is not None and self.scalar_clocks is None)):
            return super().compute(start, work, bounds)
        start_low, start_high, work_high, work_low = bounds
        rate = 1.0 / (1.0 + self.slowdown)
        if self.begin_high <= start_low:
            if (self.end_low - start_high) * rate < work_high:
                return super().compute(start, work, bounds)
            # starts inside its chain and ends in it: InFlight.compute's own closed form (this is
            # its test), inlined, t + work + slowdown x work, and its bounds: start + work <= t <=
            # start + work + work x slowdown (monotone rounding)
            # (work x slowdown kept for the next segment of the same work vector: a step's units
            # are mostly of one size, and the caller passes one vector per size)
            if work is not self._work:
                self._work, self._work_slowed = work, work * self.slowdown
            extra = self._work_slowed
            shared = True  # (not to be written: the throttled ranks' extras go to `stretch` apart)
            extra_high = work_high * self.slowdown
        else:
            if self.begin_low is None:
                return super().compute(start, work, bounds)
            free_high = self.begin_high - start_low
            free_low = self.begin_low - start_high
            if not (free_low >= 0.0 and work_low >= free_high
                    and ((self.end_low - start_high) - free_high) * rate >= work_high - free_low):
                return super().compute(start, work, bounds)
            # _through_chains with one chain, no max/min binding: free = begin - t, slow = left - free
            extra = np.subtract(work, np.subtract(self.begin[-1], start))
            extra *= self.slowdown
            shared = False
            extra_high = (work_high - free_low) * self.slowdown
        t = start + work
        t += extra
        # extra >= 0: start + work <= t <= start + work + extra, each term bounded (monotone
        # rounding), and the throttled ranks' own finishes
        low, high = start_low + work_low, (start_high + work_high) + extra_high
        if self.scalar_clocks is None:
            self.stretch += extra
        elif not shared:
            low, high = self._clocks_after(start, work, t, extra, low, high)
            self.stretch += extra
        else:
            # `stretch += extra` with the throttled ranks' columns of `extra` their clocks': the
            # same additions, those columns redone from their previous values
            stretch = self.stretch
            if isinstance(stretch, np.ndarray):
                before = [stretch.item(r) for r, _ in self.scalar_clocks]
                stretch += extra
            else:  # (0.0 until the first slowed segment)
                before = [stretch] * len(self.scalar_clocks)
                stretch = self.stretch = stretch + extra
            extras = {}  # rank -> its extra, from its clock
            low, high = self._clocks_after(start, work, t, extras, low, high)
            for (r, _), b in zip(self.scalar_clocks, before):
                stretch[r] = b + extras[r]
        self.finish_bounds = (low, high)
        return t

    _work = _work_slowed = None  # the last inside-chain segment's work vector, and it x slowdown
    _memos = None  # [(rank, its scalar clock, its memo in InFlight's _units)], built once

    def _clocks_after(self, start, work, t, extra, low: float, high: float) -> Tuple[float, float]:
        """The thermally throttled ranks, each on its scalar clock: InFlight.compute's loop for
        its one chain (the same arithmetic and memo: :func:`commsim.sim.ddp_costs._through_chains_float`
        of one chain, inlined), which overwrites their columns of `t` and `extra` (a vector, or a
        dict filled by rank); returns
        (low, high) widened to their finishes (their clocks', not the closed form's: the bounds
        hold for the other ranks)."""
        slowdown = self.slowdown
        rate = 1.0 / (1.0 + slowdown)
        chain_begin, chain_end = self.begin[0], self.end[0]
        memos = self._memos
        if memos is None:
            memos = self._memos = [(r, clock, self._units.setdefault(r, {})) for r, clock in self.scalar_clocks]
        for r, clock, memo in memos:
            if len(memo) > 8:
                memo.clear()
            wd = clock.work_done_float
            x = start.item(r)
            units = memo[x] if x in memo else memo.setdefault(x, wd(x))
            x = chain_begin.item(r)
            begin = memo[x] if x in memo else memo.setdefault(x, wd(x))
            x = chain_end.item(r)
            end = memo[x] if x in memo else memo.setdefault(x, wd(x))
            w = work.item(r)
            free = max(begin - units, 0.0)
            done = units + w + max(min((end - units - free) * rate, w - free), 0.0) * slowdown
            finish = clock.time_for_work_float(done)
            t[r] = finish
            extra[r] = finish - clock.time_for_work_float(units + w)
            low, high = min(low, finish), max(high, finish)
        return low, high
