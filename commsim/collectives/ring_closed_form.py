"""Vectorized ring all-reduce: per-rank finish times for per-rank launch times.

The model (docs/collectives.md): ranks 0..n-1 form a ring;
one step over the hop into rank i (from rank i-1) takes ``t[i]`` (see :func:`hop_times`:
the ring's mean hop latency plus S/n bytes at that hop's bandwidth). A ring
all-reduce is K = 2(n-1) steps (reduce-scatter then all-gather). Step k completes on
rank i once both rank i and rank i-1 completed step k-1, plus the hop time:

    f[i, 0] = L[i]                       (launch time of rank i)
    f[i, k] = max(f[i, k-1], f[i-1, k-1]) + t[i]
    finish[i] = f[i, K]

Evaluating the recurrence directly costs O(n * K) = O(n^2) per collective. This module
evaluates its closed form in O(n) numpy work instead.

Closed form. Unrolling the max-plus recurrence, f[i, K] is the heaviest walk that ends at
rank i after K steps, moving one rank forward or staying at each step, and collecting
t of the rank it is at. A walk that first sits on (unwrapped) position a visits every
position of the window [a, i] at least once and spends its K - len(window) spare steps
on the window's largest t. With g[a] = max(L[a], L[a-1]) (the walk may start one rank
before a) and prefix sums P:

    f[i] = max over a in [i-K+1, i] of  g[a] + (P[i] - P[a-1]) + (K - (i-a+1)) * max(t[a..i])

Group windows by a threshold v taken from the distinct values of t ("classes"): for a
window whose max is at least v, replacing its max by v can only lower the weight, and
equals it when v is the max. So f[i] is the max over classes v of

    max over a in [i-K+1, q_v(i)] of  h_v[a]   +   (P[i] - i*v + (K-1)*v)
    h_v[a] = g[a] - P[a-1] + a*v,     q_v(i) = last position <= i with t >= v,

a range maximum. h_v is periodic up to a drift: h_v[a - n] = h_v[a] - D_v with
D_v = n*v - sum(t). When D_v >= 0 (v at least the mean hop time, always true for the
largest class) only the rightmost copy of each rank in the range matters, so the range is
the n (or n-1) positions ending at q_v(i): one segment-max pass over the class positions.
Other classes take exact prefix/suffix maxima over a period. A class whose windows
cannot beat the answer so far (max(g) + K*v <= min(f)) is skipped: its windows weigh at
most that much.

The step-by-step recurrence is :func:`commsim.collectives.maxplus.ring_recurrence`; the
SimPy reference :func:`commsim.collectives.reference.ring_events` evaluates it event by event;
the tests hold all three to 1e-9. :class:`RingAllReduce` (K = 2(n-1)) and :class:`RingHalf`
(K = n-1, a reduce-scatter or all-gather) share the set-up and the class loop
(:class:`_RingClosedForm`) and differ in how they take the range maxima.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from commsim.collectives.distinct import distinct, distinct_inverse

NEG_INF = -np.inf
# the ufunc's own reduction: ndarray.max() adds a Python-level wrapper (about 0.5 us a call,
# several calls per collective); same result
_max = np.maximum.reduce
_min = np.minimum.reduce
REGULAR_MIN_SEGMENTS = 16
# at most this many segments (a few nodes): the simple path's per-segment work on Python floats
# (RingAllReduce._simple_small); measured faster than its numpy form up to a few dozen
SMALL_SEGMENTS = 32


def hop_times(size_bytes: float, alpha: np.ndarray, bandwidth: np.ndarray) -> np.ndarray:
    """Per-hop step time of a ring collective of S bytes: t[i] = mean(alpha) + (S/n) / B[i].

    ``alpha[i]`` and ``bandwidth[i]`` describe the hop into rank i (from rank i-1). Every step
    moves one chunk of S/n bytes over every hop (docs/collectives.md), occupying hop i for (S/n)/B[i]:
    the slowest hop paces the pipeline, so the bandwidth term is 2(n-1)/n * S / min(B).
    Latency is not occupancy: consecutive chunks overlap their latencies, and a chunk's chain of
    dependencies over the 2(n-1) steps crosses every hop of the ring about twice. So each step
    is charged the ring's mean hop latency, and the latency term adds up hop by hop,
    2(n-1) * mean(alpha) = 2 * sum(alpha) * (n-1)/n, which is how NCCL composes ring latency
    (tuning.cc: intra-node hops at NVLink latency, inter-node hops at network latency) rather
    than 2(n-1) times the slowest hop's latency. Uniform links give 2(n-1)alpha + 2(n-1)/n S/B.
    """
    n = len(alpha)
    return np.mean(alpha) + (size_bytes / n) / bandwidth


def _checked_hop_times(hop_time) -> np.ndarray:
    """hop_time as a float vector; a kernel cannot price negative, infinite or missing hops."""
    t = np.asarray(hop_time, dtype=np.float64)
    if t.ndim != 1 or len(t) == 0:
        raise ValueError(f"hop_time must be a non-empty vector, got shape {t.shape}")
    if not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ValueError("hop_time must be finite and non-negative")
    return t


@dataclass
class _Class:
    """One threshold v of the closed form: what both ring lengths need."""

    v: float
    D: float  # drift of h_v over one period: n*v - sum(t)
    base: np.ndarray  # -P[a-1] + a*v over one period, a in [0, n)
    const: np.ndarray  # P[i] - i*v + (K-1)*v


@dataclass
class _AllReduceClass(_Class):
    """K = 2(n-1): a window of the rightmost copies (fast) or a range of a whole period (general)."""

    fast: bool = True
    # fast path (D >= 0): segment maxima between class positions
    seg_starts: Optional[np.ndarray] = None
    pre_seg: Optional[np.ndarray] = None
    suf_seg: Optional[np.ndarray] = None
    off_pre: Optional[np.ndarray] = None
    off_suf: Optional[np.ndarray] = None
    key_of_rank: Optional[np.ndarray] = None
    block: int = 0  # > 0: the windows are consecutive runs of `block` ranks from rank 0
    counts: Optional[np.ndarray] = None  # else, if the runs are consecutive: their lengths
    const_min: Optional[np.ndarray] = None  # per window, min of const over its ranks
    # one window per class position, window k reading segments <= k and > k (see _simple):
    # then (prefix minima, suffix minima) of const_min, and the first rank of each window
    simple: Optional[tuple] = None
    regular: Optional[tuple] = None  # (first cut, last cut, spacing) when the cuts are evenly spaced
    # simple with at most SMALL_SEGMENTS segments: (-D, prefix minima, suffix minima, const_min)
    # as Python floats, for :meth:`RingAllReduce._simple_small`
    small: Optional[tuple] = None
    # general path: prefix/suffix maxima over a whole period
    l0: Optional[np.ndarray] = None
    r0: Optional[np.ndarray] = None
    off_l: Optional[np.ndarray] = None
    off_r: Optional[np.ndarray] = None
    off_full: Optional[np.ndarray] = None


@dataclass
class _HalfClass(_Class):
    """K = n-1: every window is shorter than the ring (see :class:`RingHalf`)."""

    all_across: bool = True
    across: Optional[np.ndarray] = None  # ranks whose range runs from period -1 into period 0
    cuts: Optional[np.ndarray] = None  # segment starts when the class is sparse, else None
    prefix_at: Optional[np.ndarray] = None
    suffix_at: Optional[np.ndarray] = None  # suffix from i+2, read in the reversed accumulation
    before: Optional[np.ndarray] = None  # ranks whose range lies inside period -1
    before_at: Optional[np.ndarray] = None
    last: int = 0  # last class position
    within: tuple = ()  # (i, lo, q) of the ranks whose range lies inside period 0
    # simple classes: per rank of `within`, the segments (s0, s1) whose union is [lo, q], or None
    within_segments: tuple = ()
    simple: int = 0  # > 0: class positions every `simple` ranks from rank 0 and D >= 0 (see _half_simple)
    regular: Optional[tuple] = None  # equal segments, as in _AllReduceClass


class _RingClosedForm:
    """Finish times after K steps of the ring recurrence, with fixed per-hop times, for any
    launch times: the set-up and the loop over classes (module docstring) shared by
    :class:`RingAllReduce` and :class:`RingHalf`, which prepare and evaluate one class each.

    Build once per hop-time vector (in the engine: once per collective kind and bucket size) and
    call :meth:`finish_times` for every collective. The plan holds its work buffers (a call
    returns a new array but works in them), so one plan serves one caller at a time."""

    def __init__(self, hop_time: np.ndarray, steps: int):
        t = _checked_hop_times(hop_time)
        self.n = n = len(t)
        self.hop_time = t
        self.steps = K = steps
        # planned buffers: g and h; the equal-segment maxima take their passes in g (then
        # recomputed for any later class) and in h (all-reduce: h is not read after them) or
        # a third buffer (the halves read h again)
        self._g = np.empty(n)
        self._h = np.empty(n)
        self._spare = None
        self._classes: List[_Class] = []
        # one hop time t: every walk of K >= n-1 steps reaches rank i from every rank, so all
        # finish at max(L) + K t (the textbook closed form; no classes needed)
        self._uniform = float(K * t[0]) if n > 1 and np.all(t == t[0]) else None
        if n == 1 or self._uniform is not None:
            return
        P = np.cumsum(t)  # P[i] = t[0] + ... + t[i]
        P_before = np.concatenate(([0.0], P[:-1]))  # P[a-1]
        total = P[-1]
        idx = np.arange(n)
        lo = idx - K + 1  # leftmost window start for each i (unwrapped)
        for v in distinct(t)[::-1]:  # largest first: it is never skipped
            positions = np.flatnonzero(t >= v)
            # q_v(i): last class position <= i, unwrapped (one period back if none yet)
            k = np.searchsorted(positions, idx, side="right") - 1
            q = np.where(k >= 0, positions[k], positions[k] - n)
            common = _Class(v=float(v), D=n * v - total, base=-P_before + idx * v, const=P - idx * v + (K - 1) * v)
            self._classes.append(self._prepare(common, positions, k, q, lo))

    def _prepare(self, common: _Class, positions, k, q, lo) -> _Class:
        raise NotImplementedError

    def _spare_buffer(self) -> np.ndarray:
        if self._spare is None:
            self._spare = np.empty(self.n)
        return self._spare

    def _evaluate(self, cls, h: np.ndarray, want_min: bool = False):
        """(finish times of the class's windows, const added; their minimum when asked, or None)."""
        raise NotImplementedError

    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        """Per-rank finish times for per-rank launch times ``launch`` (a new array)."""
        L = np.asarray(launch, dtype=np.float64)
        if L.shape != (self.n,):
            raise ValueError(f"launch must have shape ({self.n},), got {L.shape}")
        if self.n == 1:
            return L.copy()
        if self._uniform is not None:
            return np.full(self.n, L.max() + self._uniform)
        g, h = self._g, self._h
        np.maximum(L[1:], L[:-1], out=g[1:])
        g[0] = L[0] if L[0] > L[-1] else L[-1]
        best = None
        bound = None  # min over ranks of the answer so far (for skipping classes)
        for k, cls in enumerate(self._classes):
            if k == 1:  # bounds for skipping classes, needed only when there is more than one
                g_max = L.max()  # = max(g): g takes the larger of each pair of neighbours
            if k >= 1:
                if bound is None:
                    bound = best.min()
                if g_max + self.steps * cls.v <= bound:
                    break  # no window whose max is v (or less: classes go down) reaches the answer
                bound = None
                # the previous class's segment maxima may have worked in g: the same g again
                np.maximum(L[1:], L[:-1], out=g[1:])
                g[0] = L[0] if L[0] > L[-1] else L[-1]
            # h is a planned buffer: no class keeps it past its evaluation
            f, bound0 = self._evaluate(cls, np.add(g, cls.base, out=h), want_min=k == 0 and len(self._classes) > 1)
            if best is None:
                best, bound = f, bound0
            else:
                np.maximum(best, f, out=best)
        return best


class RingAllReduce(_RingClosedForm):
    """Finish times of a ring all-reduce (K = 2(n-1) steps) with fixed per-hop times, for any
    launch times. ``hop_time[i]`` is the time of one ring step over the hop into rank i (see
    :func:`hop_times`)."""

    def __init__(self, hop_time: np.ndarray, *, use_fast_path: bool = True):
        self._use_fast_path = use_fast_path
        super().__init__(hop_time, 2 * (len(np.atleast_1d(hop_time)) - 1))

    # -- precomputation -------------------------------------------------------------
    def _prepare(self, common: _Class, positions, k, q, lo) -> _Class:
        cls = _AllReduceClass(**vars(common), fast=self._use_fast_path and common.D >= 0)
        if cls.fast:
            self._prepare_fast(cls, positions, q, lo, common.D)
        else:
            self._prepare_general(cls, q, lo, common.D)
        return cls

    def _prepare_fast(self, cls: _AllReduceClass, positions, q, lo, D) -> None:
        """Window of the rightmost copies: [q-m+1, q], m = n, or n-1 when the range is that short.

        All ranks with the same (q, short) share one window, so the maxima are taken once
        per distinct window (one per class position) and then spread to the ranks.
        """
        n = self.n
        short = ((q - lo + 1) < n).astype(np.int64)  # only n-1 positions: skip residue q0+1
        # distinct (q, short) pairs in lexicographic order: 2q + short orders them so
        code, key_of_rank = distinct_inverse(2 * q + short)
        kq = code // 2
        kshort = code - 2 * kq
        q0 = np.mod(kq, n)
        pq = (kq - q0) // n  # period of q: 0 or -1
        # maxima needed: prefix max ending at q0 (a class position), suffix max from q0+1(+short)
        suf_start = q0 + 1 + kshort
        cuts = distinct(np.concatenate(([0], q0 + 1, suf_start)))
        cuts = cuts[cuts < n]
        cls.seg_starts = cuts
        inner = cuts[1:]
        if len(inner) >= REGULAR_MIN_SEGMENTS and np.all(np.diff(inner) == inner[1] - inner[0]):
            # class positions evenly spaced (one network hop per node): segments of equal
            # length, whose maxima strided column maxima give faster than reduceat
            # (measured: 210 vs 260 us at 16,384 ranks; slower below a few hundred segments)
            cls.regular = _regular(int(inner[0]), int(inner[-1]), int(inner[1] - inner[0]), (self._g, self._h))
        # segment k covers [cuts[k], cuts[k+1]): the prefix ending at q0 is the segment ending there
        cls.pre_seg = np.searchsorted(cuts, q0, side="right") - 1
        # a suffix starting at s >= n is empty: index len(cuts) holds -inf
        cls.suf_seg = np.where(suf_start < n, np.searchsorted(cuts, np.minimum(suf_start, n - 1)), len(cuts))
        cls.off_pre = pq * D
        cls.off_suf = (pq - 1) * D
        key_of_rank = cls.key_of_rank = key_of_rank.ravel()
        # spreading the per-window values to the ranks: windows hold consecutive ranks (q is
        # non-decreasing in i), so a broadcast over equal runs or a repeat replaces a gather
        counts = np.bincount(key_of_rank, minlength=len(kq))
        if np.all(np.diff(key_of_rank) >= 0) and np.all(counts > 0):
            if np.all(counts == counts[0]):
                cls.block = int(counts[0])
            else:
                cls.counts = counts
            cls.const_min = np.minimum.reduceat(cls.const, np.concatenate(([0], np.cumsum(counts)[:-1])))
        else:
            cls.const_min = np.full(len(kq), np.inf)
            np.minimum.at(cls.const_min, key_of_rank, cls.const)
        W = len(kq)
        if (cls.block and len(cuts) == W + 1 and np.array_equal(cls.pre_seg, np.arange(W))
                and np.array_equal(cls.suf_seg, np.arange(W) + 1) and np.all(cls.off_pre == 0)
                and np.all(cls.off_suf == cls.off_suf[0])):
            cls.simple = (np.minimum.accumulate(cls.const_min), np.minimum.accumulate(cls.const_min[::-1])[::-1])
            if len(cuts) <= SMALL_SEGMENTS:
                cls.small = (float(cls.off_suf[0]), cls.simple[0].tolist(), cls.simple[1].tolist(),
                             cls.const_min.tolist())

    def _prepare_general(self, cls: _AllReduceClass, q, lo, D) -> None:
        """Exact maximum of h over the unwrapped range [lo, q] (length n-1 .. 2n-2)."""
        n = self.n
        pl, l0 = np.divmod(lo, n)
        pr, r0 = np.divmod(q, n)
        same = pl == pr  # then the range is a prefix or a suffix of one period
        cls.l0, cls.r0 = l0, r0
        use_l = ~same | (l0 != 0)
        use_r = ~same | (l0 == 0)
        cls.off_l = np.where(use_l, pl * D, NEG_INF)
        cls.off_r = np.where(use_r, pr * D, NEG_INF)
        cls.off_full = np.where(pr - pl >= 2, (pl + 1) * D, NEG_INF)

    # -- evaluation -----------------------------------------------------------------
    def _evaluate(self, cls: _AllReduceClass, h: np.ndarray, want_min: bool = False):
        """(f of this class with const added, its minimum over ranks or None)."""
        if not cls.fast:
            f = self._general(cls, h)
            f += cls.const
            return f, None
        if cls.simple is not None:
            if cls.small is not None:
                return self._simple_small(cls, h, want_min)
            return self._simple(cls, h, want_min)
        per_window = self._fast(cls, h)
        # the minimum over ranks, per window: min(pw + const) = pw + min(const) exactly
        # (rounding is monotone), so the bound costs O(windows), not O(ranks)
        bound = float(np.min(per_window + cls.const_min)) if want_min else None
        if cls.block:
            f = (cls.const.reshape(-1, cls.block) + per_window[:, None]).reshape(-1)
        elif cls.counts is not None:
            f = np.repeat(per_window, cls.counts)
            f += cls.const
        else:
            f = per_window[cls.key_of_rank]
            f += cls.const
        return f, bound

    @staticmethod
    def _simple(cls: _AllReduceClass, h: np.ndarray, want_min: bool):
        """The fast path when window k is max(max of segments <= k, max of segments > k - D)
        (one window per class position, every rank in period 0: one network hop per node).

        With M the largest segment maximum (at j*, its first occurrence) and D >= 0, window
        k >= j* is M (everything after it is at most M - D), and window k < j* is
        max(prefix maximum to k, M - D): M - D itself unless an earlier segment exceeds it.
        The same maxima as :meth:`_fast`, without its two accumulations in the common case.
        """
        seg = _segment_max(h, cls.seg_starts, cls.regular)
        j = int(seg.argmax())
        M = seg[j]
        c = M + cls.off_suf[0]  # M - D, as _fast rounds it
        b = cls.block
        pre_min, suf_min = cls.simple
        W = len(pre_min)
        f = np.empty(W * b)
        if j and (seg[0] > c or _max(seg[:j]) > c):  # an early segment beats M - D: its prefix maxima count
            head = seg[:j]
            if not (head[0] > c and _nondecreasing(head)):  # else its own prefix maxima, all above c
                head = np.maximum(_prefix_max(head), c)
            # spread the per-window values over the window's ranks: a repeat then a flat add
            # is cheaper than a broadcast add over (windows, block) rows of a few ranks each
            np.add(head.repeat(b), cls.const[: j * b], out=f[: j * b])
            bound = float(_min(head + cls.const_min[:j])) if want_min else None
        else:
            np.add(cls.const[: j * b], c, out=f[: j * b])
            bound = float(c + pre_min[j - 1]) if want_min and j else None
        if j < W:
            np.add(cls.const[j * b:], M, out=f[j * b:])
            if want_min:
                tail = float(M + suf_min[j])
                bound = tail if bound is None else min(bound, tail)
        return f, bound

    @staticmethod
    def _simple_small(cls: _AllReduceClass, h: np.ndarray, want_min: bool):
        """:meth:`_simple` with few segments (a few nodes): the per-segment work on Python floats.

        numpy's per-call overhead (~0.5 us) dwarfs a pass over a handful of segment maxima, and
        :meth:`_simple` makes about ten such calls. The same operations in the same order on the
        same float64 values, so bit-identical: max and min are exact, and ``x if x >= y else y``
        is ``np.maximum(x, y)`` for non-NaN values (signed zeros included)."""
        seg = _segment_max(h, cls.seg_starts, cls.regular).tolist()
        M = max(seg)
        j = seg.index(M)  # argmax: the first occurrence
        off, pre_min, suf_min, const_min = cls.small
        c = M + off  # M - D
        b = cls.block
        W = len(pre_min)
        f = np.empty(W * b)
        bound = None
        if j and max(seg[:j]) > c:  # an early segment beats M - D: its prefix maxima count
            head = seg[:j]
            if not (head[0] > c and all(y >= x for x, y in zip(head, head[1:]))):
                top, out = head[0], []
                for x in head:  # np.maximum(np.maximum.accumulate(head), c)
                    top = top if top >= x else x
                    out.append(top if top >= c else c)
                head = out
            np.add(np.array(head).repeat(b), cls.const[: j * b], out=f[: j * b])  # (np.repeat of a list: ~1 us more)
            if want_min:
                bound = min([x + y for x, y in zip(head, const_min)])
        else:
            np.add(cls.const[: j * b], c, out=f[: j * b])
            if want_min and j:
                bound = c + pre_min[j - 1]
        if j < W:
            np.add(cls.const[j * b:], M, out=f[j * b:])
            if want_min:
                tail = M + suf_min[j]
                bound = tail if bound is None else min(bound, tail)
        return f, bound

    @staticmethod
    def _fast(cls: _AllReduceClass, h: np.ndarray) -> np.ndarray:
        """Per window (see :meth:`_prepare_fast`): the maximum of h over its range."""
        seg = _segment_max(h, cls.seg_starts, cls.regular)
        prefix = np.maximum.accumulate(seg)
        suffix = np.empty(len(seg) + 1)  # suffix maxima, then -inf for "nothing"
        suffix[-1] = NEG_INF
        np.maximum.accumulate(seg[::-1], out=suffix[-2::-1])
        return np.maximum(prefix[cls.pre_seg] + cls.off_pre, suffix[cls.suf_seg] + cls.off_suf)

    @staticmethod
    def _general(cls: _AllReduceClass, h: np.ndarray) -> np.ndarray:
        prefix = running_max(h)
        suffix = running_max(h[::-1])[::-1]
        out = np.maximum(suffix[cls.l0] + cls.off_l, prefix[cls.r0] + cls.off_r)
        return np.maximum(out, prefix[-1] + cls.off_full, out=out)


def _segment_spans(positions: np.ndarray, n: int, ranges) -> tuple:
    """For each range [lo, r], the segments (s0, s1) of a simple half class whose union it is
    (segment 0 = [0, 0], segment k = [positions[k-1] + 1, positions[k]], the last one up to n-1:
    the segments of :meth:`RingHalf._half_simple`), or None when it cuts a segment."""
    starts = [0] + [int(x) + 1 for x in positions if x < n - 1]
    ends = [s - 1 for s in starts[1:]] + [n - 1]
    out = []
    for lo, r in ranges:
        if lo in starts and r in ends and starts.index(lo) <= ends.index(r):
            out.append((starts.index(lo), ends.index(r) + 1))
        else:
            out.append(None)
    return tuple(out)


def _prefix_max(x: np.ndarray) -> np.ndarray:
    """``np.maximum.accumulate(x)``, or x itself when x is already non-decreasing.

    The ring's segment maxima usually are (a bucket launched from the previous one's finish
    times, which grow along the ring), and checking costs one comparison pass, against a serial
    chain of about 6 ns per element for the accumulation. Exact either way."""
    return x if _nondecreasing(x) else np.maximum.accumulate(x)


def _nondecreasing(x: np.ndarray) -> bool:
    return len(x) < 2 or bool(np.greater_equal(x[1:], x[:-1]).all())


@dataclass
class _Regular:
    """Equal segments [first + k*spacing, first + (k+1)*spacing) between ``first`` and ``last``
    (plus a head [0, first) and a tail [last, n)), with the buffers their maxima are taken in:
    the plan's own vectors, reused on every call. At 16,384 ranks a vector is 128 KiB; new
    temporaries per pass cost allocation and push the working set past a core's L2 cache
    (measured on the 16,384-rank scale run: 1.14 s with separate work buffers, 1.07 s with the
    passes in the plan's g and h)."""

    first: int
    last: int
    spacing: int
    seg: np.ndarray  # the segment maxima, rewritten by every call
    work: tuple  # window_max's buffers


def _regular(first: int, last: int, spacing: int, work: tuple) -> _Regular:
    """Equal segments, their maxima taken in ``work`` (two buffers of at least last - first
    floats, free for the segment maxima to overwrite)."""
    return _Regular(first, last, spacing, np.empty((last - first) // spacing + 2), work)


def _segment_max(h: np.ndarray, starts: np.ndarray, regular: Optional[_Regular]) -> np.ndarray:
    """Maxima of h over the segments [starts[k], starts[k+1]) (the last one runs to the end).

    With ``regular`` the result is its planned buffer: read it before the next call."""
    if regular is None:
        return np.maximum.reduceat(h, starts)
    first, last, spacing, seg = regular.first, regular.last, regular.spacing, regular.seg
    seg[0] = h[0] if first == 1 else _max(h[:first])
    seg[-1] = _max(h[last:])
    # equal segments: the maximum over every window of `spacing` positions (doubling windows,
    # a few contiguous passes) read at the segment starts; faster than reduceat or a
    # strided column loop (measured 8 us against 84 and 32 at 16,384 ranks, 8 per segment)
    seg[1:-1] = window_max(h[first:last], spacing, regular.work)[::spacing]
    return seg


SCAN_BLOCK = 16  # running maxima of long vectors go block by block (see running_max)
SCAN_MIN = 16384  # measured: 1.4x faster at 16,384, 2x at 131,072, slower at 4,096


def running_max(x: np.ndarray) -> np.ndarray:
    """``np.maximum.accumulate(x)`` (a new array), faster on long vectors.

    ``maximum.accumulate`` is a serial chain (about 10x the per-element cost of a plain
    maximum); here the vector is cut into blocks of SCAN_BLOCK held as the rows of a matrix, the
    maxima run down the columns (SCAN_BLOCK vector operations over all blocks at once), the
    chain runs only over the blocks' maxima, and a broadcast maximum joins the two. Exact:
    maxima only.
    """
    n = len(x)
    B = SCAN_BLOCK
    if n < SCAN_MIN:  # below this the column passes' overhead outweighs the serial chain
        return np.maximum.accumulate(x)
    m = -(-n // B)
    padded = np.full(m * B, NEG_INF)
    padded[:n] = x
    X = padded.reshape(m, B)
    for c in range(1, B):
        np.maximum(X[:, c], X[:, c - 1], out=X[:, c])
    carry = np.maximum.accumulate(X[:-1, -1])  # max of all blocks before block k+1
    np.maximum(X[1:], carry[:, None], out=X[1:])
    return padded[:n]


def window_max(x: np.ndarray, width: int, work: Optional[tuple] = None) -> np.ndarray:
    """y[s] = max(x[s : s + width]) for s in 0 .. len(x) - width (exact: maxima only).

    ``work``: two buffers of at least len(x) - 1 floats that the passes alternate between
    (then the result is a view of one of them), instead of a new array per pass."""
    y, w, turn = x, 1, 0
    while 2 * w <= width:
        out = None if work is None else work[turn][: len(y) - w]
        y = np.maximum(y[:-w], y[w:], out=out)
        w *= 2
        turn ^= 1
    if w < width:  # two overlapping windows of w cover one of `width`
        m = len(x) - width + 1
        out = None if work is None else work[turn][:m]
        y = np.maximum(y[:m], y[width - w: width - w + m], out=out)
    return y


class RingHalf(_RingClosedForm):
    """Finish times of a ring reduce-scatter or all-gather: K = n-1 steps of the same recurrence.

    A ring all-reduce is a reduce-scatter then an all-gather (docs/collectives.md); either half alone is
    the recurrence of :class:`RingAllReduce` stopped after n-1 steps, with the same hop times
    (each step still moves S/n bytes over every hop: :func:`hop_times` of the total size S).
    Uniform case: max(L) + (n-1) alpha + (n-1)/n * S/B.

    The closed form is the all-reduce's, with K = n-1: f[i] is the maximum over classes v of

        max over a in [i-n+2, q_v(i)] of h_v[a]   +   (P[i] - i*v + (K-1)*v)

    (see the module docstring; q_v(i) in [i-n+1, i], unwrapped). With K = n-1 every window
    [a, i] is shorter than the ring, so the range holds each rank at most once; it runs from
    period -1 (where h_v[a] = h_v[a+n] - D_v) into period 0 for most ranks, and then

        max = max(prefix_max(h)[q_v(i)], suffix_max(h)[i+2] - D_v)

    (the prefix maximum is needed at class positions only: segment maxima when the class is
    sparse). The ranks before the first class position (range inside period -1: a suffix of
    h up to the last class position) and i = n-2, n-1 (range inside period 0) are handled
    apart. O(n) per class; classes are skipped as in :class:`RingAllReduce`.
    """

    def __init__(self, hop_time: np.ndarray):
        super().__init__(hop_time, len(np.atleast_1d(hop_time)) - 1)

    def _prepare(self, common: _Class, positions, k, q, lo) -> _Class:
        n = self.n
        nonempty = q >= lo
        across = nonempty & (q >= 0) & (lo < 0)  # period -1 into period 0
        before = np.flatnonzero(nonempty & (q < 0))  # inside period -1: [i+2, last position]
        within = np.flatnonzero(nonempty & (lo >= 0))  # inside period 0: i = n-2, n-1
        a = np.flatnonzero(across)
        sparse = len(positions) <= n // 4
        last = int(positions[-1])
        b = int(positions[1] - positions[0]) if len(positions) > 1 else 0
        simple = b if (sparse and common.D >= 0 and b >= 2 and n % b == 0 and len(positions) >= 3
                       and np.array_equal(positions, np.arange(0, n, b))) else 0
        return _HalfClass(
            simple=simple,
            regular=_regular(1, last + 1, b, (self._g, self._spare_buffer())) if simple else None,
            **vars(common),
            all_across=len(a) == n,
            across=a,
            # prefix maxima at q: via segment maxima ending at each class position (sparse)
            # segment k = [c_{k-1}+1, c_k] (a last one after c_{m-1}, if any, is not read)
            cuts=np.concatenate(([0], positions[positions < n - 1] + 1)) if sparse else None,
            prefix_at=k[a] if sparse else q[a],
            suffix_at=n - 1 - (a + 2),
            before=before,
            before_at=last - (before + 2),  # in the reversed accumulation of h[:last+1]
            last=last,
            within=tuple((int(i), int(lo[i]), int(q[i])) for i in within),
            within_segments=_segment_spans(positions, n, [(int(lo[i]), int(q[i])) for i in within]) if simple else (),
        )

    def _evaluate(self, c: _HalfClass, h: np.ndarray, want_min: bool = False):
        if c.simple:
            return self._half_simple(c, h), None
        f = self._half(c, h)
        f += c.const
        return f, None

    def _half_simple(self, c: _HalfClass, h: np.ndarray) -> np.ndarray:
        """The class's finish times (its maxima from :meth:`_half`, const added) when the class
        positions are every b ranks from rank 0 (one network hop per node) and D >= 0: the same
        maxima, taken from the largest value M of h.

        Rank a (node k = a // b, q(a) = k b) takes max(prefix_max(h)[q(a)], max(h[a+2:]) - D).
        With M first at p* (in segment j, which ends at node j's position): nodes k >= j have
        M in their prefix, so take M (the other term is at most M - D); nodes k < j whose
        suffix starts at or before p* take max(prefix, M - D), which is M - D unless an
        earlier segment exceeds it (then the running maximum over the segments before j); the
        few ranks between p* - 1 and the end of segment j, whose suffix starts after p*, and
        ranks n-2 and n-1 (a range inside period 0) are computed exactly.
        """
        n, b = self.n, c.simple
        W = n // b
        seg = _segment_max(h, c.cuts, c.regular)  # W + 1 segments: [0], then [(k-1)b+1, kb], then the tail
        j = int(seg.argmax())
        M = seg[j]
        below = M - c.D
        const = c.const
        f = np.empty(n)  # node values + const: nodes >= j take M, nodes < j max(prefix maximum, M - D)
        top = min(j, W)
        if top:
            head = seg[:top]
            if head[0] > below and _nondecreasing(head):
                pass  # its own prefix maxima, all above M - D
            elif _max(head) > below:
                head = np.maximum(_prefix_max(head), below)
            else:
                head = None  # M - D throughout
            if head is None:
                np.add(const[: top * b], below, out=f[: top * b])
            else:  # a repeat then a flat add: cheaper than a broadcast over (nodes, b) rows
                np.add(head.repeat(b), const[: top * b], out=f[: top * b])
        if j < W:
            np.add(const[j * b:], M, out=f[j * b:])
        if j:  # the ranks whose suffix starts after p*, before the end of segment j
            start, end = (j - 1) * b + 1, min(j * b, n - 1)
            hi = min(end - 1, n - 3)  # ranks p* - 1 .. hi, in at most two nodes
            # a few ranks (at most a node's worth plus one): Python floats over a short list
            # cost less than a dozen numpy calls on views of a few elements; same IEEE maxima
            # and differences, so the same bits
            hs = h[start:end + 1].tolist()
            p = start + hs.index(M)  # the first occurrence, as argmax
            lo = max(p - 1, 0)
            if lo <= hi:
                k_lo, k_hi = lo // b, hi // b
                pre_lo = _max(seg[: k_lo + 1])
                pre_hi = max(pre_lo, _max(seg[k_lo + 1: k_hi + 1])) if k_hi > k_lo else pre_lo
                first_hi = (k_lo + 1) * b  # ranks from here on are in node k_hi
                D = float(c.D)
                pre_lo, pre_hi = float(pre_lo), float(pre_hi)
                running = float(_max(seg[j + 1:])) if j < W else NEG_INF  # max(h[end+1:])
                vals = const[lo: hi + 1].tolist()  # value + const, added as numpy adds
                for a in range(hi, lo - 1, -1):  # running = max(h[a+2:])
                    y = a + 2
                    if y <= end:
                        x = hs[y - start]
                        if x > running:
                            running = x
                    pre = pre_lo if a < first_hi else pre_hi
                    d = running - D
                    vals[a - lo] += d if d > pre else pre
                f[lo: hi + 1] = vals
        else:
            p = 0
        for (i, lo, r), span in zip(c.within, c.within_segments):
            if lo <= p <= r:
                top_in_range = M
            elif span is not None:  # [lo, r] is whole segments: their maxima, not a pass over h
                top_in_range = _max(seg[span[0]:span[1]])
            else:
                top_in_range = _max(h[lo: r + 1])
            f[i] = top_in_range + const[i]
        return f

    def _half(self, c: _HalfClass, h: np.ndarray) -> np.ndarray:
        """The class's maxima (const not added) by prefix and suffix maxima: any class."""
        if c.cuts is not None:
            prefix = np.maximum.accumulate(np.maximum.reduceat(h, c.cuts))
        else:
            prefix = running_max(h)
        suffix = running_max(h[::-1])  # suffix[n-1-y] = max h[y:]
        across = np.maximum(prefix[c.prefix_at], suffix[c.suffix_at] - c.D)
        if c.all_across:
            return across
        f = np.full(self.n, NEG_INF)
        f[c.across] = across
        if len(c.before):
            head_suffix = np.maximum.accumulate(h[c.last :: -1])
            f[c.before] = head_suffix[c.before_at] - c.D
        for i, l, r in c.within:
            f[i] = h[l : r + 1].max()
        return f
