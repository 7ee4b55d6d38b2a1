"""The max-plus recurrences of the kernels, written once (numpy only).

A synchronous step of a ring: rank i can do step k once it has done step k-1 and its
predecessor i-1 has done step k-1 (it needs the chunk that i-1 produced), and the hop into i
then takes t_i (docs/collectives.md):

    f[i, k] = max(f[i, k-1], f[i-1, k-1]) + t_i,    f[i, 0] = L_i.

A pipeline stage that forwards C chunks in order, chunk j becoming available at X_j and each
taking o on the stage: e_k = max(e_{k-1}, X_k) + o, which unrolls to
e_k = (k+1) o + max_{j<=k} (X_j - j o): a cumulative maximum, so whole chunk sequences are
evaluated with one numpy call.
"""

from __future__ import annotations

import numpy as np


def ring_recurrence(launch: np.ndarray, hop: np.ndarray, steps: int) -> np.ndarray:
    """Finish times after ``steps`` steps of the ring recurrence, step by step: O(m x steps).

    ``launch`` and ``hop`` have shape (..., m): the last axis is the ring (position i receives
    from position i-1, cyclically); leading axes are independent rings evaluated together.
    ``hop[..., i]`` is the time of the hop *into* position i. The rings inside a node of the
    hierarchical all-reduce run it directly; :mod:`commsim.collectives.ring_closed_form`
    evaluates the same recurrence in O(m) per ring for long rings.
    """
    f = np.array(launch, dtype=float, copy=True)
    hop = np.asarray(hop, dtype=float)
    for _ in range(steps):
        f = np.maximum(f, np.roll(f, 1, axis=-1)) + hop
    return f


def pipeline(available: np.ndarray, occupancy: np.ndarray) -> np.ndarray:
    """End times of C chunks through one stage per row.

    ``available`` has shape (r, C): when chunk k is ready to enter the stage of row r;
    ``occupancy`` has shape (r,) or (r, 1): how long one chunk holds the stage.
    Returns e with e[:, k] = max(e[:, k-1], available[:, k]) + occupancy.
    """
    available = np.asarray(available, dtype=float)
    o = np.asarray(occupancy, dtype=float).reshape(-1, 1)
    k = np.arange(available.shape[1], dtype=float)
    return (k + 1.0) * o + np.maximum.accumulate(available - k * o, axis=1)


# the most floats that Responses keeps (8 MiB): a column is n floats, so 256 columns at 4,096
# ranks, 8 at 131,072
MAX_ELEMENTS = 1 << 20


