"""Calibration records: what a calibration holds, and the ring model its lines describe.

A calibration records what a real cluster did: for each link level (``intra_node``,
``inter_node``, or a single ``flat`` level when the measurement has no topology to split)
the all-reduce times measured over a size sweep, and the ring alpha-beta model fitted to
them (the fit is in :mod:`commsim.calibration.fit`, predictions in
:mod:`commsim.calibration.prediction`, the YAML format in :mod:`commsim.calibration.file`).

The model (docs/collectives.md): a ring of n ranks takes 2(n-1) steps, each moving
S/n bytes over one hop of latency alpha and bandwidth B:

    T(S, n) = 2(n-1) * alpha + 2(n-1)/n * S / B

Bandwidth conventions are nccl-tests' (doc/PERFORMANCE.md in NVIDIA/nccl-tests):
algbw = S / t, and for all-reduce busbw = algbw * 2(n-1)/n, the rate each hop of a ring must
sustain. So for the ring model busbw tends to B as S grows, and B is what busbw measures.

Quantities are in base units: bytes, seconds, bytes per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

from commsim.calibration.errors import CalibrationError
from commsim.collectives.busbw import algbw, busbw, busbw_factor
from commsim.network.costs import ring_allreduce_time

LEVELS = ("intra_node", "inter_node", "flat")

Number = Union[int, float]


def allreduce_factor(n: int) -> float:
    """All-reduce bus-bandwidth factor 2(n-1)/n (nccl-tests doc/PERFORMANCE.md)."""
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n!r}")
    return busbw_factor("all_reduce", n)


def model_time(alpha_s: float, beta_Bps: float, size: Number, n: int) -> float:
    """Ring all-reduce time of the alpha-beta model: 2(n-1) alpha + 2(n-1)/n S/B (docs/collectives.md);
    the simulator's own formula (commsim.network.costs.ring_allreduce_time), in the calibration's
    argument order."""
    return ring_allreduce_time(float(size), n, alpha_s, beta_Bps)


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
    # ranks on each node, node 0 first (a job measured across hosts; () unknown)
    ranks_per_node: Tuple[int, ...] = ()


@dataclass(frozen=True)
class Calibration:
    """A complete calibration: link levels (in file order), optional compute timing, provenance."""

    levels: Tuple[LinkCalibration, ...]
    provenance: Provenance
    compute: Optional[ComputeTiming] = None
    # the physical fit (commsim.calibration.physical_fit.PhysicalFit), when the file has one:
    # a calibration of physical constants that predicts other scales; typed loosely so that
    # this record does not import the fitting code
    physical: Optional[Any] = None

    def __post_init__(self) -> None:
        names = [lv.level for lv in self.levels]
        if not names and self.physical is None:
            raise ValueError("a calibration needs at least one link level or a physical fit")
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
    if not names:
        raise CalibrationError("calibration has no link level, only a physical fit: predict with "
                               "commsim collective --calibration CAL --nodes N --gpus-per-node G")
    if len(names) == 1:
        return names[0]
    return "inter_node" if "inter_node" in names else names[0]
