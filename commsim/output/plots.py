"""Plots of sweeps, single runs, collectives and validations (PNG and SVG).

The only module of commsim that imports matplotlib. Figures are built on
``matplotlib.figure.Figure`` with the Agg canvas, never through pyplot, so nothing here
touches global backend state; files are written atomically and with fixed metadata and
SVG hash salt, so the same data give byte-identical files.

What ``plot_directory`` draws is chosen by what the sweep varied:

- GPU count varied (``world_size`` takes several values): step time stacked into compute,
  exposed communication and straggler cost, with the ideal (compute-only) line; scaling
  efficiency with one line per combination of the other swept values and the knee where it
  first falls below the threshold;
- GPU count and a straggler key (``stragglers...``) varied: a slowdown heatmap;
- GPU count fixed: the stacked step time over the swept values;
- a link (``cluster.intra_node``/``cluster.inter_node``) varied, or a calibration given:
  predicted all-reduce busbw vs message size, the calibration's measured points overlaid;
- ``commsim validate`` JSON files given or found: predicted vs measured step time.
"""

from __future__ import annotations

import importlib

import itertools
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

try:  # matplotlib is the `plot` extra; the rest of commsim runs without it
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator, PercentFormatter
except ImportError:  # pragma: no cover - exercised only without the extra
    matplotlib = None

from commsim.errors import ScenarioError

GPU_KEYS = ("cluster.nodes", "cluster.gpus_per_node")
LINK_PREFIXES = ("cluster.intra_node", "cluster.inter_node")
STRAGGLER_PREFIX = "stragglers"
MAX_PANELS = 12
COLORS = {"compute": "#4C72B0", "comm": "#DD8452", "straggler": "#C44E52", "ideal": "#222222"}


class PlotError(ScenarioError):
    """Nothing to plot, or an input that cannot be plotted; one line for the CLI."""

    def __init__(self, source: str, message: str):
        self.source, self.path, self.message = source, None, message
        Exception.__init__(self, f"{source}: {message}")


# ---------------------------------------------------------------------------------------
# Figures and files
# ---------------------------------------------------------------------------------------


def _require_matplotlib(source: str) -> None:
    if matplotlib is None:
        raise PlotError(source, "plotting needs matplotlib, which is not installed (pip install 'commsim[plot]')")


def _figure(width: float, height: float) -> "Figure":
    # constrained layout moves titles, tick labels, colorbars and outside legends apart
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _atomic_savefig(fig: "Figure", path: Path, fmt: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            # Fixed metadata and hash salt: the same data give the same bytes.
            metadata = {"Date": None} if fmt == "svg" else {"Software": None}
            with matplotlib.rc_context({"svg.hashsalt": "commsim", "svg.fonttype": "none"}):
                fig.savefig(fh, format=fmt, dpi=130, metadata=metadata)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def save_figure(fig: "Figure", out_dir: Path, stem: str) -> List[Path]:
    """Write ``stem.png`` and ``stem.svg`` into out_dir; return both paths."""
    paths = []
    for fmt in ("png", "svg"):
        path = Path(out_dir) / f"{stem}.{fmt}"
        _atomic_savefig(fig, path, fmt)
        paths.append(path)
    return paths


def _spans_decades(values: Iterable[float], decades: float = 1.0) -> bool:
    v = [x for x in values if x > 0]
    return bool(v) and max(v) / min(v) >= 10 ** decades


def _gpu_axis(ax, counts: Sequence[int]) -> None:
    """GPU counts on a log2 axis when they span a factor of 8 or more, ticks at the counts."""
    counts = sorted(set(int(c) for c in counts))
    if len(counts) > 1 and counts[-1] / counts[0] >= 8:
        ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(counts))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{int(round(x)):,}"))
    if len(counts) > 8:
        ax.tick_params(axis="x", labelrotation=45)
    ax.set_xlabel("GPUs (world size)")


def _short_key(key: str) -> str:
    """cluster.inter_node.bandwidth -> inter_node.bandwidth: enough to tell keys apart in a label."""
    parts = key.split(".")
    return ".".join(parts[-2:]) if len(parts) > 2 else key


