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

Pure module: numpy and yaml only (no torch, no SimPy). Quantities are in base units:
bytes, seconds, bytes per second.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import yaml

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


def algbw(size: Number, time: Number) -> float:
    """Algorithm bandwidth in bytes/s: size / time (nccl-tests doc/PERFORMANCE.md)."""
    if time <= 0:
        raise ValueError(f"time must be > 0 seconds, got {time!r}")
    return float(size) / float(time)


def busbw_factor(n: int) -> float:
    """All-reduce bus-bandwidth factor 2(n-1)/n (nccl-tests doc/PERFORMANCE.md)."""
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n!r}")
    return 2.0 * (n - 1) / n


def busbw(size: Number, time: Number, n: int) -> float:
    """All-reduce bus bandwidth in bytes/s: algbw * 2(n-1)/n (nccl-tests doc/PERFORMANCE.md)."""
    return algbw(size, time) * busbw_factor(n)


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
        return algbw(self.size_bytes, self.time_s)

    @property
    def busbw(self) -> float:
        return busbw(self.size_bytes, self.time_s, self.world_size)


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
    """Alpha-beta parameters that apply from `min_size_bytes` up to the next range's start
    (the first range also covers smaller sizes, the last one larger sizes)."""

    min_size_bytes: int
    alpha_s: float
    beta_Bps: float


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
        """The size range whose parameters apply to `size`."""
        chosen = self.ranges[0]
        for r in self.ranges[1:]:
            if size >= r.min_size_bytes:
                chosen = r
        return chosen

    def model_time(self, size: Number, n: int) -> float:
        """All-reduce time of the per-range alpha-beta model."""
        r = self.range_for(size)
        return model_time(r.alpha_s, r.beta_Bps, size, n)


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
    B must come out > 0, otherwise the times do not grow with size and there is no bandwidth
    to fit (CalibrationError).
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
    if not inv_b > 0:
        raise CalibrationError(
            "all-reduce times do not grow with size: no bandwidth term to fit (check the data)"
        )
    return float(alpha), float(1.0 / inv_b)


def model_time(alpha_s: float, beta_Bps: float, size: Number, n: int) -> float:
    """Ring all-reduce time of the alpha-beta model: 2(n-1) alpha + 2(n-1)/n S/B (DESIGN.md)."""
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1) * alpha_s + 2.0 * (n - 1) / n * float(size) / beta_Bps


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
        return (SizeRange(sizes[0], a, b),)
    bounds = (0,) + chosen + (n_sizes,)
    return tuple(SizeRange(sizes[i], *seg(i, j)[1]) for i, j in zip(bounds, bounds[1:]))


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
        return float(size) / (bw / busbw_factor(n)), "table"
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


def calibrated_hop_times(cal: Calibration, crosses: Sequence[bool], size_bytes: Number,
                         bandwidth_factors: Optional[Sequence[float]] = None) -> np.ndarray:
    """Per-hop step times t_i of a ring all-reduce of `size_bytes` over n = len(crosses) ranks,
    for DESIGN.md's max-plus recurrence (hop i enters rank i from rank i-1).

    A healthy hop of level L takes predict_allreduce_time(cal, S, n, L) / (2(n-1)): with every
    hop on one level the ring then takes exactly the calibrated all-reduce time (measured
    curve or model). `crosses[i]` says whether hop i crosses nodes (see
    commsim.costs.ring_hop_links). As in commsim.ring.hop_times, a hop's time splits into a
    latency part, alpha of its level's size range, charged as the ring's mean hop latency
    (latencies pipeline across the ring), and a transfer part, the rest, which a bandwidth
    factor f_i < 1 (a slow link) stretches by 1/f_i.
    """
    crosses = np.asarray(crosses, dtype=bool)
    n = len(crosses)
    if n <= 1:
        return np.zeros(n)
    levels = hop_level_names(cal, crosses)
    per_level = {lv: hop_time(cal, size_bytes, n, lv) for lv in set(levels)}
    t = np.array([per_level[lv] for lv in levels], dtype=np.float64)
    alpha = np.array([min(cal.level(lv).range_for(size_bytes).alpha_s, per_level[lv]) for lv in levels])
    transfer = t - alpha
    if bandwidth_factors is not None:
        transfer = transfer / np.asarray(bandwidth_factors, dtype=np.float64)
    return alpha.mean() + transfer


