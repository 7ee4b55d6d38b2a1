"""Plots of sweeps, single runs, collectives and validations (PNG, SVG, and PDF for a run).

The only package of commsim that imports matplotlib. It only draws: the numbers it shows
come from :mod:`commsim.analysis` (``sweep_table``, ``waiting``, ``busbw_curve``,
``validation_cases``). One module per figure family:

- :mod:`.sweep`: stacked step time, scaling efficiency and its knee, straggler heatmap;
- :mod:`.busbw`: predicted (and measured) all-reduce busbw vs message size;
- :mod:`.validation`: predicted vs measured step time;
- :mod:`.run`: one run's step times and per-rank waiting (`commsim run --plot`);
- :mod:`.directory`: what `commsim plot DIR` and `commsim sweep --plot` draw;
- :mod:`.common`: the figure, file and axis helpers, :class:`PlotError`, and the checks a command
  runs before any work: :func:`check_plot_target` (a run's plot file), :func:`check_plot_folder`
  (a folder to plot into), :func:`require_matplotlib`.
"""

from commsim.analysis.busbw_curve import predicted_busbw
from commsim.analysis.sweep_table import SweepTable, knee

from commsim.output.plots.common import PlotError, check_plot_folder, check_plot_target, require_matplotlib, save_figure
from commsim.output.plots.directory import plot_directory, plot_sweep
from commsim.output.plots.run import plot_run

__all__ = ["PlotError", "SweepTable", "check_plot_folder", "check_plot_target", "knee", "plot_directory",
           "plot_run", "plot_sweep", "predicted_busbw", "require_matplotlib", "save_figure"]
