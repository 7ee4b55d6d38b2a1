"""Plots: the right files for each kind of sweep, real images, deterministic bytes; what the
figures show, read from matplotlib's objects (legends inside the figure, titles that name
their key, axis limits, the waiting split of a run); and the errors of unwritable targets."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.image import imread  # noqa: E402

from commsim.analysis.busbw_curve import RESULTS_KEY, BusbwCurve, calibration_points  # noqa: E402
from commsim.analysis.report import summarize  # noqa: E402
from commsim.analysis.sweep_table import SweepTable  # noqa: E402
from commsim.analysis.validation_cases import load_cases  # noqa: E402
from commsim.errors import InputError  # noqa: E402
from commsim.output import plots  # noqa: E402
from commsim.output.plots import busbw as busbw_fig  # noqa: E402
from commsim.output.plots import common  # noqa: E402
from commsim.output.plots import run as run_fig  # noqa: E402
from commsim.output.plots import sweep as sweep_fig  # noqa: E402
from commsim.output.plots import validation as validation_fig  # noqa: E402
from commsim.scenario.loader import load_scenario  # noqa: E402
from commsim.sim.engine import simulate  # noqa: E402
from commsim.sweep.run import combine_grids, parse_grid_option, run_sweep  # noqa: E402
from tests.unit.analysis.test_validation_cases import validation_json  # noqa: E402
from tests.unit.sweep.test_sweep import TINY  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def grid(*options):
    return combine_grids([parse_grid_option(o) for o in options])


def assert_image(path: Path):
    """A real, non-blank PNG (and its SVG twin)."""
    assert path.stat().st_size > 5_000
    img = imread(path)
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 200
    assert img[..., :3].std() > 0.05  # not a blank canvas
    svg = path.with_suffix(".svg")
    assert svg.stat().st_size > 5_000 and svg.read_text().lstrip().startswith("<?xml")


def assert_nothing_clipped(fig, legend=True):
    """Everything drawn (legends, titles, labels, tick labels, texts) lies inside the figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.get_axes() if ax.get_legend() is not None]
    assert bool(legends) == legend
    box = fig.bbox
    for legend in legends:
        ext = legend.get_window_extent(renderer)
        assert ext.x0 >= box.x0 - 1 and ext.x1 <= box.x1 + 1 and ext.y0 >= box.y0 - 1 and ext.y1 <= box.y1 + 1, \
            f"legend at {ext} outside the figure {box}"
    tight = fig.get_tightbbox(renderer)  # inches, over every drawn artist
    w, h = fig.get_size_inches()
    assert tight.x0 >= -0.02 and tight.y0 >= -0.02 and tight.x1 <= w + 0.02 and tight.y1 <= h + 0.02, \
        f"drawn content {tight} outside the {w}x{h} in figure"


def titles(fig):
    return [ax.get_title() for ax in fig.get_axes() if ax.get_visible() and ax.get_title()]


def row(world, key_values, compute=0.31, comm=0.1, strag=0.02, slowdown=1.05):
    step = compute + comm + strag
    return {"world_size": world, "step_time_s.mean": step, "baseline_step_time_s": compute + comm,
            "compute_time_s": compute, "exposed_comm_s": comm, "straggler_cost_s": strag,
            "scaling_efficiency": compute / step, "slowdown": slowdown, **key_values}


def table(grid_doc, rows):
    return SweepTable({"grid": grid_doc, "rows": rows}, "results.json")


# ---------------------------------------------------------------------------------------
# Files


def test_gpu_count_network_and_jitter_sweep(scenario, tmp_path):
    out = tmp_path / "out"
    run_sweep(scenario, grid("cluster.nodes=1,2,4,8", "cluster.inter_node.bandwidth=10 Gbps,100 Gbps",
                             "stragglers[0].cv=0.01,0.2"), out, jobs=1)
    written = plots.plot_directory(out)
    names = sorted(p.name for p in written)
    assert names == sorted(f"{stem}.{ext}" for stem in
                           ["step_time_breakdown", "scaling_efficiency", "straggler_heatmap", "busbw_vs_size"]
                           for ext in ("png", "svg"))
    for p in written:
        if p.suffix == ".png":
            assert_image(p)
    svg = (out / "scaling_efficiency.svg").read_text()
    assert "threshold" in svg and ("below 85% from" in svg or "throughout" in svg)