def _value_text(value: Any) -> str:
    """A swept value as a short label: `jitter cv=0.05` for a straggler, `none` for []."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        rest = ", ".join(f"{k}={_value_text(v)}" for k, v in value.items() if k != "kind")
        return f"{value['kind']} {rest}".strip() if "kind" in value else rest
    if isinstance(value, list):
        return "; ".join(_value_text(v) for v in value) if value else "none"
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value, separators=(",", ":"), default=str)


def _seconds_unit(values: Iterable[float]) -> Tuple[float, str]:
    top = max([abs(v) for v in values] + [0.0])
    if top >= 1:
        return 1.0, "s"
    if top >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


# ---------------------------------------------------------------------------------------
# Sweep results
# ---------------------------------------------------------------------------------------


REQUIRED_COLUMNS = ("world_size", "step_time_s.mean", "baseline_step_time_s", "compute_time_s", "scaling_efficiency")


class SweepTable:
    """results.json of a sweep: the grid (what was varied) and the finished rows."""

    def __init__(self, doc: Mapping[str, Any], source: str):
        self.source = source
        self.meta = doc
        self.grid: Dict[str, List[Any]] = dict(doc.get("grid", {}))
        self.rows: List[Dict[str, Any]] = list(doc.get("rows", []))
        if not self.rows:
            raise PlotError(source, "no finished points to plot")
        for i, row in enumerate(self.rows):
            missing = [k for k in REQUIRED_COLUMNS if not isinstance(row, dict) or k not in row]
            if missing:
                raise PlotError(source, f"expected commsim sweep rows with {', '.join(REQUIRED_COLUMNS)}; "
                                        f"row {i} lacks {', '.join(missing)}")
        if not isinstance(self.grid, dict) or not all(isinstance(v, list) for v in self.grid.values()):
            raise PlotError(source, "expected a grid mapping each swept key to its list of values")

    @classmethod
    def load(cls, path: Path) -> "SweepTable":
        try:
            doc = json.loads(Path(path).read_text())
        except OSError as exc:
            raise PlotError(str(path), f"cannot read: {exc.strerror}") from None
        except ValueError as exc:
            raise PlotError(str(path), f"expected the results.json of commsim sweep, got invalid JSON ({exc})") from None
        if not isinstance(doc, dict) or "rows" not in doc:
            raise PlotError(str(path), "expected the results.json of commsim sweep (with rows), got something else")
        return cls(doc, str(path))

    def varied(self) -> List[str]:
        """Grid keys that take more than one value."""
        return [k for k, v in self.grid.items() if len(v) > 1]

    def gpu_counts(self) -> List[int]:
        return sorted({int(r["world_size"]) for r in self.rows})

    def other_keys(self, exclude: Sequence[str] = ()) -> List[str]:
        """Varied keys other than the ones that set the GPU count and those excluded."""
        return [k for k in self.varied() if k not in GPU_KEYS and k not in exclude]

    def groups(self, keys: Sequence[str]) -> List[Tuple[Tuple[Any, ...], List[Dict[str, Any]]]]:
        """Rows grouped by their values of `keys`, groups in grid order of those values."""
        order = [self.grid[k] for k in keys]
        out = []
        for combo in itertools.product(*order):
            rows = [r for r in self.rows if all(_same(r.get(k), v) for k, v in zip(keys, combo))]
            if rows:
                out.append((combo, rows))
        return out


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _group_label(keys: Sequence[str], combo: Sequence[Any], with_keys: bool = True) -> str:
    if len(keys) == 1 or not with_keys:
        return ", ".join(_value_text(v) for v in combo)
    return ", ".join(f"{_short_key(k)}={_value_text(v)}" for k, v in zip(keys, combo))


def _by_gpus(rows: Sequence[Mapping[str, Any]]) -> List[Mapping[str, Any]]:
    """One row per GPU count (the first in grid order when two layouts give the same count)."""
    seen: Dict[int, Mapping[str, Any]] = {}
    for r in rows:
        seen.setdefault(int(r["world_size"]), r)
    return [seen[k] for k in sorted(seen)]


def _truncation_note(table: SweepTable, keys: Sequence[str]) -> str:
    total = len(table.groups(keys))
    return f" (first {MAX_PANELS} of {total} combinations)" if total > MAX_PANELS else ""


def _panel_grid(fig: "Figure", count: int, sharey: bool = True):
    ncols = min(3, count)
    nrows = math.ceil(count / ncols)
    axes = fig.subplots(nrows, ncols, sharey=sharey, squeeze=False).ravel()
    for ax in axes[count:]:
        ax.set_visible(False)
    return axes[:count]


def _stacked_bars(ax, labels: Sequence[str], rows: Sequence[Mapping[str, Any]], scale: float, unit: str,
                  legend: bool, ymax: float) -> None:
    x = np.arange(len(rows))
    compute = np.array([r["compute_time_s"] for r in rows]) * scale
    # A straggler-free point has no straggler cost; jitter can make it a hair negative: clip,
    # the bar's top is the mean step time either way.
    comm = np.clip(np.array([r["exposed_comm_s"] for r in rows]) * scale, 0, None)
    strag = np.clip(np.array([r["straggler_cost_s"] for r in rows]) * scale, 0, None)
    ax.bar(x, compute, color=COLORS["compute"], label="compute")
    ax.bar(x, comm, bottom=compute, color=COLORS["comm"], label="exposed communication")
    ax.bar(x, strag, bottom=compute + comm, color=COLORS["straggler"], label="straggler cost")
    ax.plot(x, compute, color=COLORS["ideal"], linestyle="--", marker="_", markersize=14,
            label="ideal (compute only)")
    ax.set_xticks(x, labels)
    if len(labels) > 6 or max((len(s) for s in labels), default=0) > 8:
        ax.tick_params(axis="x", labelrotation=45)
    ax.set_ylabel(f"step time ({unit})")
    ax.grid(axis="y", alpha=0.3)
    ax.set_ylim(0, ymax * scale * 1.06)
    if legend:
        # One legend for the figure, outside the panels, where it cannot cover a bar.
        handles, names = ax.get_legend_handles_labels()
        ax.figure.legend(handles, names, loc="outside lower center", ncols=4, fontsize="small")


def _top(rows: Sequence[Mapping[str, Any]]) -> float:
    """The tallest stacked bar over all panels (shared y axis)."""
    return max(r["compute_time_s"] + max(r["exposed_comm_s"], 0) + max(r["straggler_cost_s"], 0) for r in rows)


def plot_step_breakdown(table: SweepTable, out_dir: Path) -> List[Path]:
    """Stacked step time (compute / exposed comm / straggler cost) vs GPU count, ideal line."""
    others = table.other_keys()
    groups = table.groups(others)[:MAX_PANELS]
    fig = _figure(5.2 * min(3, len(groups)) + 0.6, 4.2 * math.ceil(len(groups) / 3))
    axes = _panel_grid(fig, len(groups))
    scale, unit = _seconds_unit(r["step_time_s.mean"] for r in table.rows)
    for i, (ax, (combo, rows)) in enumerate(zip(axes, groups)):
        rows = _by_gpus(rows)
        _stacked_bars(ax, [f"{int(r['world_size']):,}" for r in rows], rows, scale, unit, legend=i == 0,
                      ymax=_top(table.rows))
        ax.set_xlabel("GPUs (world size)")
        if others:
            ax.set_title(_group_label(others, combo) if len(others) > 1
                         else f"{_short_key(others[0])} = {_value_text(combo[0])}", fontsize="medium")
    fig.suptitle("Step time by GPU count: where it goes" + _truncation_note(table, others))
    return save_figure(fig, out_dir, "step_time_breakdown")


def plot_breakdown_by_key(table: SweepTable, key: str, out_dir: Path) -> List[Path]:
    """Stacked step time over the values of one swept key (GPU count fixed)."""
    others = table.other_keys(exclude=(key,))
    groups = table.groups(others)[:MAX_PANELS]
    fig = _figure(5.2 * min(3, len(groups)) + 0.6, 4.2 * math.ceil(len(groups) / 3))
    axes = _panel_grid(fig, len(groups))
    scale, unit = _seconds_unit(r["step_time_s.mean"] for r in table.rows)
    for i, (ax, (combo, rows)) in enumerate(zip(axes, groups)):
        ordered = [r for v in table.grid[key] for r in rows if _same(r.get(key), v)]
        _stacked_bars(ax, [_value_text(r[key]) for r in ordered], ordered, scale, unit, legend=i == 0,
                      ymax=_top(table.rows))
        ax.set_xlabel(key)
        if others:
            ax.set_title(_group_label(others, combo), fontsize="medium")
    gpus = table.gpu_counts()
    fig.suptitle(f"Step time by {key} ({gpus[0]:,} GPUs)")
    return save_figure(fig, out_dir, f"step_time_by_{key.replace('.', '_').replace('[', '_').replace(']', '')}")


def knee(gpus: Sequence[int], efficiency: Sequence[float], threshold: float) -> Optional[int]:
    """The first GPU count (ascending) at which the efficiency is below the threshold."""
    for n, e in sorted(zip(gpus, efficiency)):
        if e < threshold:
            return int(n)
    return None


def plot_scaling_efficiency(table: SweepTable, out_dir: Path, threshold: float = 0.85) -> List[Path]:
    """Scaling efficiency vs GPU count, one line per other swept value.

    With two or more other swept keys, one panel per value of the first of them and one line
    per combination of the rest, so that no panel holds more than a handful of lines."""
    others = table.other_keys()
    panel_keys, line_keys = (others[:1], others[1:]) if len(others) >= 2 else ([], others)
    panels = table.groups(panel_keys)[:MAX_PANELS]
    lines_per_panel = max(len(table.groups(line_keys)), 1)
    ncols = min(3, len(panels))
    fig = _figure(max(7.6, 5.4 * ncols), (4.6 + 0.22 * lines_per_panel) * math.ceil(len(panels) / ncols))
    axes = _panel_grid(fig, len(panels))
    lowest = min(float(r["scaling_efficiency"]) for r in table.rows)
    for i, (ax, (panel_combo, panel_rows)) in enumerate(zip(axes, panels)):
        markers = itertools.cycle("osD^v<>ph")
        for combo, rows in _subgroups(table, line_keys, panel_rows):
            rows = _by_gpus(rows)
            n = [int(r["world_size"]) for r in rows]
            eff = [float(r["scaling_efficiency"]) for r in rows]
            at = knee(n, eff, threshold)
            where = f"below {threshold:.0%} from {at:,} GPUs" if at else f"≥ {threshold:.0%} throughout"
            name = _group_label(line_keys, combo, with_keys=False) if line_keys else "efficiency"
            (line,) = ax.plot(n, eff, marker=next(markers), label=f"{name}: {where}")
            if at:
                # The knee: a ring around the first point below the threshold; its text is in the
                # legend, where the labels of several lines cannot overlap.
                ax.plot([at], [eff[n.index(at)]], marker="o", markersize=15, markerfacecolor="none",
                        color=line.get_color(), markeredgewidth=1.8, linestyle="none")
        # Named in the legend, not written on the plot, where a point could sit under the text.
        ax.axhline(threshold, color="#888888", linestyle="--", linewidth=1, label=f"{threshold:.0%} threshold")
        _gpu_axis(ax, table.gpu_counts())
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(max(0.0, min(lowest, threshold) - 0.08), 1.02)
        if i % ncols == 0:  # the panels of a row share the y axis
            ax.set_ylabel("scaling efficiency (compute / step time)")
        ax.grid(alpha=0.3)
        title = f"{_short_key(panel_keys[0])} = {_value_text(panel_combo[0])}" if panel_keys else None
        if title:
            ax.set_title(title, fontsize="medium")
        legend_title = ", ".join(_short_key(k) for k in line_keys) if line_keys else None
        ax.legend(title=legend_title, loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize="small",
                  title_fontsize="small")
    fig.suptitle(f"Scaling efficiency vs GPU count (circled: the knee, the first GPU count below {threshold:.0%})")
    return save_figure(fig, out_dir, "scaling_efficiency")


def _subgroups(table: SweepTable, keys: Sequence[str], rows: Sequence[Dict[str, Any]]):
    """`rows` grouped by their values of `keys`, in grid order."""
    out = []
    for combo in itertools.product(*[table.grid[k] for k in keys]):
        sub = [r for r in rows if all(_same(r.get(k), v) for k, v in zip(keys, combo))]
        if sub:
            out.append((combo, sub))
    return out


def plot_straggler_heatmap(table: SweepTable, severity_key: str, out_dir: Path) -> List[Path]:
    """Slowdown over (straggler severity x GPU count), one heatmap per other combination."""
    others = table.other_keys(exclude=(severity_key,))
    groups = table.groups(others)[:MAX_PANELS]
    gpus = table.gpu_counts()
    severities = table.grid[severity_key]
    fig = _figure(1.0 + min(3, len(groups)) * max(4.2, 0.7 * len(gpus) + 1.6),
                  0.8 + math.ceil(len(groups) / 3) * max(3.2, 0.45 * len(severities) + 1.4))
    axes = _panel_grid(fig, len(groups), sharey=False)
    values = np.array([float(r["slowdown"]) for r in table.rows])
    vmin, vmax = 1.0, max(1.0 + 1e-9, float(values.max()))
    image = None
    for ax, (combo, rows) in zip(axes, groups):
        grid = np.full((len(severities), len(gpus)), np.nan)
        for r in rows:
            i = next(i for i, s in enumerate(severities) if _same(r.get(severity_key), s))
            j = gpus.index(int(r["world_size"]))
            if np.isnan(grid[i, j]):
                grid[i, j] = float(r["slowdown"])
        image = ax.imshow(grid, origin="lower", aspect="auto", cmap="magma_r", vmin=vmin, vmax=vmax)
        ax.set_xticks(range(len(gpus)), [f"{g:,}" for g in gpus])
        ax.set_yticks(range(len(severities)), [_value_text(s) for s in severities])
        ax.set_xlabel("GPUs (world size)")
        ax.set_ylabel(severity_key)
        if len(gpus) > 6:
            ax.tick_params(axis="x", labelrotation=45)
        if grid.size <= 120:
            for (i, j), v in np.ndenumerate(grid):
                if not np.isnan(v):
                    dark = (v - vmin) / (vmax - vmin) > 0.5
                    ax.text(j, i, f"{v:.2f}×", ha="center", va="center", fontsize="small",
                            color="white" if dark else "black")
        if others:
            ax.set_title(_group_label(others, combo), fontsize="medium")
    fig.colorbar(image, ax=list(axes), label="slowdown (mean step time / straggler-free)")
    fig.suptitle(f"Straggler sensitivity: slowdown by {severity_key} and GPU count" + _truncation_note(table, others))
    return save_figure(fig, out_dir, "straggler_heatmap")


# ---------------------------------------------------------------------------------------
# Collective busbw vs message size
# ---------------------------------------------------------------------------------------


def predicted_busbw(cluster, sizes: np.ndarray) -> np.ndarray:
    """Predicted all-reduce busbw (bytes/s) of the node-major ring over `cluster`, per size.

    The engine's own model: per-hop links from :func:`commsim.scenario.topology.ring_hop_links`, step
    times from :func:`commsim.collectives.ring_closed_form.hop_times`, every rank launching at 0 through the ring's
    max-plus recurrence (:class:`commsim.collectives.ring_closed_form.RingAllReduce`, DESIGN.md); T is the last finish
    and busbw = S/T * 2(n-1)/n (nccl-tests doc/PERFORMANCE.md)."""
    from commsim.collectives.busbw import busbw
    from commsim.scenario.topology import ring_hop_links
    from commsim.collectives.ring_closed_form import RingAllReduce, hop_times

    n = cluster.world_size
    if n < 2:
        return np.full(len(sizes), np.nan)
    alpha, bandwidth = ring_hop_links(cluster)
    launch = np.zeros(n)
    t = np.array([RingAllReduce(hop_times(float(s), alpha, bandwidth)).finish_times(launch).max()
                  for s in sizes])
    return np.array([busbw("all_reduce", float(s), float(ti), n) for s, ti in zip(sizes, t)])


def _calibration_points(path: Path) -> List[Tuple[str, np.ndarray, np.ndarray]]:
    """(label, size_bytes, busbw) per link level and world size of a calibration's measured table.

    The calibration format belongs to commsim.calibration.model; without that module the overlay is
    skipped (an empty list)."""
    try:
        # import_module, not "from commsim import calibration": it goes through sys.modules
        # (where tests stand in a fake or a missing module) even once the real one is loaded
        cal_mod = importlib.import_module("commsim.calibration.file")
    except ImportError:
        return []
    cal = cal_mod.load_calibration(path)
    out = []
    for level in getattr(cal, "levels", ()):
        by_n: Dict[int, List[Tuple[float, float]]] = {}
        for m in getattr(level, "table", ()):
            bw = getattr(m, "busbw", None)
            bw = bw() if callable(bw) else bw
            if bw is None or not m.size_bytes:
                continue
            by_n.setdefault(int(getattr(m, "world_size", 0)), []).append((float(m.size_bytes), float(bw)))
        for n, pts in sorted(by_n.items()):
            pts.sort()
            label = f"measured: {level.level}" + (f", {n} ranks" if n else "")
            out.append((label, np.array([p[0] for p in pts]), np.array([p[1] for p in pts])))
    return out


def plot_busbw(curves: Sequence[Tuple[str, Any]], out_dir: Path, calibration: Optional[Path] = None,
               sizes: Optional[np.ndarray] = None) -> List[Path]:
    """Predicted busbw vs message size, one curve per (label, Cluster); measured points of a
    calibration overlaid when given (and commsim.calibration.model is available)."""
    measured = _calibration_points(calibration) if calibration is not None else []
    if sizes is None:
        # 8 B .. 4 GiB doubling, widened to every measured size so the curves cover the points
        lo, hi = 3, 32
        for _, s, _ in measured:
            lo, hi = min(lo, int(np.floor(np.log2(s.min())))), max(hi, int(np.ceil(np.log2(s.max()))))
        sizes = 2.0 ** np.arange(lo, hi + 1)
    fig = _figure(8.8, 4.8)
    ax = fig.add_subplot()
    for label, cluster in curves:
        ax.plot(sizes, predicted_busbw(cluster, sizes) / 1e9, label=f"predicted: {label}")
    for (label, s, bw), marker in zip(measured, itertools.cycle("o^sDv")):
        ax.plot(s, bw / 1e9, linestyle="none", marker=marker, markerfacecolor="none", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(FixedLocator([2.0 ** k for k in range(3, int(np.log2(sizes.max())) + 2, 4)]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _size_text(x)))
    ax.set_xlabel("message size per rank (bytes, binary prefixes)")
    ax.set_ylabel("all-reduce busbw (GB/s)")
    ax.grid(alpha=0.3, which="both")
    title = "All-reduce bus bandwidth vs message size (ring)"
    if calibration is not None and not measured:
        title += "  [calibration overlay skipped: commsim.calibration.model unavailable]"
    ax.set_title(title, fontsize="medium")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return save_figure(fig, out_dir, "busbw_vs_size")


def _size_text(x: float) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= factor:
            return f"{x / factor:g} {unit}"
    return f"{x:g} B"


def _sweep_clusters(table: SweepTable) -> List[Tuple[str, Any]]:
    """The distinct clusters of the sweep's largest GPU count, labelled by their link values."""
    from commsim.sweep.run import Grid, plan_sweep

    meta = table.meta
    grid = Grid(tuple(table.grid), tuple(tuple(v) for v in table.grid.values()))
    points = plan_sweep(meta["scenario"], grid, meta.get("overrides") or (), meta.get("steps"), meta.get("seed"))
    link_keys = [k for k in table.varied() if k.startswith(LINK_PREFIXES)]
    top = max(p.scenario.world_size for p in points)
    curves, seen = [], set()
    for p in points:
        if p.scenario.world_size != top or p.scenario.cluster in seen:
            continue
        seen.add(p.scenario.cluster)
        params = dict(p.params)
        label = _group_label(link_keys, [params[k] for k in link_keys]) if link_keys else "scenario"
        curves.append((f"{label} ({top:,} GPUs)", p.scenario.cluster))
    return curves


