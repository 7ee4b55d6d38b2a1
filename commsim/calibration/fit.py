"""The alpha-beta fit of a calibration: the ring model fitted to measured all-reduce times.

:func:`fit_alpha_beta` fits one line T(S, n) = 2(n-1) alpha + 2(n-1)/n S/B (the model of
:mod:`commsim.calibration.records`), :func:`fit_ranges` one line per size range,
:func:`fit_link` a whole link level (refusing a sweep whose sizes cannot determine B), and
:func:`fit_error` says how well a model reproduces the measured busbw.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Iterable, Optional, Sequence, Tuple, Union

import numpy as np

from commsim.calibration.errors import CalibrationError
from commsim.calibration.records import (
    LEVELS,
    FitError,
    LinkCalibration,
    Measurement,
    Number,
    SizeRange,
    model_time,
)

# The fit error is quoted for sizes >= 1 MiB: below that all-reduce time is latency-bound and
# busbw is a tiny, noisy number (nccl-tests prints 0.00 there); 1 MiB is also the first
# power-of-two size of an nccl-tests sweep that is >= 1 MB, so both readings agree.
FIT_ERROR_MIN_SIZE = 1 << 20

# Smallest share of the largest size's time that the fitted transfer term S/B must explain
# for the fit to count as having found a bandwidth (below it 1/B is rounding noise).
MIN_TRANSFER_SHARE = 1e-6


def fit_alpha_beta(
    sizes: Sequence[Number], times: Sequence[Number], n: Union[int, Sequence[int]]
) -> Tuple[float, float]:
    """Fit the ring model T(S) = 2(n-1) alpha + 2(n-1)/n S / B; return (alpha_s, B in bytes/s).

    `n` is one world size or one per measurement (a joint fit over several ring sizes: the
    model is linear in alpha and 1/B for any mix of n).

    Weighting: least squares on the *relative* residual (T_model - T)/T, i.e. weights 1/T^2.
    A sweep spans 8 B to GBs, times from microseconds to seconds; unweighted least squares
    would let the few largest sizes dominate (their absolute residuals are 10^5 times bigger),
    leaving alpha determined by noise, while a fit in log-time is not linear. The relative
    residual is linear in the parameters and is exactly what a busbw error measures
    (busbw is proportional to 1/T), so every size counts equally, small and large.

    Constraints: alpha >= 0 (if the free fit goes negative, alpha is pinned at 0 and B refit);
    B must come out > 0 and its transfer term at the largest size must be at least
    MIN_TRANSFER_SHARE of the time measured there, otherwise the times do not grow with size
    and there is no bandwidth to fit (CalibrationError).
    """
    s = np.asarray(sizes, dtype=float)
    t = np.asarray(times, dtype=float)
    ns = np.broadcast_to(np.asarray(n, dtype=float), s.shape).astype(float)
    if s.shape != t.shape or s.ndim != 1:
        raise CalibrationError(f"sizes and times must be 1-D and equally long, got {s.shape} and {t.shape}")
    if len(s) < 2 or len(np.unique(s)) < 2:
        raise CalibrationError("an alpha-beta fit needs measurements at two or more distinct sizes")
    if np.any(~np.isfinite(t)) or np.any(t <= 0) or np.any(s <= 0):
        raise CalibrationError("an alpha-beta fit needs sizes and times > 0")
    if np.any(ns < 2):
        raise CalibrationError("an alpha-beta fit needs world sizes >= 2 (one rank does not communicate)")
    x_alpha = 2.0 * (ns - 1.0)  # coefficient of alpha
    x_inv_b = 2.0 * (ns - 1.0) / ns * s  # coefficient of 1/B
    w = 1.0 / t  # relative residuals
    a = np.column_stack([x_alpha * w, x_inv_b * w])
    y = np.ones_like(t)  # t * w
    (alpha, inv_b), *_ = np.linalg.lstsq(a, y, rcond=None)
    if alpha < 0:
        alpha = 0.0
        col = a[:, 1]
        inv_b = float(col @ y / (col @ col))
    # A positive 1/B can be rounding noise when the times do not grow (1e-27 from a sweep at
    # constant time gave B = 5.8e17 GB/s): the transfer term at the largest size must be a
    # measurable part of the time measured there.
    big = int(np.argmax(x_inv_b))
    if not inv_b > 0 or inv_b * x_inv_b[big] < MIN_TRANSFER_SHARE * t[big]:
        raise CalibrationError(
            "all-reduce times do not grow with size: no bandwidth term to fit (check the data)"
        )
    return float(alpha), float(1.0 / inv_b)


def fit_error(predict: Callable[[int, int], float], table: Iterable[Measurement],
              min_size: int = FIT_ERROR_MIN_SIZE) -> FitError:
    """Median and max |busbw_model - busbw_measured| / busbw_measured in %, sizes >= min_size,
    for a model `predict(size, n) -> seconds`. busbw is proportional to 1/t, so this is
    |t_measured / t_model - 1|. With no measurement that large: NaN and `points` 0."""
    errs = [
        abs(m.time_s / predict(m.size_bytes, m.world_size) - 1.0) * 100.0
        for m in table
        if m.size_bytes >= min_size
    ]
    if not errs:
        return FitError(float("nan"), float("nan"), int(min_size), 0)
    return FitError(float(np.median(errs)), float(np.max(errs)), int(min_size), len(errs))


MAX_RANGES = 3
MIN_SIZES_PER_RANGE = 3
# Relative residuals below 0.05% are below what a log resolves (nccl-tests prints times with
# 4 significant digits): the range count is not raised to chase them.
RESIDUAL_FLOOR = 5e-4


def _segment_cost(table: Sequence[Measurement]) -> Tuple[float, Optional[Tuple[float, float]]]:
    """Sum of squared relative residuals of the best alpha-beta line (inf if none fits)."""
    try:
        a, b = fit_alpha_beta([m.size_bytes for m in table], [m.time_s for m in table],
                              [m.world_size for m in table])
    except CalibrationError:
        return math.inf, None
    res = [model_time(a, b, m.size_bytes, m.world_size) / m.time_s - 1.0 for m in table]
    return float(np.dot(res, res)), (a, b)


def fit_ranges(table: Sequence[Measurement], max_ranges: int = MAX_RANGES) -> Tuple[SizeRange, ...]:
    """Split the sweep into at most `max_ranges` contiguous size ranges (each >= 3 distinct
    sizes) and fit alpha-beta in each with the relative weighting of :func:`fit_alpha_beta`.

    The split minimises the summed squared relative residuals for each number of ranges K
    (exhaustive dynamic programming over the cut points: a sweep has a few dozen sizes); K is
    chosen by the Bayesian information criterion N ln(RSS/N) + 2K ln N, so a clean line
    (PCIe, sockets) stays one range and an NVLink sweep, whose busbw ramps up with size as
    NCCL changes protocol and channel count, gets two or three."""
    sizes = sorted({m.size_bytes for m in table})
    groups = [[m for m in table if m.size_bytes == s] for s in sizes]
    k_max = min(max_ranges, len(sizes) // MIN_SIZES_PER_RANGE)
    cost: Dict[Tuple[int, int], Tuple[float, Optional[Tuple[float, float]]]] = {}

    def seg(i: int, j: int):  # sizes[i:j]
        if (i, j) not in cost:
            cost[(i, j)] = _segment_cost([m for g in groups[i:j] for m in g])
        return cost[(i, j)]

    n_sizes = len(sizes)
    # best[k][j]: (rss, cuts) covering sizes[0:j] with k ranges
    best: Dict[int, Dict[int, Tuple[float, Tuple[int, ...]]]] = {1: {}}
    for j in range(MIN_SIZES_PER_RANGE, n_sizes + 1):
        best[1][j] = (seg(0, j)[0], ())
    for k in range(2, max(k_max, 1) + 1):
        best[k] = {}
        for j in range(k * MIN_SIZES_PER_RANGE, n_sizes + 1):
            options = [
                (best[k - 1][i][0] + seg(i, j)[0], best[k - 1][i][1] + (i,))
                for i in range((k - 1) * MIN_SIZES_PER_RANGE, j - MIN_SIZES_PER_RANGE + 1)
                if i in best[k - 1]
            ]
            if options:
                best[k][j] = min(options)
    npts = len(table)
    chosen, chosen_score = None, math.inf
    for k in sorted(best):
        if n_sizes not in best[k] or not math.isfinite(best[k][n_sizes][0]):
            continue
        rss, cuts = best[k][n_sizes]
        score = npts * math.log(max(rss / npts, RESIDUAL_FLOOR**2)) + 2 * k * math.log(npts)
        if score < chosen_score - 1e-9:
            chosen, chosen_score = cuts, score
    if chosen is None:  # too few sizes to split, or no split fits: one range over everything
        a, b = fit_alpha_beta([m.size_bytes for m in table], [m.time_s for m in table],
                              [m.world_size for m in table])
        return (SizeRange(sizes[0], a, b, sizes[-1]),)
    bounds = (0,) + chosen + (n_sizes,)
    return tuple(SizeRange(sizes[i], *seg(i, j)[1], sizes[j - 1]) for i, j in zip(bounds, bounds[1:]))


def _merge_duplicates(measurements: Iterable[Measurement]) -> Tuple[Measurement, ...]:
    """Sort by (world size, size); repeated (world size, size) pairs become their median time."""
    groups: Dict[Tuple[int, int], list] = {}
    for m in measurements:
        groups.setdefault((m.world_size, m.size_bytes), []).append(m.time_s)
    return tuple(
        Measurement(size, float(np.median(ts)), n) for (n, size), ts in sorted(groups.items())
    )


# A sweep determines the bandwidth only where the transfer term is a large part of the time:
# below that, 1/B is fitted to the small slope that timer noise and rounding leave on
# latency-bound times (the 8-32 B rows of a real log gave B = 0.032 GB/s; the whole log, 3.9).
# So the whole-sweep fit must put at least half of some measurement's time in the transfer
# term: there transfer dominates latency, and a 2x error in B would show as a 25%+ misfit.
MIN_BANDWIDTH_SHARE = 0.5


def transfer_share(alpha_s: float, beta_Bps: float, size: Number, n: int) -> float:
    """Share of the model's all-reduce time spent in the transfer term 2(n-1)/n S/B."""
    transfer = 2.0 * (n - 1) / n * float(size) / beta_Bps
    return transfer / (2.0 * (n - 1) * alpha_s + transfer)