def test_plots_are_byte_identical_for_the_same_results(scenario, tmp_path):
    out = tmp_path / "out"
    run_sweep(scenario, grid("cluster.nodes=1,2,4", "stragglers[0].cv=0.01,0.2"), out, jobs=1)
    first = {p.name: p.read_bytes() for p in plots.plot_directory(out)}
    second = {p.name: p.read_bytes() for p in plots.plot_directory(out)}
    assert first == second


def test_fixed_gpu_count_plots_breakdown_over_the_swept_key(scenario, tmp_path):
    out = tmp_path / "out"
    run_sweep(scenario, grid("ddp.bucket_cap=1 MB,4 MB,16 MB"), out, jobs=1)
    written = plots.plot_directory(out)
    assert sorted(p.name for p in written) == ["step_time_by_ddp_bucket_cap.png", "step_time_by_ddp_bucket_cap.svg"]
    assert_image(written[0])


def test_plot_files_get_the_umask_mode_like_json_and_csv(scenario, tmp_path):
    out = tmp_path / "out"
    run_sweep(scenario, grid("cluster.nodes=1,2"), out, jobs=1)
    old = os.umask(0o022)
    try:
        written = plots.plot_directory(out)
    finally:
        os.umask(old)
    assert {stat.S_IMODE(p.stat().st_mode) for p in written} == {0o644}
    assert stat.S_IMODE((out / "results.json").stat().st_mode) == 0o644


# ---------------------------------------------------------------------------------------
# What the sweep figures show


def test_single_panel_legend_fits_the_figure():
    """One panel (a fixed GPU count, one swept key) used to put a four-column legend under a
    5.8-inch figure, which clipped it."""
    t = table({"cluster.inter_node.bandwidth": ["25 Gbps", "100 Gbps"]},
              [row(1024, {"cluster.inter_node.bandwidth": v}, comm=c) for v, c in (("25 Gbps", 1.8), ("100 Gbps", 0.9))])
    assert_nothing_clipped(sweep_fig.build_breakdown_by_key(t, "cluster.inter_node.bandwidth"))


def two_key_table():
    g = {"cluster.inter_node.bandwidth": ["100 MB/s", "1 GB/s"], "compute.jitter": [0.5, 0.1]}
    rows = [row(8, {"cluster.inter_node.bandwidth": bw, "compute.jitter": j}, comm=c)
            for bw, c in (("100 MB/s", 0.03), ("1 GB/s", 0.02)) for j in g["compute.jitter"]]
    return table(g, rows)


def test_panel_titles_name_their_key_and_follow_numeric_order():
    fig = sweep_fig.build_breakdown_by_key(two_key_table(), "cluster.inter_node.bandwidth")
    assert titles(fig) == ["compute.jitter = 0.1", "compute.jitter = 0.5"]
    ticks = [t.get_text() for t in fig.get_axes()[0].get_xticklabels()]
    assert ticks == ["100 MB/s", "1 GB/s"]
    assert_nothing_clipped(fig)


def test_bars_sorted_by_value_not_text():
    t = table({"ddp.bucket_cap": ["100MB", "1MB", "25MB"]},
              [row(8, {"ddp.bucket_cap": v}) for v in ("100MB", "1MB", "25MB")])
    ax = sweep_fig.build_breakdown_by_key(t, "ddp.bucket_cap").get_axes()[0]
    assert [x.get_text() for x in ax.get_xticklabels()] == ["1MB", "25MB", "100MB"]


def jitter_like_table():
    """The capacity walkthrough's jitter sweep: 310 ms of compute under every bar and 12 to
    135 ms of communication and straggler cost above it."""
    g = {"cluster.nodes": [4, 128], "stragglers[0].cv": [0.0, 0.1]}
    rows = [row(32, {"cluster.nodes": 4, "stragglers[0].cv": 0.0}, comm=0.012, strag=0.0),
            row(1024, {"cluster.nodes": 128, "stragglers[0].cv": 0.0}, comm=0.022, strag=0.0),
            row(32, {"cluster.nodes": 4, "stragglers[0].cv": 0.1}, comm=0.012, strag=0.065),
            row(1024, {"cluster.nodes": 128, "stragglers[0].cv": 0.1}, comm=0.022, strag=0.112)]
    return table(g, rows)