class Responses:
    """Single-source responses of max-plus linear kernels, planned once per (kernel, rank).

    A kernel is max-plus linear when ``finish[x] = max over u of launch[u] + A[x, u]`` (the
    tree's closed form is: every term is a launch plus a path cost), so its finish for launches
    that are ``-inf`` except at one rank p is the column ``A[:, p]`` (:meth:`column`), and a
    launch ``c + A'[:, q]`` (a previous collective that rank q alone decided) gives
    ``c + K(A'[:, q])`` (:meth:`second`). These bound when one late rank p decides a whole
    collective: with every other launch ``L_u <= c + A'[u, q]``, monotonicity gives
    ``K(L)[x] <= max(c + K(A'[:, q])[x], max over other late q' of L_q' + A[x, q'])``, so

        K(L) = L_p + A[:, p]   when   L_p - c >= max_x (K(A'[:, q])[x] - A[x, p])   (:meth:`gap`)
                               and    L_p - L_q' >= max_x (A[x, q'] - A[x, p])       (:meth:`pair_gap`)

    (and, from an arbitrary launch, ``K(L_others) <= max(L_others) + K(0)``: :meth:`cold_gap`).
    Each gap is a scalar computed once from O(n) vectors, so a run of collectives that one late
    rank decides costs a few scalar comparisons each, not a kernel call."""

    def __init__(self, max_elements: int = MAX_ELEMENTS):
        self.max_elements = max_elements
        self._elements = 0  # floats held in columns and second responses
        self._clear()

    def _clear(self) -> None:
        self._column: dict = {}
        self._second: dict = {}
        self._gaps: dict = {}
        self._uniform: dict = {}
        self._at: dict = {}
        self._elements = 0

    def _hold(self, n: int) -> None:
        """Make room for a vector of n floats: past :attr:`max_elements` everything is forgotten
        (and recomputed when asked again, to the same values), so memory stays bounded whatever
        the number of distinct late ranks."""
        if self._elements + n > self.max_elements:
            self._clear()
        self._elements += n

    def column(self, kernel, p: int) -> np.ndarray:
        """``A[:, p]``: every rank's finish when rank p alone launches, at 0 (read-only)."""
        key = (id(kernel), p)
        col = self._column.get(key)
        if col is None:
            self._hold(kernel.world_size)
            launch = np.full(kernel.world_size, -np.inf)
            launch[p] = 0.0
            col = self._column[key] = kernel.finish_times(launch)
            col.setflags(write=False)
        return col

    def second(self, kernel, source, q: int) -> np.ndarray:
        """``K(A'[:, q])``: `kernel` launched at `source`'s column of rank q."""
        key = (id(kernel), id(source), q)
        out = self._second.get(key)
        if out is None:
            column = self.column(source, q)
            self._hold(kernel.world_size)
            out = self._second[key] = kernel.finish_times(column)
            out.setflags(write=False)
        return out

    def top(self, kernel, q: int) -> float:
        """``max_x A[x, q]``: the latest finish when rank q alone launches at 0."""
        key = ("top", id(kernel), q)
        g = self._gaps.get(key)
        if g is None:
            g = self._gaps[key] = float(self.column(kernel, q).max())
        return g

    def loose_gap(self, kernel, p: int, source, q: int) -> float:
        """An upper bound of :meth:`gap` without the second response: ``K(A'[:, q]) <=
        max(A'[:, q]) + K(0)`` (monotone, time-invariant), so ``max(A'[:, q]) + cold_gap(p)``."""
        key = ("loose", id(kernel), p, id(source), q)
        g = self._gaps.get(key)
        if g is None:
            g = self._gaps[key] = self.top(source, q) + self.cold_gap(kernel, p)
        return g

    def gap(self, kernel, p: int, source, q: int) -> float:
        """``max_x (K(A'[:, q])[x] - A[x, p])``: how much later than the offset c of a launch
        ``c + A'[:, q]`` rank p must launch to decide `kernel` alone."""
        key = ("gap", id(kernel), p, id(source), q)
        g = self._gaps.get(key)
        if g is None:
            g = self._gaps[key] = float(np.max(self.second(kernel, source, q) - self.column(kernel, p)))
        return g

    def pair_gap(self, kernel, p: int, q: int) -> float:
        """``max_x (A[x, q] - A[x, p])``: how much later than rank q rank p must launch for q's
        launch to decide nothing."""
        key = ("pair", id(kernel), p, q)
        g = self._gaps.get(key)
        if g is None:
            g = self._gaps[key] = float(np.max(self.column(kernel, q) - self.column(kernel, p)))
        return g

    def uniform(self, kernel) -> np.ndarray:
        """``K(0)``: every rank's finish when all launch at 0 (read-only)."""
        out = self._uniform.get(id(kernel))
        if out is None:
            self._hold(kernel.world_size)
            out = self._uniform[id(kernel)] = kernel.finish_times(np.zeros(kernel.world_size))
            out.setflags(write=False)
        return out

    def cold_gap(self, kernel, p: int) -> float:
        """``max_x (K(0)[x] - A[x, p])``: how much later than the latest other launch rank p
        must launch to decide `kernel` alone, whatever the others' launches."""
        key = ("cold", id(kernel), p)
        g = self._gaps.get(key)
        if g is None:
            g = self._gaps[key] = float(np.max(self.uniform(kernel) - self.column(kernel, p)))
        return g

    def at(self, kernel, p: int, ranks: tuple) -> tuple:
        """``(A[:, p], [A[r, p] for r in ranks], min of A[x, p] over the x not in ranks)``: what a
        run of collectives that rank p decides, beside the late `ranks`, reads per collective."""
        key = (id(kernel), p, ranks)
        out = self._at.get(key)
        if out is None:
            col = self.column(kernel, p)
            others = col.copy()
            others[list(ranks)] = np.inf
            out = self._at[key] = (col, col[list(ranks)].tolist(), float(others.min()))
        return out