# ---------------------------------------------------------------------------------------
# Predicted vs measured (commsim validate JSON)
# ---------------------------------------------------------------------------------------


def _dig(doc: Mapping[str, Any], dotted: str) -> Optional[float]:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def is_validation(doc: Any) -> bool:
    """Does this JSON look like `commsim validate --json` output?"""
    return isinstance(doc, Mapping) and _dig(doc, "measured.step_time_s.mean") is not None \
        and _dig(doc, "predicted.step_time_s.mean") is not None


def plot_validation(files: Sequence[Path], out_dir: Path, band: float = 0.10) -> List[Path]:
    """Predicted vs measured mean (and p95) step time from `commsim validate` JSON files,
    with the ±band error band; and the error of each case."""
    cases = []
    for f in files:
        try:
            doc = json.loads(Path(f).read_text())
        except (OSError, ValueError) as exc:
            raise PlotError(str(f), f"cannot read validate JSON: {exc}") from None
        if not is_validation(doc):
            raise PlotError(str(f), "expected commsim validate JSON with measured.step_time_s.mean and "
                                    "predicted.step_time_s.mean")
        name = str(doc.get("scenario") or Path(f).stem)
        if any(c[0] == name for c in cases):
            name = f"{name} ({Path(f).stem})"
        cases.append((name, _dig(doc, "measured.step_time_s.mean"), _dig(doc, "predicted.step_time_s.mean"),
                      _dig(doc, "measured.step_time_s.p95"), _dig(doc, "predicted.step_time_s.p95")))
    fig = _figure(11.5, 0.8 + max(4.0, 0.32 * len(cases) + 1.5))
    left, right = fig.subplots(1, 2, width_ratios=[1.1, 1])
    allv = [v for c in cases for v in c[1:] if v is not None]
    scale, unit = _seconds_unit(allv)
    lo, hi = min(allv) * scale / 1.3, max(allv) * scale * 1.3
    line = np.geomspace(lo, hi, 50) if _spans_decades(allv) else np.linspace(lo, hi, 50)
    left.fill_between(line, line * (1 - band), line * (1 + band), color="#9ecae1", alpha=0.5,
                      label=f"±{band:.0%} error band")
    left.plot(line, line, color="#444444", linewidth=1, label="predicted = measured")
    markers = itertools.cycle("osD^v<>ph")
    for name, m_mean, p_mean, m_p95, p_p95 in cases:
        (pt,) = left.plot([m_mean * scale], [p_mean * scale], marker=next(markers), linestyle="none", label=name)
        if m_p95 is not None and p_p95 is not None:
            left.plot([m_p95 * scale], [p_p95 * scale], marker=pt.get_marker(), linestyle="none",
                      markerfacecolor="none", markeredgecolor=pt.get_color())
    if _spans_decades(allv):
        left.set_xscale("log")
        left.set_yscale("log")
    left.set_xlim(lo, hi)
    left.set_ylim(lo, hi)
    left.set_xlabel(f"measured step time ({unit})")
    left.set_ylabel(f"predicted step time ({unit})")
    left.set_title("Mean (filled) and p95 (hollow) step time", fontsize="medium")
    left.grid(alpha=0.3)
    left.legend(loc="upper left", fontsize="x-small")
    errors = [(p - m) / m * 100 for _, m, p, _, _ in cases]
    y = np.arange(len(cases))
    right.axvspan(-band * 100, band * 100, color="#9ecae1", alpha=0.5)
    right.barh(y, errors, color=["#4C72B0" if abs(e) <= band * 100 else "#C44E52" for e in errors])
    right.axvline(0, color="#444444", linewidth=1)
    right.set_yticks(y, [c[0] for c in cases], fontsize="small")
    right.invert_yaxis()
    right.set_xlabel("error of predicted mean step time (%)")
    med = float(np.median(np.abs(errors)))
    right.set_title(f"Error per case (median |error| {med:.1f}%)", fontsize="medium")
    right.grid(axis="x", alpha=0.3)
    fig.suptitle("Predicted vs measured step time (commsim validate)")
    return save_figure(fig, out_dir, "predicted_vs_measured")