def test_axis_does_not_start_at_zero_when_compute_squeezes_the_rest():
    fig = sweep_fig.build_step_breakdown(jitter_like_table())
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    low, high = axes[0].get_ylim()
    assert 250 <= low <= 310 and 444 <= high < 480  # ms: the 20-135 ms above compute fill the axis
    assert all(ax.get_ylim() == (low, high) for ax in axes)  # panels of similar height share it
    assert "axis from" in axes[0].get_ylabel()
    assert titles(fig) == ["stragglers[0].cv = 0", "stragglers[0].cv = 0.1"]
    assert_nothing_clipped(fig)


def test_axis_starts_at_zero_when_communication_dominates():
    t = table({"cluster.nodes": [4, 128]}, [row(32, {"cluster.nodes": 4}, comm=0.1),
                                            row(1024, {"cluster.nodes": 128}, comm=1.8)])
    ax = sweep_fig.build_step_breakdown(t).get_axes()[0]
    assert ax.get_ylim()[0] == 0 and "axis from" not in ax.get_ylabel()


def test_panels_of_very_different_heights_get_their_own_scale():
    """A 0.33 s panel next to a 1.2 s one: on a shared axis its 20 ms of exposed communication
    would be a hairline; on its own it is readable, and the title says the scales differ."""
    g = {"cluster.nodes": [4, 128], "ddp.bucket_cap": ["25 MiB", "400 MiB"]}
    rows = [row(32, {"cluster.nodes": 4, "ddp.bucket_cap": "25 MiB"}, comm=0.14, strag=0),
            row(1024, {"cluster.nodes": 128, "ddp.bucket_cap": "25 MiB"}, comm=0.87, strag=0),
            row(32, {"cluster.nodes": 4, "ddp.bucket_cap": "400 MiB"}, comm=0.006, strag=0),
            row(1024, {"cluster.nodes": 128, "ddp.bucket_cap": "400 MiB"}, comm=0.016, strag=0)]
    fig = sweep_fig.build_step_breakdown(table(g, rows))
    big, small = fig.get_axes()[:2]
    assert big.get_ylim()[0] == 0 and big.get_ylim()[1] > 1.1  # seconds, from 0
    assert 300 <= small.get_ylim()[0] < 310 and small.get_ylim()[1] < 330  # ms, zoomed
    assert "(ms)" in small.get_ylabel() and "own scale" in fig.get_suptitle()
    # no straggler cost anywhere: not named in the legend
    assert [t.get_text() for t in fig.legends[0].get_texts()] == \
        ["ideal (compute only)", "compute", "exposed communication"]
    assert_nothing_clipped(fig)


def test_heatmap_and_scaling_titles_name_their_key():
    g = {"cluster.nodes": [1, 2], "cluster.inter_node.bandwidth": ["800 Gbps", "400 Gbps"],
         "stragglers[0].cv": [0.1, 0.0]}
    rows = [row(8 * n, {"cluster.nodes": n, "cluster.inter_node.bandwidth": bw, "stragglers[0].cv": cv},
                slowdown=1 + cv * n) for n in (1, 2) for bw in ("800 Gbps", "400 Gbps") for cv in (0.1, 0.0)]
    t = table(g, rows)
    heat = sweep_fig.build_straggler_heatmap(t, "stragglers[0].cv")
    assert titles(heat) == ["inter_node.bandwidth = 400 Gbps", "inter_node.bandwidth = 800 Gbps"]
    assert [x.get_text() for x in heat.get_axes()[0].get_yticklabels()] == ["0", "0.1"]
    assert_nothing_clipped(heat, legend=False)
    scaling = sweep_fig.build_scaling_efficiency(t)
    assert titles(scaling) == ["inter_node.bandwidth = 400 Gbps", "inter_node.bandwidth = 800 Gbps"]
    assert_nothing_clipped(scaling)


def test_busbw_and_validation_figures_fit(tmp_path):
    curve = BusbwCurve("inter_node.bandwidth = 25 Gbps", 1024, "ring", "alpha-beta",
                       tuple(2.0 ** np.arange(3, 35)), tuple(np.geomspace(1e3, 3e9, 32)))
    cal = calibration_points(ROOT / "docs" / "measurements" / "gloo2_vm_calibration.yaml")
    fig = busbw_fig.build_busbw([curve], cal)
    texts = [t.get_text() for t in fig.get_axes()[0].get_legend().get_texts()]
    assert texts[0] == "predicted: inter_node.bandwidth = 25 Gbps" and any(t.startswith("measured: ") for t in texts)
    assert "ring, alpha-beta" in titles(fig)[0]
    assert_nothing_clipped(fig)
    files = [validation_json(tmp_path / f"{n}.json", n, m, p)
             for n, m, p in [("bucket_100MB", 0.022, 0.021), ("bucket_1MB", 0.130, 0.12), ("bucket_25MB", 0.05, 0.06)]]
    fig = validation_fig.build_validation(load_cases(sorted(files)))
    left, right = fig.get_axes()[:2]
    assert [t.get_text() for t in right.get_yticklabels()] == ["bucket_1MB", "bucket_25MB", "bucket_100MB"]
    assert left.get_xlim()[0] > 10  # ms: a 22-130 ms range is not drawn from 0
    assert_nothing_clipped(fig)


