"""Calibration: measured all-reduce cost per link level, fitted and tabulated.

A calibration file records what a real cluster did: for each link level (``intra_node``,
``inter_node``, or a single ``flat`` level when the measurement has no topology to split)
the all-reduce times measured over a size sweep, and the ring alpha-beta model fitted to
them. Predictions use the measured curve where it exists and the model elsewhere.

The model (DESIGN.md, "Ring all-reduce"): a ring of n ranks takes 2(n-1) steps, each moving
S/n bytes over one hop of latency alpha and bandwidth B:

    T(S, n) = 2(n-1) * alpha + 2(n-1)/n * S / B

Bandwidth conventions are nccl-tests' (doc/PERFORMANCE.md in NVIDIA/nccl-tests):
algbw = S / t, and for all-reduce busbw = algbw * 2(n-1)/n, the rate each hop of a ring must
sustain. So for the ring model busbw tends to B as S grows, and B is what busbw measures.

Pure module: numpy only (no torch, no SimPy); the YAML file format is in
:mod:`commsim.calibration.file`. Quantities are in base units: bytes, seconds, bytes per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from commsim.collectives.busbw import algbw, busbw, busbw_factor
from commsim.network.costs import ring_allreduce_time
from commsim.errors import ScenarioError

class CalibrationError(ScenarioError, ValueError):
    """A calibration file, or data to fit one from, is unusable (one-line message).

    A ScenarioError, so the CLI reports it like any bad input (exit 2, one line); the text
    names the file and key path where there is one."""

    def __init__(self, message: str):
        text = " ".join(str(message).splitlines())
        Exception.__init__(self, text)
        self.source, self.path, self.message = "", None, text


FORMAT = "commsim-calibration/1"
LEVELS = ("intra_node", "inter_node", "flat")
# The fit error is quoted for sizes >= 1 MiB: below that all-reduce time is latency-bound and
# busbw is a tiny, noisy number (nccl-tests prints 0.00 there); 1 MiB is also the first
# power-of-two size of an nccl-tests sweep that is >= 1 MB, so both readings agree.
FIT_ERROR_MIN_SIZE = 1 << 20

Number = Union[int, float]


# --------------------------------------------------------------------------------------------
# nccl-tests bandwidth conventions
# --------------------------------------------------------------------------------------------


def allreduce_factor(n: int) -> float:
    """All-reduce bus-bandwidth factor 2(n-1)/n (nccl-tests doc/PERFORMANCE.md)."""
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n!r}")
    return busbw_factor("all_reduce", n)


# --------------------------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """One measured all-reduce: `size_bytes` per rank over `world_size` ranks took `time_s`.

    algbw/busbw are derived from size and time (not copied from a log, whose columns are
    rounded to 0.01 GB/s)."""

    size_bytes: int
    time_s: float
    world_size: int

    def __post_init__(self) -> None:
        if self.size_bytes <= 0:
            raise ValueError(f"size_bytes must be > 0, got {self.size_bytes!r}")
        if not (self.time_s > 0 and math.isfinite(self.time_s)):
            raise ValueError(f"time_s must be a finite number > 0, got {self.time_s!r}")
        if self.world_size < 2:
            raise ValueError(f"world_size must be >= 2 for an all-reduce, got {self.world_size!r}")

    @property
    def algbw(self) -> float:
        return algbw(self.size_bytes, self.time_s)  # time_s > 0: checked on construction

    @property
    def busbw(self) -> float:
        return busbw("all_reduce", self.size_bytes, self.time_s, self.world_size)


@dataclass(frozen=True)
class FitError:
    """How well the fitted alpha-beta model reproduces the measured busbw (in %),
    over the `points` measurements with size >= `min_size_bytes`."""

    median_pct: float
    max_pct: float
    min_size_bytes: int
    points: int


@dataclass(frozen=True)
class SizeRange:
    """Alpha-beta parameters fitted to the measured sizes min_size_bytes..max_size_bytes. They
    apply up to max_size_bytes (the first range also to smaller sizes, the last one to larger
    sizes; a size between two ranges' data uses the larger range)."""

    min_size_bytes: int
    alpha_s: float
    beta_Bps: float
    max_size_bytes: Optional[int] = None  # largest size fitted (None: not recorded)


@dataclass(frozen=True)
class LinkCalibration:
    """One link level.

    - alpha_s, beta_Bps: the ring model fitted to the whole sweep (alpha in s per ring step,
      beta the per-hop bandwidth B in bytes/s: what busbw tends to for large sizes);
    - ranges: the same model fitted per size range (at most MAX_RANGES, "protocol ranges":
      NCCL switches protocol and channel count with size, so one line rarely fits a whole
      sweep); this is the model predictions use off the measured table;
    - table: the measurements, sorted by (world size, size);
    - fit_error: busbw error of `ranges` on the table, sizes >= 1 MiB;
      line_fit_error: the same for the single alpha_s/beta_Bps line.
    """

    level: str
    alpha_s: float
    beta_Bps: float
    table: Tuple[Measurement, ...]
    ranges: Tuple[SizeRange, ...]
    fit_error: FitError
    line_fit_error: FitError

    def rows_for(self, n: int) -> Tuple[Measurement, ...]:
        """The measurements taken at world size `n`, by increasing size."""
        return tuple(m for m in self.table if m.world_size == n)

    def range_for(self, size: Number) -> SizeRange:
        """The size range whose line applies to `size`: the first whose fitted sizes reach up
        to `size` (a size between two ranges' data goes to the larger range), else the last."""
        for r, nxt in zip(self.ranges, self.ranges[1:]):
            end = r.max_size_bytes if r.max_size_bytes is not None else nxt.min_size_bytes - 1
            if size <= end:
                return r
        return self.ranges[-1]

    def model_time(self, size: Number, n: int) -> float:
        """All-reduce time of the per-range alpha-beta model: the line of the range `size` falls
        in, but never less than an earlier range's line at the largest size it was fitted to,
        so that a larger message never costs less (lines fitted separately can step down
        where one range's data ends and the next one's begins)."""
        current = self.range_for(size)
        t = model_time(current.alpha_s, current.beta_Bps, size, n)
        for r, nxt in zip(self.ranges, self.ranges[1:]):
            if r is current:
                break
            end = r.max_size_bytes if r.max_size_bytes is not None else nxt.min_size_bytes - 1
            t = max(t, model_time(r.alpha_s, r.beta_Bps, end, n))
        return t


@dataclass(frozen=True)
class RankCompute:
    """Measured forward/backward time of one rank (medians over timed iterations)."""

    rank: int
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class ComputeTiming:
    """Forward/backward of a synthetic model of `parameters` parameters at `batch_size`;
    forward_s/backward_s are the medians over ranks."""

    parameters: int
    batch_size: int
    forward_s: float
    backward_s: float
    per_rank: Tuple[RankCompute, ...] = ()


@dataclass(frozen=True)
class SourceFile:
    """An input the calibration was derived from (a log file), with its benchmark command."""

    path: str
    sha256: Optional[str] = None
    command: Optional[str] = None


@dataclass(frozen=True)
class Provenance:
    """Where the numbers come from. Unknown fields are None (never guessed)."""

    backend: str
    world_size: int
    hostnames: Tuple[str, ...] = ()
    torch_version: Optional[str] = None
    nccl_version: Optional[str] = None
    gloo_version: Optional[str] = None
    date: Optional[str] = None
    command: Optional[str] = None
    sources: Tuple[SourceFile, ...] = ()


@dataclass(frozen=True)
class Calibration:
    """A complete calibration: link levels (in file order), optional compute timing, provenance."""

    levels: Tuple[LinkCalibration, ...]
    provenance: Provenance
    compute: Optional[ComputeTiming] = None

    def __post_init__(self) -> None:
        names = [lv.level for lv in self.levels]
        if not names:
            raise ValueError("a calibration needs at least one link level")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate link levels in {names}")
        if "flat" in names and len(names) > 1:
            raise ValueError("level 'flat' cannot be combined with intra_node/inter_node")

    @property
    def level_names(self) -> Tuple[str, ...]:
        return tuple(lv.level for lv in self.levels)

    def level(self, name: Optional[str] = None) -> LinkCalibration:
        """The named level; with None, the default level (see :func:`default_level`)."""
        name = name or default_level(self)
        for lv in self.levels:
            if lv.level == name:
                return lv
        raise CalibrationError(
            f"calibration has no link level {name!r} (it has {', '.join(self.level_names)})"
        )


def default_level(cal: Calibration) -> str:
    """The level used when none is named: the only one, else ``inter_node``, because a ring
    that spans nodes is paced by its slowest hops, the ones between nodes."""
    names = cal.level_names
    if len(names) == 1:
        return names[0]
    return "inter_node" if "inter_node" in names else names[0]


# --------------------------------------------------------------------------------------------
# fitting
# --------------------------------------------------------------------------------------------


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


def model_time(alpha_s: float, beta_Bps: float, size: Number, n: int) -> float:
    """Ring all-reduce time of the alpha-beta model: 2(n-1) alpha + 2(n-1)/n S/B (DESIGN.md);
    the simulator's own formula (commsim.network.costs.ring_allreduce_time), in the calibration's
    argument order."""
    return ring_allreduce_time(float(size), n, alpha_s, beta_Bps)


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


def fit_link(level: str, measurements: Iterable[Measurement]) -> LinkCalibration:
    """Fit one link level from its measurements (any mix of world sizes >= 2)."""
    if level not in LEVELS:
        raise CalibrationError(f"unknown link level {level!r}; expected one of {', '.join(LEVELS)}")
    table = _merge_duplicates(measurements)
    return make_link(level, *fit_alpha_beta(
        [m.size_bytes for m in table], [m.time_s for m in table], [m.world_size for m in table]
    ), table, fit_ranges(table))


def make_link(level: str, alpha_s: float, beta_Bps: float, table: Tuple[Measurement, ...],
              ranges: Tuple[SizeRange, ...]) -> LinkCalibration:
    """A LinkCalibration with its fit errors computed from the parameters and the table."""
    line = fit_error(lambda size, n: model_time(alpha_s, beta_Bps, size, n), table)
    link = LinkCalibration(level, alpha_s, beta_Bps, table, ranges, line, line)
    return LinkCalibration(level, alpha_s, beta_Bps, table, ranges, fit_error(link.model_time, table), line)


# --------------------------------------------------------------------------------------------
# prediction
# --------------------------------------------------------------------------------------------


def interpolate_busbw(rows: Sequence[Measurement], size: Number) -> Optional[float]:
    """busbw at `size` from measurements of one world size, linear in log(size) between the
    neighbouring measured sizes; None when `size` lies outside the measured range."""
    if not rows:
        return None
    sizes = np.array([m.size_bytes for m in rows], dtype=float)
    if size < sizes[0] or size > sizes[-1]:
        return None
    bws = np.array([m.busbw for m in rows], dtype=float)
    return float(np.interp(math.log(size), np.log(sizes), bws))


def predict_with_source(
    cal: Calibration, size: Number, n: int, level: Optional[str] = None
) -> Tuple[float, str]:
    """:func:`predict_allreduce_time` and where the figure came from: "table" (measured
    curve), "model" (alpha-beta) or "none" (one rank or zero bytes: nothing to do)."""
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n!r}")
    if size < 0:
        raise ValueError(f"size must be >= 0 bytes, got {size!r}")
    if n == 1 or size == 0:
        return 0.0, "none"
    link = cal.level(level)
    bw = interpolate_busbw(link.rows_for(n), size)
    if bw is not None and bw > 0:
        return float(size) / (bw / allreduce_factor(n)), "table"
    return link.model_time(size, n), "model"