# --------------------------------------------------------------------------------------------
# file format
# --------------------------------------------------------------------------------------------

TABLE_COLUMNS = ["size_bytes", "time_s", "algbw_Bps", "busbw_Bps", "world_size"]


def utc_now_iso() -> str:
    """Current UTC time, ISO 8601; honours SOURCE_DATE_EPOCH for reproducible files."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (
        _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc)
        if epoch and epoch.isdigit()
        else _dt.datetime.now(_dt.timezone.utc)
    )
    return when.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _opt_str(x: Any) -> Optional[str]:
    return None if x is None else str(x)  # plain str: version objects are str subclasses


def _finite(x: float) -> Optional[float]:
    return float(x) if math.isfinite(x) else None


def calibration_to_dict(cal: Calibration) -> Dict[str, Any]:
    """The YAML mapping of a calibration (see docs/validator.md for every key)."""
    p = cal.provenance
    doc: Dict[str, Any] = {
        "format": FORMAT,
        "provenance": {
            "backend": p.backend,
            "world_size": p.world_size,
            "hostnames": list(p.hostnames),
            "torch_version": _opt_str(p.torch_version),
            "nccl_version": _opt_str(p.nccl_version),
            "gloo_version": _opt_str(p.gloo_version),
            "date": p.date,
            "command": p.command,
            "sources": [
                {"path": s.path, "sha256": s.sha256, "command": s.command} for s in p.sources
            ],
        },
        "levels": {},
    }
    for lv in cal.levels:
        doc["levels"][lv.level] = {
            "alpha_s": lv.alpha_s,
            "beta_Bps": lv.beta_Bps,
            "ranges": [
                {"min_size_bytes": r.min_size_bytes, "alpha_s": r.alpha_s, "beta_Bps": r.beta_Bps}
                for r in lv.ranges
            ],
            "fit": {
                "model": "T = 2(n-1)*alpha + 2(n-1)/n * S/beta",
                "weighting": "relative",
                "min_size_bytes": lv.fit_error.min_size_bytes,
                "points": lv.fit_error.points,
                "busbw_error_median_pct": _finite(lv.fit_error.median_pct),
                "busbw_error_max_pct": _finite(lv.fit_error.max_pct),
                "line_busbw_error_median_pct": _finite(lv.line_fit_error.median_pct),
                "line_busbw_error_max_pct": _finite(lv.line_fit_error.max_pct),
            },
            "table": {
                "columns": _Flow(TABLE_COLUMNS),
                "rows": [
                    _Flow([m.size_bytes, m.time_s, m.algbw, m.busbw, m.world_size]) for m in lv.table
                ],
            },
        }
    if cal.compute is not None:
        c = cal.compute
        doc["compute"] = {
            "parameters": c.parameters,
            "batch_size": c.batch_size,
            "forward_s": c.forward_s,
            "backward_s": c.backward_s,
            "per_rank": [
                {"rank": r.rank, "forward_s": r.forward_s, "backward_s": r.backward_s}
                for r in c.per_rank
            ],
        }
    return doc


class _Flow(list):
    """A list written in YAML flow style ([a, b, c]): one table row per line."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Flow, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def atomic_write_text(path: Union[str, os.PathLike], text: str) -> None:
    """Write `text` to `path` atomically: a temp file in the same folder, then os.replace."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; an output file gets the usual mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def dump_calibration(cal: Calibration) -> str:
    """The calibration as YAML text (table rows one per line)."""
    header = (
        "# commsim calibration: all-reduce alpha/beta per link level + measured table.\n"
        "# Units: bytes, seconds, bytes/s. Format documented in docs/validator.md.\n"
    )
    return header + yaml.dump(calibration_to_dict(cal), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def save_calibration(cal: Calibration, path: Union[str, os.PathLike]) -> None:
    """Write `cal` as YAML to `path` (atomically)."""
    atomic_write_text(path, dump_calibration(cal))


class _Reader:
    """Strict reading of the YAML mapping: every error names the file and the key path."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, expected: str, got: Any) -> CalibrationError:
        return CalibrationError(f"{self.source}: {where}: expected {expected}, got {got!r}")

    def mapping(self, value: Any, where: str, required: Sequence[str], optional: Sequence[str] = ()) -> Mapping:
        if not isinstance(value, Mapping):
            raise self.fail(where, "a mapping", value)
        unknown = [k for k in value if k not in required and k not in optional]
        if unknown:
            allowed = ", ".join(list(required) + list(optional))
            raise CalibrationError(f"{self.source}: {where}: unknown key {unknown[0]!r} (allowed: {allowed})")
        missing = [k for k in required if k not in value]
        if missing:
            raise CalibrationError(f"{self.source}: {where}: missing key {missing[0]!r}")
        return value

    def number(self, value: Any, where: str, minimum: float = 0.0, strict: bool = False) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ok = ok and (value > minimum if strict else value >= minimum)
        if not ok:
            raise self.fail(where, f"a finite number {'>' if strict else '>='} {minimum:g}", value)
        return float(value)

    def integer(self, value: Any, where: str, minimum: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise self.fail(where, f"an integer >= {minimum}", value)
        return int(value)

    def opt_str(self, value: Any, where: str) -> Optional[str]:
        if value is None:
            return None
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise self.fail(where, "a string or null", value)
        return str(value)

    def str_list(self, value: Any, where: str) -> Tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(where, "a list of strings", value)
        return tuple(value)


def calibration_from_dict(doc: Any, source: str = "<calibration>") -> Calibration:
    """Validate a parsed YAML mapping and build the Calibration (CalibrationError on any defect)."""
    r = _Reader(source)
    top = r.mapping(doc, "(top level)", ["format", "provenance", "levels"], ["compute"])
    if top["format"] != FORMAT:
        raise r.fail("format", repr(FORMAT), top["format"])

    pv = r.mapping(
        top["provenance"], "provenance", ["backend", "world_size"],
        ["hostnames", "torch_version", "nccl_version", "gloo_version", "date", "command", "sources"],
    )
    sources = []
    for i, s in enumerate(pv.get("sources") or []):
        where = f"provenance.sources[{i}]"
        s = r.mapping(s, where, ["path"], ["sha256", "command"])
        sources.append(SourceFile(str(s["path"]), r.opt_str(s.get("sha256"), where + ".sha256"),
                                  r.opt_str(s.get("command"), where + ".command")))
    backend = r.opt_str(pv["backend"], "provenance.backend")
    if not backend:
        raise r.fail("provenance.backend", "a non-empty string", pv["backend"])
    prov = Provenance(
        backend=backend,
        world_size=r.integer(pv["world_size"], "provenance.world_size", 1),
        hostnames=r.str_list(pv.get("hostnames") or [], "provenance.hostnames"),
        torch_version=r.opt_str(pv.get("torch_version"), "provenance.torch_version"),
        nccl_version=r.opt_str(pv.get("nccl_version"), "provenance.nccl_version"),
        gloo_version=r.opt_str(pv.get("gloo_version"), "provenance.gloo_version"),
        date=r.opt_str(pv.get("date"), "provenance.date"),
        command=r.opt_str(pv.get("command"), "provenance.command"),
        sources=tuple(sources),
    )

    levels_doc = top["levels"]
    if not isinstance(levels_doc, Mapping) or not levels_doc:
        raise r.fail("levels", f"a non-empty mapping with keys among {', '.join(LEVELS)}", levels_doc)
    levels = []
    for name, body in levels_doc.items():
        where = f"levels.{name}"
        if name not in LEVELS:
            raise r.fail("levels", f"level names among {', '.join(LEVELS)}", name)
        body = r.mapping(body, where, ["alpha_s", "beta_Bps", "table"], ["ranges", "fit"])
        alpha = r.number(body["alpha_s"], where + ".alpha_s")
        beta = r.number(body["beta_Bps"], where + ".beta_Bps", strict=True)
        table = _read_table(r, body["table"], where + ".table")
        ranges = _read_ranges(r, body.get("ranges"), where + ".ranges", alpha, beta, table)
        if "fit" in body:  # informative; recomputed from the parameters and the table
            r.mapping(body["fit"], where + ".fit", [], [
                "model", "weighting", "min_size_bytes", "points", "busbw_error_median_pct",
                "busbw_error_max_pct", "line_busbw_error_median_pct", "line_busbw_error_max_pct"])
        levels.append(make_link(name, alpha, beta, table, ranges))
    if "flat" in levels_doc and len(levels_doc) > 1:
        raise CalibrationError(f"{source}: levels: 'flat' cannot be combined with intra_node/inter_node")

    compute = None
    if top.get("compute") is not None:
        c = r.mapping(top["compute"], "compute", ["parameters", "batch_size", "forward_s", "backward_s"], ["per_rank"])
        per_rank = []
        for i, pr in enumerate(c.get("per_rank") or []):
            w = f"compute.per_rank[{i}]"
            pr = r.mapping(pr, w, ["rank", "forward_s", "backward_s"])
            per_rank.append(RankCompute(r.integer(pr["rank"], w + ".rank", 0),
                                        r.number(pr["forward_s"], w + ".forward_s"),
                                        r.number(pr["backward_s"], w + ".backward_s")))
        compute = ComputeTiming(
            parameters=r.integer(c["parameters"], "compute.parameters", 1),
            batch_size=r.integer(c["batch_size"], "compute.batch_size", 1),
            forward_s=r.number(c["forward_s"], "compute.forward_s"),
            backward_s=r.number(c["backward_s"], "compute.backward_s"),
            per_rank=tuple(per_rank),
        )
    return Calibration(tuple(levels), prov, compute)


def _read_ranges(r: _Reader, doc: Any, where: str, alpha: float, beta: float,
                 table: Tuple[Measurement, ...]) -> Tuple[SizeRange, ...]:
    """Size ranges; absent means one range with the level's alpha/beta from the smallest size."""
    if doc is None:
        return (SizeRange(min(m.size_bytes for m in table), alpha, beta),)
    if not isinstance(doc, list) or not doc:
        raise r.fail(where, "a non-empty list of {min_size_bytes, alpha_s, beta_Bps}", doc)
    out = []
    for i, item in enumerate(doc):
        w = f"{where}[{i}]"
        item = r.mapping(item, w, ["min_size_bytes", "alpha_s", "beta_Bps"])
        out.append(SizeRange(r.integer(item["min_size_bytes"], w + ".min_size_bytes", 1),
                             r.number(item["alpha_s"], w + ".alpha_s"),
                             r.number(item["beta_Bps"], w + ".beta_Bps", strict=True)))
    starts = [x.min_size_bytes for x in out]
    if starts != sorted(set(starts)):
        raise r.fail(where, "ranges in increasing min_size_bytes order", starts)
    return tuple(out)


def _read_table(r: _Reader, doc: Any, where: str) -> Tuple[Measurement, ...]:
    t = r.mapping(doc, where, ["columns", "rows"])
    if t["columns"] != TABLE_COLUMNS:
        raise r.fail(where + ".columns", str(TABLE_COLUMNS), t["columns"])
    rows = t["rows"]
    if not isinstance(rows, list) or not rows:
        raise r.fail(where + ".rows", "a non-empty list of rows", rows)
    out = []
    for i, row in enumerate(rows):
        w = f"{where}.rows[{i}]"
        if not isinstance(row, list) or len(row) != len(TABLE_COLUMNS):
            raise r.fail(w, f"a list of {len(TABLE_COLUMNS)} numbers {TABLE_COLUMNS}", row)
        size = r.integer(row[0], w + "[0] (size_bytes)", 1)
        time = r.number(row[1], w + "[1] (time_s)", strict=True)
        n = r.integer(row[4], w + "[4] (world_size)", 2)
        m = Measurement(size, time, n)
        # the bandwidth columns are for readers; a hand edit that breaks them is caught here
        for col, value, want in ((2, row[2], m.algbw), (3, row[3], m.busbw)):
            got = r.number(value, f"{w}[{col}] ({TABLE_COLUMNS[col]})")
            if abs(got - want) > 1e-6 * want:
                raise r.fail(f"{w}[{col}] ({TABLE_COLUMNS[col]})", f"{want!r} (from size, time, world_size)", value)
        out.append(m)
    keys = [(m.world_size, m.size_bytes) for m in out]
    if keys != sorted(set(keys)):
        raise CalibrationError(f"{r.source}: {where}.rows: rows must be sorted by (world_size, size_bytes) without repeats")
    return tuple(out)


def load_calibration(path: Union[str, os.PathLike]) -> Calibration:
    """Read and validate a calibration YAML file (CalibrationError with a one-line message)."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except OSError as exc:
        raise CalibrationError(f"{source}: cannot read calibration file: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise CalibrationError(f"{source}: not valid YAML{at}") from None
    return calibration_from_dict(doc, source)