# ---------------------------------------------------------------------------------------
# Busbw curves without the scenario file


def test_stored_curves_are_drawn_after_the_scenario_moved(scenario, tmp_path, capsys):
    out = tmp_path / "out"
    run_sweep(scenario, grid("cluster.nodes=1,2", "cluster.inter_node.bandwidth=25 Gbps,100 Gbps"), out, jobs=1)
    scenario.unlink()
    # the sweep stored its curves: drawn from results.json alone
    written = plots.plot_directory(out)
    assert (out / "busbw_vs_size.png") in written and capsys.readouterr().err == ""
    # a results.json without them (an older sweep): the sweep cannot be re-planned; a note, and the other plots
    doc = json.loads((out / "results.json").read_text())
    assert doc[RESULTS_KEY]
    del doc[RESULTS_KEY]
    (out / "results.json").write_text(json.dumps(doc))
    (out / "busbw_vs_size.png").unlink()
    written = plots.plot_directory(out)
    assert "busbw_vs_size.png" not in {p.name for p in written}
    assert "predicted busbw curves skipped" in capsys.readouterr().err
    doc[RESULTS_KEY] = [BusbwCurve("inter_node.bandwidth = 25 Gbps", 4, "ring", "alpha-beta",
                                   (8.0, 2.0**20, 2.0**30), (1e3, 1e8, 3e9)).to_json()]
    (out / "results.json").write_text(json.dumps(doc))
    written = plots.plot_directory(out)
    assert (out / "busbw_vs_size.png") in written
    assert capsys.readouterr().err == ""
    assert "inter_node.bandwidth = 25 Gbps" in (out / "busbw_vs_size.svg").read_text()


def test_calibration_overlay_from_a_calibration_file(tmp_path):
    cal = ROOT / "docs" / "measurements" / "gloo2_vm_calibration.yaml"
    written = plots.plot_directory(tmp_path, calibration=cal)
    assert [p.name for p in written] == ["busbw_vs_size.png", "busbw_vs_size.svg"]
    assert "measured: " in written[1].read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text("levels: 3\n")
    with pytest.raises(plots.PlotError, match="bad.yaml"):
        plots.plot_directory(tmp_path, calibration=bad)


def test_predicted_vs_measured_from_validate_json(tmp_path):
    validation_json(tmp_path / "a.json", "bucket_1MB", 0.50, 0.52)
    validation_json(tmp_path / "b.json", "bucket_25MB_slow", 0.80, 0.95)
    (tmp_path / "other.json").write_text('{"not": "validate"}')
    written = plots.plot_directory(tmp_path)
    assert [p.name for p in written] == ["predicted_vs_measured.png", "predicted_vs_measured.svg"]
    assert_image(written[0])
    svg = written[1].read_text()
    assert "bucket_25MB_slow" in svg and "10% error band" in svg


def test_a_json_nested_too_deeply_is_no_validation_file_and_a_given_one_is_named(tmp_path):
    # json's recursive decoder raised RecursionError, which the folder's scan (and the given
    # --validation's reader) let through: `commsim plot DIR` with a stray such *.json was a traceback
    validation_json(tmp_path / "a.json", "bucket_1MB", 0.50, 0.52)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    written = plots.plot_directory(tmp_path)
    assert [p.name for p in written] == ["predicted_vs_measured.png", "predicted_vs_measured.svg"]
    with pytest.raises(plots.PlotError, match=r"deep\.json: expected commsim validate JSON, got invalid JSON "
                                              r"\(nested too deeply\)"):
        plots.plot_directory(tmp_path, validations=[deep])


# ---------------------------------------------------------------------------------------
# A single run


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory):
    # pytest's own temporary folder, which it prunes (a tempfile.mkdtemp here was left in /tmp)
    path = tmp_path_factory.mktemp("plots") / "tiny.yaml"
    path.write_text(TINY)
    sc = load_scenario(path, overrides=["stragglers=[{kind: slow_rank, ranks: [1], factor: 1.5}]"], steps=6)
    result, baseline = simulate(sc), simulate(sc.without_stragglers())
    return result, baseline, summarize(sc, result, baseline)