def predict_allreduce_time(cal: Calibration, size: Number, n: int, level: Optional[str] = None) -> float:
    """Predicted all-reduce time (s) of `size` bytes over `n` ranks on link level `level`.

    The measured curve when `n` equals a measured world size and `size` lies inside that
    table (busbw interpolated in log-size, then t = S / (busbw * n / (2(n-1)))); otherwise
    the alpha-beta model of the size range `size` falls in. One rank, or zero bytes, costs nothing."""
    return predict_with_source(cal, size, n, level)[0]


def hop_time(cal: Calibration, size: Number, n: int, level: Optional[str] = None) -> float:
    """Time of one of the 2(n-1) ring steps (each moving size/n bytes over one hop) that makes
    a uniform ring take :func:`predict_allreduce_time`: the per-hop time t_i of DESIGN.md's
    max-plus recurrence for a healthy hop on this level."""
    if n <= 1:
        return 0.0
    return predict_allreduce_time(cal, size, n, level) / (2.0 * (n - 1))


def hop_level_names(cal: Calibration, crosses: np.ndarray) -> List[str]:
    """Level of each ring hop: inter_node where the hop crosses nodes, intra_node elsewhere;
    a calibration with a single level (flat, or only one of the two) uses it for every hop
    (with two levels they are intra_node and inter_node: 'flat' does not combine)."""
    names = cal.level_names
    if len(names) == 1:
        return [names[0]] * len(crosses)
    return ["inter_node" if c else "intra_node" for c in crosses]


