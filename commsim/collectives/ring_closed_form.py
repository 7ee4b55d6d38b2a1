"""Vectorized ring all-reduce: per-rank finish times for per-rank launch times.

The model (DESIGN.md, "A collective is a synchronization point"): ranks 0..n-1 form a ring;
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

The per-chunk SimPy model in :mod:`commsim.sim.reference` evaluates the same recurrence event
by event; the tests hold the two to 1e-9.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

import numpy as np

NEG_INF = -np.inf
REGULAR_MIN_SEGMENTS = 256


def ring_steps(n: int) -> int:
    """Number of sequential steps of a ring all-reduce over n ranks: 2(n-1)."""
    return 2 * (n - 1)


def hop_times(
    size_bytes: float, alpha: np.ndarray, bandwidth: np.ndarray
) -> np.ndarray:
    """Per-hop step time of a ring all-reduce of S bytes: t[i] = mean(alpha) + (S/n) / B[i].

    ``alpha[i]`` and ``bandwidth[i]`` describe the hop into rank i (from rank i-1). Every step
    moves one chunk of S/n bytes over every hop (DESIGN.md), occupying hop i for (S/n)/B[i]:
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
    """Precomputed index data for one threshold v of the closed form."""

    v: float
    base: np.ndarray  # -P[a-1] + a*v over one period, a in [0, n)
    const: np.ndarray  # P[i] - i*v + (K-1)*v
    fast: bool
    # fast path (D >= 0): segment maxima between class positions
    seg_starts: np.ndarray | None = None
    pre_seg: np.ndarray | None = None
    suf_seg: np.ndarray | None = None
    off_pre: np.ndarray | None = None
    off_suf: np.ndarray | None = None
    key_of_rank: np.ndarray | None = None
    regular: tuple | None = None  # (first cut, last cut, spacing) when the cuts are evenly spaced
    # general path: prefix/suffix maxima over a whole period
    l0: np.ndarray | None = None
    r0: np.ndarray | None = None
    off_l: np.ndarray | None = None
    off_r: np.ndarray | None = None
    off_full: np.ndarray | None = None