def test_run_waiting_panel_shows_the_straggler_cost_not_exposed_communication(slow_run):
    """The issue: at 1,024 ranks the panel showed ~650 ms of 'waiting on other ranks' where the
    straggler cost is 17.6 ms. Now it draws the waiting beyond exposed communication, whose mean
    over the healthy ranks is the straggler cost, and the two parts side by side."""
    result, baseline, summary = slow_run
    fig = run_fig.build_run(result, summary, baseline)
    axes = fig.get_axes()
    left = next(ax for ax in axes if ax.get_title().startswith("Waiting on late ranks"))
    scale = 1e3  # ms: the straggler cost of this run is tens of ms
    assert "(ms)" in left.get_ylabel()
    mean_line = next(line for line in left.get_lines() if line.get_label().startswith("mean over steps"))
    y = np.asarray(mean_line.get_ydata()) / scale
    healthy = np.delete(y, 1)
    cost, exposed = summary["straggler_cost_s"], summary["exposed_comm_s"]
    assert healthy == pytest.approx(np.full(len(healthy), cost), rel=0.05)
    assert abs(healthy.mean() - (cost + exposed)) > abs(healthy.mean() - cost)
    assert y[1] < 0  # the slow rank itself waits less than without stragglers
    names = [t.get_text() for t in left.get_legend().get_texts()]
    assert f"straggler cost (summary): {cost * scale:.3g} ms" in names
    assert any(n.startswith("most often last: rank 1") for n in names)
    bars = next(ax for ax in axes if ax.get_title() == "Waiting per step")
    labels = [t.get_text() for t in bars.texts]
    assert [t.get_text() for t in bars.get_yticklabels()] == ["exposed\ncommunication", "waiting on\nlate ranks"]
    assert len(labels) == 2 and all(label.endswith(" ms") for label in labels)
    assert_nothing_clipped(fig)


def test_plot_run_writes_png_svg_pdf(slow_run, tmp_path):
    result, baseline, summary = slow_run
    png = plots.plot_run(result, summary, tmp_path / "run.png", baseline=baseline)
    img = imread(png)
    assert png.stat().st_size > 5_000 and img.shape[0] > 200 and img[..., :3].std() > 0.05
    svg = plots.plot_run(result, summary, tmp_path / "run.svg").read_text()
    assert "most often last: rank 1" in svg and "step time per step" in svg and "exposed_comm_s" in svg
    assert plots.plot_run(result, summary, tmp_path / "run.pdf").read_bytes()[:5] == b"%PDF-"
    assert plots.plot_run(result, summary, tmp_path / "again.pdf").read_bytes() == (tmp_path / "run.pdf").read_bytes()


# ---------------------------------------------------------------------------------------
# Targets that cannot be written


def test_check_plot_target_refuses_what_cannot_be_written(tmp_path, monkeypatch):
    plots.check_plot_target(tmp_path / "ok.png")
    with pytest.raises(plots.PlotError, match=r"run\.txt: expected a \.png, \.svg or \.pdf path, got '\.txt'"):
        plots.check_plot_target(tmp_path / "run.txt")
    with pytest.raises(plots.PlotError, match="does not exist"):
        plots.check_plot_target(tmp_path / "missing" / "run.png")
    (tmp_path / "file").write_text("x")
    with pytest.raises(plots.PlotError, match="is not a folder"):
        plots.check_plot_target(tmp_path / "file" / "run.png")
    with pytest.raises(plots.PlotError, match="got a folder"):
        (tmp_path / "dir.png").mkdir()
        plots.check_plot_target(tmp_path / "dir.png")

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(common.tempfile, "TemporaryFile", refuse)
    with pytest.raises(plots.PlotError, match="cannot write the plot into .*: Permission denied") as info:
        plots.check_plot_target(tmp_path / "ro.png")
    assert isinstance(info.value, InputError) and str(tmp_path / "ro.png") in str(info.value)


