"""Sorted distinct values without ``np.unique``.

``np.unique`` imports ``numpy.ma`` on its first call (about 10 ms of start-up for every
``commsim run``); the planners only need the sorted distinct values of small vectors, the
index of each value's first occurrence in a sorted vector, and where each element falls.
"""

from __future__ import annotations

import numpy as np


def distinct(x) -> np.ndarray:
    """The sorted distinct values of ``x`` (``np.unique(x)`` for non-NaN input)."""
    s = np.sort(np.asarray(x).ravel())
    if s.size == 0:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def first_of_runs(sorted_x) -> tuple:
    """(distinct values, index of each one's first occurrence) of an already sorted vector
    (``np.unique(sorted_x, return_index=True)``)."""
    s = np.asarray(sorted_x)
    if s.size == 0:
        return s, np.zeros(0, dtype=np.int64)
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    index = np.flatnonzero(keep)
    return s[index], index


def distinct_inverse(x) -> tuple:
    """(sorted distinct values, position of each element of ``x`` among them)
    (``np.unique(x, return_inverse=True)`` for non-NaN input)."""
    values = distinct(x)
    return values, np.searchsorted(values, np.asarray(x))