class RingAllReduce:
    """Finish times of a ring all-reduce with fixed per-hop times, for any launch times.

    Build once per (hop times) — in the engine, once per distinct bucket size — and call
    :meth:`finish_times` for every collective. ``hop_time[i]`` is the time of one ring step
    over the hop into rank i (see :func:`hop_times`).
    """

    def __init__(self, hop_time: np.ndarray, *, use_fast_path: bool = True):
        t = _checked_hop_times(hop_time)
        self.n = n = len(t)
        self.hop_time = t
        self.steps = K = ring_steps(n)
        self._g = np.empty(n)
        self._classes: List[_Class] = []
        if n == 1:
            return
        P = np.cumsum(t)  # P[i] = t[0] + ... + t[i]
        P_before = np.concatenate(([0.0], P[:-1]))  # P[a-1]
        total = P[-1]
        idx = np.arange(n)
        lo = idx - K + 1  # leftmost window start for each i (unwrapped)
        for v in np.unique(t)[::-1]:  # largest first: it is never skipped
            positions = np.flatnonzero(t >= v)
            D = n * v - total
            base = -P_before + idx * v
            const = P - idx * v + (K - 1) * v
            # q_v(i): last class position <= i, unwrapped (one period back if none yet)
            k = np.searchsorted(positions, idx, side="right") - 1
            q = np.where(k >= 0, positions[k], positions[k] - n)
            cls = _Class(v=float(v), base=base, const=const, fast=use_fast_path and D >= 0)
            if cls.fast:
                self._prepare_fast(cls, positions, q, lo, D)
            else:
                self._prepare_general(cls, q, lo, D)
            self._classes.append(cls)

    # -- precomputation -------------------------------------------------------------
    def _prepare_fast(self, cls: _Class, positions, q, lo, D) -> None:
        """Window of the rightmost copies: [q-m+1, q], m = n, or n-1 when the range is that short.

        All ranks with the same (q, short) share one window, so the maxima are taken once
        per distinct window (one per class position) and then spread to the ranks.
        """
        n = self.n
        short = ((q - lo + 1) < n).astype(np.int64)  # only n-1 positions: skip residue q0+1
        keys, key_of_rank = np.unique(np.stack([q, short]), axis=1, return_inverse=True)
        kq, kshort = keys
        q0 = np.mod(kq, n)
        pq = (kq - q0) // n  # period of q: 0 or -1
        # maxima needed: prefix max ending at q0 (a class position), suffix max from q0+1(+short)
        suf_start = q0 + 1 + kshort
        cuts = np.unique(np.concatenate(([0], q0 + 1, suf_start)))
        cuts = cuts[cuts < n]
        cls.seg_starts = cuts
        inner = cuts[1:]
        if len(inner) >= REGULAR_MIN_SEGMENTS and np.all(np.diff(inner) == inner[1] - inner[0]):
            # class positions evenly spaced (one network hop per node): segments of equal
            # length, whose maxima strided column maxima give faster than reduceat
            # (measured: 210 vs 260 us at 16,384 ranks; slower below a few hundred segments)
            cls.regular = (int(inner[0]), int(inner[-1]), int(inner[1] - inner[0]))
        # segment k covers [cuts[k], cuts[k+1]): the prefix ending at q0 is the segment ending there
        cls.pre_seg = np.searchsorted(cuts, q0, side="right") - 1
        # a suffix starting at s >= n is empty: index len(cuts) holds -inf
        cls.suf_seg = np.where(suf_start < n, np.searchsorted(cuts, np.minimum(suf_start, n - 1)), len(cuts))
        cls.off_pre = pq * D
        cls.off_suf = (pq - 1) * D
        cls.key_of_rank = key_of_rank.ravel()

    def _prepare_general(self, cls: _Class, q, lo, D) -> None:
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
    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        """Per-rank finish times for per-rank launch times ``launch`` (a new array)."""
        L = np.asarray(launch, dtype=np.float64)
        if L.shape != (self.n,):
            raise ValueError(f"launch must have shape ({self.n},), got {L.shape}")
        if self.n == 1:
            return L.copy()
        g = self._g
        np.maximum(L[1:], L[:-1], out=g[1:])
        g[0] = max(L[0], L[-1])
        best = None
        for k, cls in enumerate(self._classes):
            if k == 1:  # bounds for skipping classes, needed only when there is more than one
                g_max = g.max()
            if k >= 1 and g_max + self.steps * cls.v <= best.min():
                continue  # no window whose max is v can reach the current answer
            h = g + cls.base
            f = self._fast(cls, h) if cls.fast else self._general(cls, h)
            f += cls.const
            best = f if best is None else np.maximum(best, f, out=best)
        return best

    @staticmethod
    def _fast(cls: _Class, h: np.ndarray) -> np.ndarray:
        seg = _segment_max(h, cls.seg_starts, cls.regular)
        prefix = np.maximum.accumulate(seg)
        suffix = np.empty(len(seg) + 1)  # suffix maxima, then -inf for "nothing"
        suffix[-1] = NEG_INF
        np.maximum.accumulate(seg[::-1], out=suffix[-2::-1])
        per_window = np.maximum(prefix[cls.pre_seg] + cls.off_pre, suffix[cls.suf_seg] + cls.off_suf)
        return per_window[cls.key_of_rank]

    @staticmethod
    def _general(cls: _Class, h: np.ndarray) -> np.ndarray:
        prefix = np.maximum.accumulate(h)
        suffix = np.maximum.accumulate(h[::-1])[::-1]
        out = np.maximum(suffix[cls.l0] + cls.off_l, prefix[cls.r0] + cls.off_r)
        return np.maximum(out, prefix[-1] + cls.off_full, out=out)


def _segment_max(h: np.ndarray, starts: np.ndarray, regular) -> np.ndarray:
    """Maxima of h over the segments [starts[k], starts[k+1]) (the last one runs to the end)."""
    if regular is None:
        return np.maximum.reduceat(h, starts)
    first, last, spacing = regular
    middle = h[first:last].reshape(-1, spacing)
    seg = np.empty(len(middle) + 2)
    seg[0] = h[:first].max()
    seg[-1] = h[last:].max()
    if spacing > 16:
        np.max(middle, axis=1, out=seg[1:-1])
    else:
        out = seg[1:-1]
        np.copyto(out, middle[:, 0])
        for j in range(1, spacing):
            np.maximum(out, middle[:, j], out=out)
    return seg