# ---------------------------------------------------------------------------------------
# A single run (`commsim run --plot PATH`)
# ---------------------------------------------------------------------------------------

RUN_PLOT_FORMATS = ("png", "svg", "pdf")


def plot_run(run_result, summary: Mapping[str, Any], path: os.PathLike | str) -> Path:
    """Step time per step, and the per-rank distribution of waiting time, of one run.

    `run_result` is the :class:`commsim.sim.engine.RunResult` (``step_time``: (steps,), ``rank_wait``:
    (steps, n), the time each rank spent blocked on others), `summary` its ``summarize`` dict.
    The format follows PATH's suffix (.png, .svg or .pdf). Returns the path written."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    _require_matplotlib(str(path))
    if fmt not in RUN_PLOT_FORMATS:
        raise PlotError(str(path), f"expected a .png, .svg or .pdf path, got {path.suffix or 'no suffix'!r}")
    step = np.asarray(run_result.step_time, dtype=float)
    wait = np.asarray(run_result.rank_wait, dtype=float)
    n = wait.shape[1]
    scale, unit = _seconds_unit(np.concatenate([step, wait.ravel()]))
    fig = _figure(11.0, 7.6)
    top, bottom = fig.subfigures(2, 1, height_ratios=[1, 1.1])
    ax = top.subplots()
    steps = np.arange(len(step))
    ax.plot(steps, step * scale, color=COLORS["compute"], linewidth=1.2, marker="." if len(step) <= 200 else None,
            label="step time")
    # Zoom on the step times (and the baseline): the per-step variation is what this panel is
    # for. The ideal line is drawn when it falls in that view, else only named in the legend.
    shown = np.concatenate([step, [summary.get("baseline_step_time_s", step.mean())]]) * scale
    pad = max(0.08 * (shown.max() - shown.min()), 0.01 * shown.max())
    view = (shown.min() - pad, shown.max() + pad)
    refs = [("baseline_step_time_s", "straggler-free baseline", "#2ca02c", "--"),
            ("compute_time_s", "ideal (compute only)", COLORS["ideal"], ":")]
    for key, label, color, style in refs:
        if key in summary:
            value = summary[key] * scale
            note = "" if view[0] <= value <= view[1] else " (below this view)"
            ax.axhline(value, color=color, linestyle=style, linewidth=1.2, label=f"{label}: {value:.4g} {unit}{note}")
    ax.axhline(step.mean() * scale, color=COLORS["straggler"], linewidth=1.2,
               label=f"mean: {step.mean() * scale:.4g} {unit} (slowdown {summary.get('slowdown', float('nan')):.3f}×)")
    ax.set_ylim(*view)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"step time ({unit})")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax.set_title(f"{summary.get('scenario', 'run')}: step time per step ({n:,} ranks)")

    left, right = bottom.subplots(1, 2, width_ratios=[2.2, 1])
    ranks = np.arange(n)
    mean_wait = wait.mean(axis=0) * scale
    lo, hi = np.percentile(wait, [5, 95], axis=0) * scale
    left.fill_between(ranks, lo, hi, step="mid", color="#9ecae1", alpha=0.6, label="5th-95th percentile over steps")
    left.plot(ranks, mean_wait, drawstyle="steps-mid", color=COLORS["compute"], linewidth=1, label="mean over steps")
    top_ranks = [int(t["rank"]) for t in summary.get("stragglers_top", [])]
    if top_ranks:
        text = ", ".join(f"{t['rank']} ({t['fraction']:.0%})" for t in summary["stragglers_top"])
        left.plot(top_ranks, mean_wait[top_ranks], linestyle="none", marker="v", color=COLORS["straggler"],
                  markersize=8, label=f"most often last: rank {text}")
    left.set_xlabel("rank")
    left.set_ylabel(f"waiting time per step ({unit})")
    left.set_xlim(-0.5, n - 0.5)
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    # Not from zero: when communication dominates every rank waits about as long, and the
    # differences between ranks (who waits less: the stragglers) are what this panel is for.
    left.grid(alpha=0.3)
    left.legend(loc="upper left", bbox_to_anchor=(0.0, -0.16), fontsize="small", ncols=1)
    left.set_title("Waiting on other ranks, per rank", fontsize="medium")
    right.hist(mean_wait, bins=min(40, max(5, n // 4)), orientation="horizontal", color=COLORS["compute"])
    right.set_ylim(left.get_ylim())
    right.set_xlabel("ranks")
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.set_ylabel(f"mean waiting time ({unit})")
    right.set_title("Distribution over ranks", fontsize="medium")
    right.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_savefig(fig, path, fmt)
    return path


# ---------------------------------------------------------------------------------------
# Entry point for `commsim plot DIR` and `commsim sweep --plot`
# ---------------------------------------------------------------------------------------


def plot_sweep(table: SweepTable, out_dir: Path, threshold: float = 0.85,
               calibration: Optional[Path] = None) -> List[Path]:
    """Every plot the sweep's varied keys call for (see the module docstring)."""
    written: List[Path] = []
    varied = table.varied()
    gpus = table.gpu_counts()
    severity = next((k for k in varied if k.startswith(STRAGGLER_PREFIX)), None)
    if len(gpus) > 1:
        written += plot_step_breakdown(table, out_dir)
        written += plot_scaling_efficiency(table, out_dir, threshold)
        if severity is not None:
            written += plot_straggler_heatmap(table, severity, out_dir)
    else:
        for key in [k for k in varied if k not in GPU_KEYS][:1]:
            written += plot_breakdown_by_key(table, key, out_dir)
    if any(k.startswith(LINK_PREFIXES) for k in varied) or calibration is not None:
        try:
            curves = _sweep_clusters(table)
        except (ScenarioError, KeyError) as exc:
            # the scenario is re-read from the path the sweep was given: moved, edited or
            # relative to another directory, there are no predicted curves to draw from it
            sys.stderr.write(f"commsim: note: predicted busbw curves skipped: cannot re-plan the sweep from "
                             f"{table.meta.get('scenario')!r} ({exc})\n")
            curves = []
        if curves or calibration is not None:
            written += plot_busbw(curves, out_dir, calibration)
    return written


def plot_directory(directory: Path, validations: Sequence[Path] = (), calibration: Optional[Path] = None,
                   threshold: float = 0.85) -> List[Path]:
    """`commsim plot DIR`: sweep plots from DIR/results.json, the validation plot from the given
    files plus any validate JSON in DIR. Returns the files written (PNG and SVG)."""
    directory = Path(directory)
    _require_matplotlib(str(directory))
    if not directory.is_dir():
        raise PlotError(str(directory), "expected a directory (commsim sweep -o DIR), got none there")
    written: List[Path] = []
    results = directory / "results.json"
    if results.exists():
        written += plot_sweep(SweepTable.load(results), directory, threshold, calibration)
    found = []
    for f in sorted(directory.glob("*.json")):
        if f.name == "results.json":
            continue
        try:
            if is_validation(json.loads(f.read_text())):
                found.append(f)
        except (OSError, ValueError):
            continue
    files = list(dict.fromkeys([*validations, *found]))
    if files:
        written += plot_validation(files, directory)
    if not results.exists() and not files and calibration is not None:
        written += plot_busbw([], directory, calibration)
    if not written:
        raise PlotError(str(directory), "nothing to plot: expected results.json from commsim sweep, "
                                        "commsim validate JSON files, or --calibration")
    return written
