"""What every figure shares: the matplotlib import, the error, figures, files and axes.

Figures are built on ``matplotlib.figure.Figure`` with the Agg canvas, never through pyplot,
so nothing here touches global backend state. A figure is rendered into memory with fixed
metadata and SVG hash salt (the same data give the same bytes), then written with
:func:`commsim.atomic.atomic_write_bytes` (atomically, with the normal umask mode, like the
JSON and CSV outputs).
"""

from __future__ import annotations

import io
import math
import os
import tempfile
from pathlib import Path
from typing import Iterable, List, Sequence, Tuple

try:  # matplotlib is the `plot` extra; the rest of commsim runs without it
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator, PercentFormatter
except ImportError:  # pragma: no cover - exercised only without the extra
    # The figure modules import these names from here; without matplotlib they are None and
    # every entry point stops first at require_matplotlib with a one-line PlotError.
    matplotlib = None
    FigureCanvasAgg = Figure = FixedLocator = FuncFormatter = MaxNLocator = NullLocator = PercentFormatter = None

from commsim.atomic import atomic_write_bytes
from commsim.errors import InputError

FORMATS = ("png", "svg", "pdf")
COLORS = {"compute": "#4C72B0", "comm": "#DD8452", "straggler": "#C44E52", "ideal": "#222222",
          "band": "#9ecae1", "baseline": "#2ca02c"}
DPI = 130


class PlotError(InputError):
    """Nothing to plot, or a plot that cannot be made or written; one line for the CLI."""

    def __init__(self, source: str, message: str, path: str | None = None):
        super().__init__(source, path, message)


def require_matplotlib(source: str) -> None:
    if matplotlib is None:
        raise PlotError(source, "plotting needs matplotlib, which is not installed (from the repository root: pip install -e '.[plot]')")


def _writable_folder(folder: Path, source: str) -> None:
    if not folder.exists():
        raise PlotError(source, f"cannot write the plot: folder {str(folder)!r} does not exist")
    if not folder.is_dir():
        raise PlotError(source, f"cannot write the plot: {str(folder)!r} is not a folder")
    try:
        # A real probe, not os.access: a read-only mount refuses even root, and a quota or a
        # full disk can refuse a new file however the mode bits read.
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise PlotError(source, f"cannot write the plot into {str(folder)!r}: {exc.strerror or exc}") from None


def check_plot_target(path: os.PathLike | str) -> None:
    """Raise :class:`PlotError` unless a plot can be written to `path`: matplotlib installed,
    a .png, .svg or .pdf suffix, an existing folder this process can create files in.

    Called before simulating, so that a bad --plot fails at once, not after the run."""
    path = Path(path)
    require_matplotlib(str(path))
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise PlotError(str(path), f"expected a .png, .svg or .pdf path, got {path.suffix or 'no suffix'!r}")
    if path.is_dir():
        raise PlotError(str(path), "expected a file path for the plot, got a folder")
    _writable_folder(path.parent if str(path.parent) else Path("."), str(path))


def check_plot_folder(folder: os.PathLike | str) -> None:
    """Raise :class:`PlotError` unless matplotlib is there and `folder` is a writable folder."""
    require_matplotlib(str(folder))
    folder = Path(folder)
    if not folder.is_dir():
        raise PlotError(str(folder), "expected a directory (commsim sweep -o DIR), got none there")
    _writable_folder(folder, str(folder))


def figure(width: float, height: float) -> "Figure":
    """A figure with constrained layout: titles, tick labels, colorbars and outside legends
    are moved apart (and the figure's own legend kept inside it)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def render(fig: "Figure", fmt: str) -> bytes:
    """The figure's bytes in `fmt`, with fixed metadata and hash salt: the same data give the same bytes."""
    buf = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else ({"CreationDate": None} if fmt == "pdf" else {"Software": None})
    with matplotlib.rc_context({"svg.hashsalt": "commsim", "svg.fonttype": "none"}):
        fig.savefig(buf, format=fmt, dpi=DPI, metadata=metadata)
    return buf.getvalue()


def write_figure(fig: "Figure", path: Path) -> Path:
    """Render and write one file (format from the suffix); an OSError becomes a PlotError naming the path."""
    path = Path(path)
    data = render(fig, path.suffix.lower().lstrip("."))
    try:
        atomic_write_bytes(path, data)
    except OSError as exc:
        raise PlotError(str(path), f"cannot write the plot: {exc.strerror or exc}") from None
    return path


def save_figure(fig: "Figure", out_dir: Path, stem: str) -> List[Path]:
    """Write ``stem.png`` and ``stem.svg`` into out_dir; return both paths."""
    return [write_figure(fig, Path(out_dir) / f"{stem}.{fmt}") for fmt in ("png", "svg")]


def seconds_unit(values: Iterable[float]) -> Tuple[float, str]:
    """(scale, unit) that shows `values` (seconds) with a few digits: s, ms or µs."""
    top = max([abs(float(v)) for v in values] + [0.0])
    if top >= 1:
        return 1.0, "s"
    if top >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def spans_decades(values: Iterable[float], decades: float = 1.0) -> bool:
    v = [x for x in values if x > 0]
    return bool(v) and max(v) / min(v) >= 10 ** decades


def gpu_axis(ax, counts: Sequence[int]) -> None:
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


# A stacked bar's axis starts at 0 unless its common floor (the compute every bar shares)
# is more than this fraction of the tallest bar: then the parts above it, what the plot is
# for, would be squeezed into the top of the axis.
ZOOM_FLOOR_FRACTION = 0.5


def _nice_floor(value: float, span: float) -> float:
    """`value` rounded down to a round step of about a quarter of `span` (277 -> 270)."""
    step = 10 ** math.floor(math.log10(span / 4)) if span > 0 else 0
    return math.floor(value / step) * step if step else value


def bar_limits(floor: float, top: float) -> Tuple[float, float, bool]:
    """(low, high, zoomed) of a value axis for bars from 0 to at most `top` that all reach
    `floor` or higher: from 0 normally; from a round value a little below the floor when the
    floor is more than ZOOM_FLOOR_FRACTION of `top` (a 20-130 ms range above 310 ms of
    compute then fills the axis instead of its top third)."""
    if top <= 0:
        return 0.0, 1.0, False
    if floor <= ZOOM_FLOOR_FRACTION * top:
        return 0.0, top * 1.06, False
    span = max(top - floor, 0.02 * top)
    return max(0.0, _nice_floor(floor - 0.2 * span, span)), top + 0.08 * span, True


# Panels of bars share one value axis unless their tallest bars differ by more than this
# factor: a shared axis would then flatten the short panels (a 5-20 ms exposed
# communication drawn on a 0-1.2 s axis) to nothing.
SHARED_AXIS_RATIO = 3.0


def share_value_axis(panel_tops: Sequence[float]) -> bool:
    """Whether panels whose tallest bars are `panel_tops` should share one value axis."""
    tops = [t for t in panel_tops if t > 0]
    return not tops or max(tops) <= SHARED_AXIS_RATIO * min(tops)


def panel_grid(fig: "Figure", count: int, ncols: int = 3, sharey: bool = True):
    """`count` axes in rows of `ncols`, the unused cells hidden."""
    ncols = max(1, min(ncols, count))
    nrows = -(-count // ncols)
    axes = fig.subplots(nrows, ncols, sharey=sharey, squeeze=False).ravel()
    for ax in axes[count:]:
        ax.set_visible(False)
    return axes[:count]
