"""A sweep's results.json as the data its plots draw: rows grouped by the swept values (in
numeric order), the stacked step-time parts, the scaling lines with their knee, the
straggler-sensitivity grids, and the labels that name them.

Nothing here draws; :mod:`commsim.output.plots` turns these numbers into figures, so they can
be tested without matplotlib.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from commsim.errors import InputError
from commsim.scenario.schema_cluster import MAX_WORLD_SIZE
from commsim.units import UnitError, describe, parse_number, parse_rate, parse_size, parse_time
from commsim.yamlio import read_regular_bytes

GPU_KEYS = ("cluster.nodes", "cluster.gpus_per_node")
LINK_PREFIXES = ("cluster.intra_node", "cluster.inter_node")
STRAGGLER_PREFIX = "stragglers"
MAX_PANELS = 12
# The most bytes a JSON document read here may hold. A sweep's results.json is a few kB per
# point and a validate report a few kB; far past this a file is something else, and parsing
# it whole would take gigabytes. The plot command reads no JSON file larger either.
MAX_JSON_BYTES = 64 * 1024**2
REQUIRED_COLUMNS = ("world_size", "step_time_s.mean", "baseline_step_time_s", "compute_time_s", "scaling_efficiency")
# Columns the plots read as numbers where a row has them (a row without them draws 0 or nothing).
NUMBER_COLUMNS = REQUIRED_COLUMNS[1:] + ("exposed_comm_s", "straggler_cost_s", "slowdown")

Row = Dict[str, Any]
Combo = Tuple[Any, ...]


class ResultsError(InputError):
    """A results.json that is not a commsim sweep's, or has nothing to plot."""

    def __init__(self, source: str, message: str, path: Optional[str] = None):
        super().__init__(source, path, message)


def _too_big(size: int, source: str, expected: str) -> ResultsError:
    return ResultsError(source, f"is {size:,} bytes, more than the {MAX_JSON_BYTES:,}-byte limit for {expected}")


def read_json_document(path: Path, expected: str) -> Any:
    """The JSON document in `path`; a file that is not regular (reading /dev/zero never ends, a
    FIFO blocks for a writer), holds more than :data:`MAX_JSON_BYTES`, cannot be read or is
    not valid JSON is a ResultsError saying what was `expected` ("the results.json of commsim
    sweep")."""
    source = str(path)
    try:
        raw = read_regular_bytes(path, MAX_JSON_BYTES, expected, lambda message: ResultsError(source, message),
                                 lambda size: _too_big(size, source, expected))
    except OSError as exc:
        raise ResultsError(source, f"cannot read {expected}: {exc.strerror or exc}") from None
    except ValueError:  # os.stat refuses a path with a NUL character
        raise ResultsError(source, f"cannot read {expected}: the path contains a NUL character") from None
    try:
        return json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError included
        raise ResultsError(source, f"expected {expected}, got invalid JSON ({exc})") from None
    except RecursionError:  # json's recursive decoder: arrays or objects nested thousands deep
        raise ResultsError(source, f"expected {expected}, got invalid JSON (nested too deeply)") from None


# ---------------------------------------------------------------------------------------
# Values: labels and numeric order
# ---------------------------------------------------------------------------------------