def ring_recurrence(launch: np.ndarray, hop_time: np.ndarray, steps: int | None = None) -> np.ndarray:
    """The recurrence itself, step by step over numpy vectors: O(n^2). For tests and checks.

    ``steps``: 2(n-1) (an all-reduce) unless given; n-1 is a reduce-scatter or all-gather."""
    f = np.asarray(launch, dtype=np.float64).copy()
    t = np.asarray(hop_time, dtype=np.float64)
    for _ in range(ring_steps(len(f)) if steps is None else steps):
        f = np.maximum(f, np.roll(f, 1)) + t
    return f


class RingHalf:
    """Finish times of a ring reduce-scatter or all-gather: K = n-1 steps of the same recurrence.

    A ring all-reduce is a reduce-scatter then an all-gather (DESIGN.md); either half alone is
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
        t = _checked_hop_times(hop_time)
        self.n = n = len(t)
        self.hop_time = t
        self.steps = K = n - 1
        self._g = np.empty(n)
        self._classes: list = []
        if n == 1:
            return
        P = np.cumsum(t)
        P_before = np.concatenate(([0.0], P[:-1]))
        total = P[-1]
        idx = np.arange(n)
        lo = idx - n + 2  # leftmost window start (unwrapped): K = n-1 steps
        for v in np.unique(t)[::-1]:  # largest first: it is never skipped
            positions = np.flatnonzero(t >= v)
            k = np.searchsorted(positions, idx, side="right") - 1
            q = np.where(k >= 0, positions[k], positions[k] - n)  # last class position <= i
            nonempty = q >= lo
            across = nonempty & (q >= 0) & (lo < 0)  # period -1 into period 0
            before = nonempty & (q < 0)  # inside period -1: [i+2, last position]
            within = np.flatnonzero(nonempty & (lo >= 0))  # inside period 0: i = n-2, n-1
            a = np.flatnonzero(across)
            sparse = len(positions) <= n // 4
            cls = {
                "v": float(v), "D": n * v - total,
                "base": -P_before + idx * v, "const": P - idx * v + (K - 1) * v,
                "all_across": len(a) == n,
                "across": a,
                # prefix maxima at q: via segment maxima ending at each class position (sparse)
                # segment k = [c_{k-1}+1, c_k] (a last one after c_{m-1}, if any, is not read)
                "cuts": np.concatenate(([0], positions[positions < n - 1] + 1)) if sparse else None,
                "prefix_at": k[a] if sparse else q[a],
                "suffix_at": n - 1 - (a + 2),  # suffix from i+2, read in the reversed accumulation
                "before": np.flatnonzero(before),
                "last": int(positions[-1]),
                "within": [(int(i), int(lo[i]), int(q[i])) for i in within],
            }
            b = cls["before"]
            cls["before_at"] = cls["last"] - (b + 2)  # in the reversed accumulation of h[:last+1]
            self._classes.append(cls)

    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        """Per-rank finish times for per-rank launch times ``launch`` (a new array)."""
        L = np.asarray(launch, dtype=np.float64)
        if L.shape != (self.n,):
            raise ValueError(f"launch must have shape ({self.n},), got {L.shape}")
        n = self.n
        if n == 1:
            return L.copy()
        g = self._g
        np.maximum(L[1:], L[:-1], out=g[1:])
        g[0] = max(L[0], L[-1])
        g_max = g.max()
        best = None
        for c in self._classes:
            if best is not None and g_max + self.steps * c["v"] <= best.min():
                continue  # no window whose max is v can reach the current answer
            h = g + c["base"]
            D = c["D"]
            if c["cuts"] is not None:
                prefix = np.maximum.accumulate(np.maximum.reduceat(h, c["cuts"]))
            else:
                prefix = np.maximum.accumulate(h)
            suffix = np.maximum.accumulate(h[::-1])  # suffix[n-1-y] = max h[y:]
            across = np.maximum(prefix[c["prefix_at"]], suffix[c["suffix_at"]] - D)
            if c["all_across"]:
                f = across
            else:
                f = np.full(n, NEG_INF)
                f[c["across"]] = across
                if len(c["before"]):
                    head_suffix = np.maximum.accumulate(h[c["last"] :: -1])
                    f[c["before"]] = head_suffix[c["before_at"]] - D
                for i, l, r in c["within"]:
                    f[i] = h[l : r + 1].max()
            f += c["const"]
            best = f if best is None else np.maximum(best, f, out=best)
        return best