def _calibrated_level(cal: Calibration, level: str) -> str:
    """The calibration level that prices the fabric's ``level`` (intra_node / inter_node)."""
    return hop_level_names(cal, [level == "inter_node"])[0]


def measured_level_constants(cal: Calibration, level: str, size_bytes: Number, n: int) -> Tuple[float, float]:
    """(latency, bandwidth) of the fabric's ``level`` for a collective of ``size_bytes`` over
    ``n`` ranks, from the calibration's measured curve (where it has one) or its model: a
    :class:`commsim.network.fabric.LevelPricing`, what ``commsim run`` prices the ring with.

    A healthy hop takes t = predict_allreduce_time(cal, S, n, L) / (2(n-1)) per ring step
    (:func:`hop_time`), so a uniform ring over one level takes exactly the calibrated time.
    t splits into a latency part, alpha of the level's size range (at most t), charged as the
    ring's mean hop latency (latencies pipeline across the ring:
    :func:`commsim.collectives.ring_closed_form.hop_times`), and a transfer part, the rest,
    which moves S/n bytes: the bandwidth is (S/n) / (t - alpha) (infinite when nothing is
    left), so a slow link (a bandwidth factor f) stretches the transfer part only, by 1/f.
    """
    lv = _calibrated_level(cal, level)
    t = hop_time(cal, size_bytes, n, lv)
    alpha = min(cal.level(lv).range_for(size_bytes).alpha_s, t)
    transfer = t - alpha
    return alpha, (float(size_bytes) / n) / transfer if transfer > 0 else math.inf


def fitted_level_constants(cal: Calibration, level: str, size_bytes: Number, n: int) -> Tuple[float, float]:
    """(latency, bandwidth) of the fabric's ``level``: the alpha and B fitted to the size range
    ``size_bytes`` falls in (the measured table is not used; ``n`` is not either): a
    :class:`commsim.network.fabric.LevelPricing`, what ``commsim collective SCENARIO
    --calibration`` prices every algorithm with."""
    r = cal.level(_calibrated_level(cal, level)).range_for(size_bytes)
    return r.alpha_s, r.beta_Bps


# --------------------------------------------------------------------------------------------
# the file format lives in commsim.calibration.file; these names are kept here for callers