def value_text(value: Any) -> str:
    """A swept value as a short label: `jitter cv=0.05` for a straggler, `none` for []."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        rest = ", ".join(f"{k}={value_text(v)}" for k, v in value.items() if k != "kind")
        return f"{value['kind']} {rest}".strip() if "kind" in value else rest
    if isinstance(value, list):
        return "; ".join(value_text(v) for v in value) if value else "none"
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value, separators=(",", ":"), default=str)


def short_key(key: str) -> str:
    """cluster.inter_node.bandwidth -> inter_node.bandwidth: enough to tell keys apart in a label."""
    parts = key.split(".")
    return ".".join(parts[-2:]) if len(parts) > 2 else key


def key_value_label(keys: Sequence[str], combo: Sequence[Any]) -> str:
    """`inter_node.bandwidth = 400 Gbps, stragglers[0].cv = 0.05`: every value with its key,
    so that a panel title never is a bare value."""
    return ", ".join(f"{short_key(k)} = {value_text(v)}" for k, v in zip(keys, combo))


# One kind per key: plain numbers, or sizes, rates or times with their units (zero allowed).
_PARSERS: Tuple[Callable[[Any], float], ...] = (
    parse_number,
    lambda v: parse_size(v, allow_zero=True),
    lambda v: parse_rate(v, allow_zero=True),
    lambda v: parse_time(v, allow_zero=True),
)


def _magnitude(value: Any, parser: Callable[[Any], float]) -> Optional[float]:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(parser(value))
        except (UnitError, ValueError, TypeError):
            return None
    return None


def numeric_order(values: Sequence[Any]) -> List[Any]:
    """`values` by magnitude when all of them are numbers or quantities of one kind
    ("1 MB" < "25 MB" < "100 MB", "25 Gbps" < "400 Gbps"); else in the order given.

    Sorted by the quantity, not the text, which would put "100 MB" before "1 MB"."""
    for parser in _PARSERS:
        mags = [_magnitude(v, parser) for v in values]
        if all(m is not None for m in mags):
            order = sorted(range(len(values)), key=lambda i: (mags[i], i))
            return [values[i] for i in order]
    return list(values)


_QUANTITY = re.compile(r"(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)")


def natural_key(name: str) -> Tuple[Tuple[int, float, str], ...]:
    """Sort key of a case name that orders its numbers by value, units included:
    bucket_1MB < bucket_25MB < bucket_100MB < bucket_1GB (text order puts 100MB first)."""
    key: List[Tuple[int, float, str]] = []
    pos = 0
    for m in _QUANTITY.finditer(name):
        if m.start() > pos:
            key.append((0, 0.0, name[pos:m.start()]))
        number, unit = m.group(1), m.group(2)
        magnitude = float(number)
        for parser in _PARSERS[1:]:
            try:
                magnitude = float(parser(f"{number} {unit}")) if unit else magnitude
                break
            except (UnitError, ValueError):
                continue
        else:  # not a unit: the letters are text after the number
            key.append((1, magnitude, ""))
            key.append((0, 0.0, unit))
            pos = m.end()
            continue
        key.append((1, magnitude, ""))
        pos = m.end()
    if pos < len(name):
        key.append((0, 0.0, name[pos:]))
    return tuple(key)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def same_value(a: Any, b: Any) -> bool:
    """Two swept values are the same (values may be lists or mappings)."""
    return _canonical(a) == _canonical(b)


# ---------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------


def _as_float(value: Any) -> Optional[float]:
    """A JSON number as a float, None for anything else (a bool, text, null, an int past float)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:  # a JSON integer of 400 digits
        return None


def _check_numbers(row: Row, source: str, i: int) -> None:
    """The columns the plots turn into numbers are numbers: a hand-edited row's "abc" or null
    ended `commsim plot` in a ValueError/TypeError traceback from int() or float(), and an
    infinity (or 1e308 + 1e308 stacked) in matplotlib's "Axis limits cannot be NaN or Inf"."""
    n = row["world_size"]
    gpus = _as_float(n)
    if gpus is None or not (1 <= gpus <= MAX_WORLD_SIZE and gpus == int(gpus)):
        raise ResultsError(source, f"expected a whole number of GPUs in [1, {MAX_WORLD_SIZE:,}], got {describe(n)}",
                           f"rows[{i}].world_size")
    for column in NUMBER_COLUMNS:  # NaN draws nothing; an infinity fails the axis limits
        value = _as_float(row.get(column, 0.0))
        if value is None or math.isinf(value):
            raise ResultsError(source, f"expected a finite number (or NaN), got {describe(row[column])}",
                               f"rows[{i}].{column}")
    compute, comm, strag = (float(row.get(k, 0.0)) for k in ("compute_time_s", "exposed_comm_s", "straggler_cost_s"))
    if math.isinf(compute + max(comm, 0.0) + max(strag, 0.0)):  # the stacked bar, clipped as breakdown() does
        raise ResultsError(source, "expected compute_time_s + exposed_comm_s + straggler_cost_s (the stacked step "
                                   f"time) to be finite, got {compute!r} + {comm!r} + {strag!r}", f"rows[{i}]")