def test_check_plot_target_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "matplotlib", None)
    with pytest.raises(plots.PlotError, match="plotting needs matplotlib"):
        plots.check_plot_target(tmp_path / "run.png")
    with pytest.raises(plots.PlotError, match="plotting needs matplotlib"):
        plots.plot_directory(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_read_only_folder_is_refused_for_real(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(plots.PlotError, match="Permission denied"):
            plots.check_plot_target(ro / "run.png")
    finally:
        ro.chmod(0o755)


def test_a_full_disk_is_a_plot_error_and_keeps_the_old_file(slow_run, tmp_path, monkeypatch):
    result, baseline, summary = slow_run
    path = plots.plot_run(result, summary, tmp_path / "run.png")
    before = path.read_bytes()

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(common, "atomic_write_bytes", full)
    with pytest.raises(plots.PlotError, match=r"run\.png: cannot write the plot: No space left on device"):
        plots.plot_run(result, summary, path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["run.png"]


def test_plot_directory_into_an_unwritable_folder(scenario, tmp_path, monkeypatch):
    out = tmp_path / "out"
    run_sweep(scenario, grid("cluster.nodes=1,2"), out, jobs=1)

    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(common.tempfile, "TemporaryFile", refuse)
    with pytest.raises(plots.PlotError, match="Read-only file system"):
        plots.plot_directory(out)
    assert not list(out.glob("*.png"))


def test_nothing_to_plot_is_a_one_line_error(tmp_path):
    with pytest.raises(plots.PlotError, match="nothing to plot"):
        plots.plot_directory(tmp_path)
    with pytest.raises(plots.PlotError, match="expected a directory"):
        plots.plot_directory(tmp_path / "missing")
    (tmp_path / "results.json").write_text(json.dumps({"rows": [{"point": 0}], "grid": {}}))
    with pytest.raises(plots.PlotError, match=r"results\.json: rows\[0\]: .*lacks world_size"):
        plots.plot_directory(tmp_path)


def test_only_the_plots_package_imports_matplotlib():
    package = Path(plots.__file__).parent
    uses = re.compile(r"^\s*(import|from)\s+matplotlib", re.M)
    offenders = [p for p in (ROOT / "commsim").rglob("*.py") if package not in p.parents and uses.search(p.read_text())]
    assert offenders == []
    assert {p.name for p in package.glob("*.py")} >= {"common.py", "sweep.py", "run.py", "busbw.py",
                                                        "validation.py", "directory.py"}


def test_cli_sweep_plot_and_plot_command(scenario, tmp_path):
    import click
    from click.testing import CliRunner

    from commsim.cli.sweep import register

    @click.group()
    def main():
        pass

    register(main)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["sweep", str(scenario), "-o", str(out), "--grid", "cluster.nodes=1,2",
                                  "--jobs", "1", "--plot"])
    assert r.exit_code == 0, r.output
    assert (out / "scaling_efficiency.png").stat().st_size > 5_000
    assert str(out / "step_time_breakdown.svg") in r.output
    r = CliRunner().invoke(main, ["plot", str(tmp_path / "empty")])
    assert r.exit_code == 2 and "commsim: error:" in r.output and "Traceback" not in r.output


def test_a_sweep_of_one_point_names_results_json_and_the_missing_axis(scenario, tmp_path):
    # results.json is there: "expected results.json" would send the user looking for it
    out = tmp_path / "out"
    run_sweep(scenario, grid("cluster.nodes=2"), out, jobs=1)
    with pytest.raises(plots.PlotError, match=r"results\.json: nothing to plot: expected a sweep with a key of "
                                              r"two or more values .*got one point per key"):
        plots.plot_directory(out)


def test_a_device_or_fifo_among_the_inputs_is_refused_not_read(tmp_path):
    """DIR/results.json or a --validation file that is /dev/zero (a symlink) was read until a
    MemoryError; a FIFO blocked for a writer. A *.json in DIR that is one is passed over."""
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    folder = tmp_path / "d"
    folder.mkdir()
    validation_json(folder / "ok.json", "ok", 1.0, 1.1)
    (folder / "zero.json").symlink_to("/dev/zero")  # found by the folder scan: skipped
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(plots.PlotError, match=r"fifo\.json: expected commsim validate JSON \(a regular file\)"):
        plots.plot_directory(folder, validations=[tmp_path / "fifo.json"])
    assert [p.name for p in plots.plot_directory(folder)] == ["predicted_vs_measured.png", "predicted_vs_measured.svg"]
    (folder / "results.json").symlink_to("/dev/zero")
    with pytest.raises(plots.PlotError, match=r"results\.json: expected the results\.json of commsim sweep \(a regular"):
        plots.plot_directory(folder)