def balance_size(alpha_s: float, beta_Bps: float, n: int) -> float:
    """Size at which the model's transfer term equals its latency term:
    2(n-1) alpha = 2(n-1)/n S/B, so S = n alpha B."""
    return n * alpha_s * beta_Bps


def check_bandwidth_determined(level: str, alpha_s: float, beta_Bps: float, table: Sequence[Measurement]) -> None:
    """CalibrationError unless the fitted transfer term is at least MIN_BANDWIDTH_SHARE of the
    time of some measurement; the message says which sizes to add: from the size where the
    fitted transfer term would equal the latency term, rounded up to a power of two. (It is a
    lower bound: latency-bound data tend to over-fit 1/B, so the true size is larger.)"""
    shares = [transfer_share(alpha_s, beta_Bps, m.size_bytes, m.world_size) for m in table]
    best = int(np.argmax(shares))
    share, m = shares[best], table[best]
    if share >= MIN_BANDWIDTH_SHARE:
        return
    need = 1 << max(0, math.ceil(math.log2(max(balance_size(alpha_s, beta_Bps, m.world_size), 1.0))))
    sizes = sorted({x.size_bytes for x in table})
    raise CalibrationError(
        f"level {level}: sizes {sizes[0]} to {sizes[-1]} B cannot determine the bandwidth: the fitted transfer "
        f"term is only {share:.1%} of the time at {m.size_bytes} B (latency dominates; a fit needs "
        f">= {MIN_BANDWIDTH_SHARE:.0%} at some size); add sizes >= {need} B, where the fitted transfer term would "
        "equal the latency (a sweep up to 1 GB determines the bandwidth best)"
    )