class SweepTable:
    """results.json of a sweep: the grid (what was varied) and the finished rows."""

    def __init__(self, doc: Mapping[str, Any], source: str):
        self.source = source
        self.meta = doc
        grid = doc.get("grid", {})
        if not isinstance(grid, dict) or not all(isinstance(v, list) for v in grid.values()):
            raise ResultsError(source, "expected a grid mapping each swept key to its list of values", "grid")
        self.grid: Dict[str, List[Any]] = dict(grid)
        self.rows: List[Row] = list(doc.get("rows", []))
        if not self.rows:
            raise ResultsError(source, "no finished points to plot", "rows")
        for i, row in enumerate(self.rows):
            missing = [k for k in REQUIRED_COLUMNS if not isinstance(row, dict) or k not in row]
            if missing:
                raise ResultsError(source, f"expected commsim sweep rows with {', '.join(REQUIRED_COLUMNS)}; "
                                           f"row {i} lacks {', '.join(missing)}", f"rows[{i}]")
            _check_numbers(row, source, i)
        severity = self.straggler_key()
        # the plots group rows by the grid's values and look each row's value up among them
        allowed = {key: {_canonical(v) for v in self.grid[key]} for key in self.varied()}
        for i, row in enumerate(self.rows):
            for key, values in allowed.items():
                if key not in row or _canonical(row[key]) not in values:
                    shown = [value_text(v) for v in self.grid[key][:6]] + (["..."] if len(self.grid[key]) > 6 else [])
                    raise ResultsError(source, f"expected one of the grid's values of {key} ({', '.join(shown)}), "
                                               f"got {describe(row[key]) if key in row else 'none'}",
                                       f"rows[{i}].{key}")
            if severity is not None and "slowdown" not in row:  # what the straggler heatmap draws
                raise ResultsError(source, f"expected a slowdown column (the straggler heatmap's figure, as "
                                           f"{severity} is swept); row {i} lacks it", f"rows[{i}]")

    @classmethod
    def load(cls, path: Path) -> "SweepTable":
        doc = read_json_document(path, "the results.json of commsim sweep")
        if not isinstance(doc, dict) or "rows" not in doc:
            raise ResultsError(str(path), "expected the results.json of commsim sweep (with rows), got something else")
        return cls(doc, str(path))

    def varied(self) -> List[str]:
        """Grid keys that take more than one value."""
        return [k for k, v in self.grid.items() if len(v) > 1]

    def gpu_counts(self) -> List[int]:
        return sorted({int(r["world_size"]) for r in self.rows})

    def other_keys(self, exclude: Sequence[str] = ()) -> List[str]:
        """Varied keys other than the ones that set the GPU count and those excluded."""
        return [k for k in self.varied() if k not in GPU_KEYS and k not in exclude]

    def straggler_key(self) -> Optional[str]:
        """The first varied key under ``stragglers``, if any."""
        return next((k for k in self.varied() if k.startswith(STRAGGLER_PREFIX)), None)

    def link_keys(self) -> List[str]:
        """Varied keys of the cluster's links."""
        return [k for k in self.varied() if k.startswith(LINK_PREFIXES)]

    def values(self, key: str) -> List[Any]:
        """The grid's values of `key` in numeric order (see :func:`numeric_order`)."""
        return numeric_order(self.grid[key])

    def groups(self, keys: Sequence[str], rows: Optional[Sequence[Row]] = None) -> List[Tuple[Combo, List[Row]]]:
        """`rows` (default: all) grouped by their values of `keys`, each key's values in
        numeric order, the last key varying fastest; empty groups left out."""
        rows = self.rows if rows is None else rows
        out = []
        for combo in itertools.product(*[self.values(k) for k in keys]):
            sub = [r for r in rows if all(same_value(r.get(k), v) for k, v in zip(keys, combo))]
            if sub:
                out.append((combo, sub))
        return out

    def truncation_note(self, keys: Sequence[str]) -> str:
        """What a figure says when it shows only the first MAX_PANELS combinations."""
        total = len(self.groups(keys))
        return f" (first {MAX_PANELS} of {total} combinations)" if total > MAX_PANELS else ""


def by_gpus(rows: Sequence[Mapping[str, Any]]) -> List[Mapping[str, Any]]:
    """One row per GPU count, ascending (the first in grid order when two layouts give the same count)."""
    seen: Dict[int, Mapping[str, Any]] = {}
    for r in rows:
        seen.setdefault(int(r["world_size"]), r)
    return [seen[k] for k in sorted(seen)]


# ---------------------------------------------------------------------------------------
# Stacked step time
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Breakdown:
    """Mean step time of some rows, stacked: compute + exposed communication + straggler cost (s).

    A straggler-free point has no straggler cost, and jitter can make it (or the exposed
    communication of a fully hidden all-reduce) a hair negative: the parts are clipped at 0."""

    labels: Tuple[str, ...]
    compute: np.ndarray
    exposed_comm: np.ndarray
    straggler: np.ndarray

    @property
    def top(self) -> np.ndarray:
        return self.compute + self.exposed_comm + self.straggler