def fit_link(level: str, measurements: Iterable[Measurement]) -> LinkCalibration:
    """Fit one link level from its measurements (any mix of world sizes >= 2).

    Refused (CalibrationError) when the sizes cannot determine the bandwidth: the times do not
    grow with size, or the fitted transfer term is under MIN_BANDWIDTH_SHARE of every
    measurement's time (see :func:`check_bandwidth_determined`)."""
    if level not in LEVELS:
        raise CalibrationError(f"unknown link level {level!r}; expected one of {', '.join(LEVELS)}")
    table = _merge_duplicates(measurements)
    try:
        alpha_s, beta_Bps = fit_alpha_beta(
            [m.size_bytes for m in table], [m.time_s for m in table], [m.world_size for m in table]
        )
    except CalibrationError as err:
        sizes = sorted({m.size_bytes for m in table})
        raise CalibrationError(f"level {level}: sizes {sizes[0]} to {sizes[-1]} B: {err.message}") from None
    check_bandwidth_determined(level, alpha_s, beta_Bps, table)
    return make_link(level, alpha_s, beta_Bps, table, fit_ranges(table))


def make_link(level: str, alpha_s: float, beta_Bps: float, table: Tuple[Measurement, ...],
              ranges: Tuple[SizeRange, ...]) -> LinkCalibration:
    """A LinkCalibration with its fit errors computed from the parameters and the table."""
    line = fit_error(lambda size, n: model_time(alpha_s, beta_Bps, size, n), table)
    link = LinkCalibration(level, alpha_s, beta_Bps, table, ranges, line, line)
    return LinkCalibration(level, alpha_s, beta_Bps, table, ranges, fit_error(link.model_time, table), line)