def breakdown(rows: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> Breakdown:
    """The stacked parts of each row (``commsim run``'s compute_time_s, exposed_comm_s, straggler_cost_s)."""
    compute = np.array([float(r["compute_time_s"]) for r in rows])
    comm = np.clip(np.array([float(r.get("exposed_comm_s", 0.0)) for r in rows]), 0, None)
    strag = np.clip(np.array([float(r.get("straggler_cost_s", 0.0)) for r in rows]), 0, None)
    return Breakdown(tuple(labels), compute, comm, strag)


def breakdown_by_gpus(rows: Sequence[Mapping[str, Any]]) -> Breakdown:
    """One bar per GPU count, ascending."""
    rows = by_gpus(rows)
    return breakdown(rows, [f"{int(r['world_size']):,}" for r in rows])


def breakdown_by_key(table: SweepTable, key: str, rows: Sequence[Mapping[str, Any]]) -> Breakdown:
    """One bar per value of `key`, in numeric order."""
    ordered = [r for v in table.values(key) for r in rows if same_value(r.get(key), v)]
    return breakdown(ordered, [value_text(r[key]) for r in ordered])


# ---------------------------------------------------------------------------------------
# Scaling efficiency and its knee
# ---------------------------------------------------------------------------------------


def knee(gpus: Sequence[int], efficiency: Sequence[float], threshold: float) -> Optional[int]:
    """The first GPU count (ascending) at which the efficiency is below the threshold."""
    for n, e in sorted(zip(gpus, efficiency)):
        if e < threshold:
            return int(n)
    return None


@dataclass(frozen=True)
class ScalingLine:
    """Scaling efficiency against GPU count for one combination of the other swept values."""

    label: str  # the combination's values ("" when nothing else was swept)
    gpus: Tuple[int, ...]
    efficiency: Tuple[float, ...]
    knee: Optional[int]  # first GPU count below the threshold, None if never

    def knee_text(self, threshold: float) -> str:
        return f"below {threshold:.0%} from {self.knee:,} GPUs" if self.knee else f"≥ {threshold:.0%} throughout"


@dataclass(frozen=True)
class ScalingPanel:
    title: Optional[str]  # the panel key's value with its key; None for a single panel
    line_keys: Tuple[str, ...]
    lines: Tuple[ScalingLine, ...]


def scaling_panels(table: SweepTable, threshold: float) -> List[ScalingPanel]:
    """With two or more other swept keys, one panel per value of the first and one line per
    combination of the rest (so no panel holds more than a handful of lines); else one panel
    with a line per value of the other key. At most MAX_PANELS panels."""
    others = table.other_keys()
    panel_keys, line_keys = (others[:1], others[1:]) if len(others) >= 2 else ([], others)
    panels = []
    for panel_combo, panel_rows in table.groups(panel_keys)[:MAX_PANELS]:
        lines = []
        for combo, rows in table.groups(line_keys, panel_rows):
            rows = by_gpus(rows)
            n = tuple(int(r["world_size"]) for r in rows)
            eff = tuple(float(r["scaling_efficiency"]) for r in rows)
            label = ", ".join(value_text(v) for v in combo)
            lines.append(ScalingLine(label, n, eff, knee(n, eff, threshold)))
        title = key_value_label(panel_keys, panel_combo) if panel_keys else None
        panels.append(ScalingPanel(title, tuple(line_keys), tuple(lines)))
    return panels


# ---------------------------------------------------------------------------------------
# Straggler sensitivity
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlowdownGrid:
    """Slowdown (mean step time / straggler-free) over severity (rows) x GPU count (columns)."""

    title: Optional[str]
    severities: Tuple[str, ...]
    gpus: Tuple[int, ...]
    slowdown: np.ndarray  # (severities, gpus), NaN where no point ran


def slowdown_grids(table: SweepTable, severity_key: str) -> List[SlowdownGrid]:
    """One grid per combination of the other swept values (at most MAX_PANELS)."""
    others = table.other_keys(exclude=(severity_key,))
    gpus = table.gpu_counts()
    severities = table.values(severity_key)
    out = []
    for combo, rows in table.groups(others)[:MAX_PANELS]:
        grid = np.full((len(severities), len(gpus)), np.nan)
        for r in rows:
            i = next(i for i, s in enumerate(severities) if same_value(r.get(severity_key), s))
            j = gpus.index(int(r["world_size"]))
            if np.isnan(grid[i, j]):
                grid[i, j] = float(r["slowdown"])
        out.append(SlowdownGrid(key_value_label(others, combo) if others else None,
                                tuple(value_text(s) for s in severities), tuple(gpus), grid))
    return out
