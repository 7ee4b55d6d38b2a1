"""Plots: the right files for each kind of sweep, non-empty images, deterministic bytes, and
the busbw formula against the ring recurrence."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.image import imread  # noqa: E402

from commsim.output import plots  # noqa: E402
from commsim.scenario.spec import Cluster, Link  # noqa: E402
from commsim.sweep.run import combine_grids, parse_grid_option, run_sweep  # noqa: E402
from tests.unit.sweep.test_sweep import TINY  # noqa: E402


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
    # The scaling legend names each line's knee (or that it never falls below the threshold).
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


def test_knee_is_the_first_count_below_threshold():
    assert plots.knee([8, 16, 32, 64], [0.99, 0.9, 0.84, 0.7], 0.85) == 32
    assert plots.knee([64, 8, 32, 16], [0.7, 0.99, 0.84, 0.9], 0.85) == 32
    assert plots.knee([8, 16], [0.99, 0.9], 0.85) is None


def _ring_finish_brute_force(t: np.ndarray) -> float:
    """DESIGN.md's max-plus recurrence, step by step, all ranks launching at 0."""
    n = len(t)
    f = np.zeros(n)
    for _ in range(2 * (n - 1)):
        f = np.maximum(f, np.roll(f, 1)) + t
    return float(f.max())


@pytest.mark.parametrize("nodes, gpus", [(1, 4), (3, 1), (3, 4), (2, 8)])
def test_predicted_busbw_matches_the_ring_recurrence(nodes, gpus):
    """Step times as documented in commsim.collectives.ring_closed_form.hop_times: the ring's mean hop latency plus
    the chunk over the hop's bandwidth; network hops enter each node's first rank."""
    cluster = Cluster(nodes, gpus, Link(300e9, 3e-6), Link(12.5e9, 10e-6))
    n = cluster.world_size
    sizes = np.array([8.0, 4096.0, 1e6, 4e9])
    bw = plots.predicted_busbw(cluster, sizes)
    crosses = (np.arange(n) % gpus == 0) & (nodes > 1)
    alpha = np.where(crosses, 10e-6, 3e-6)
    beta = np.where(crosses, 12.5e9, 300e9)
    for s, b in zip(sizes, bw):
        t = _ring_finish_brute_force(alpha.mean() + (s / n) / beta)
        assert b == pytest.approx(s / t * 2 * (n - 1) / n, rel=1e-9)


def test_predicted_busbw_uniform_ring_closed_form():
    """One link class: T = 2(n-1)alpha + 2(n-1)/n S/B, so busbw = S / (n alpha + S/B)."""
    cluster = Cluster(1, 8, Link(100e9, 5e-6), Link(1e9, 1.0))
    sizes = np.array([1e3, 1e6, 1e9])
    expected = sizes / (8 * 5e-6 + sizes / 100e9)
    assert plots.predicted_busbw(cluster, sizes) == pytest.approx(expected, rel=1e-9)
    # large messages approach the link bandwidth: what nccl-tests' busbw is meant to show
    assert plots.predicted_busbw(cluster, np.array([1e12]))[0] == pytest.approx(100e9, rel=1e-3)


def test_calibration_overlay_is_skipped_without_the_module(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "commsim.calibration.file", None)  # import fails
    cluster = Cluster(2, 4, Link(300e9, 3e-6), Link(12.5e9, 10e-6))
    written = plots.plot_busbw([("ib", cluster)], tmp_path, calibration=tmp_path / "cal.yaml")
    assert_image(written[0])
    assert "calibration overlay skipped" in written[1].read_text()


def test_calibration_overlay_reads_the_measured_table(tmp_path, monkeypatch):
    """Any calibration module exposing load_calibration -> levels[].table[] of size_bytes/busbw."""
    import types
    from dataclasses import dataclass

    @dataclass
    class M:
        size_bytes: int
        busbw: float
        world_size: int

    level = types.SimpleNamespace(level="inter_node", table=[M(2**k, 1e9 * k / 30, 8) for k in range(10, 31, 2)])
    fake = types.ModuleType("commsim.calibration.file")
    fake.load_calibration = lambda path: types.SimpleNamespace(levels=[level])
    monkeypatch.setitem(sys.modules, "commsim.calibration.file", fake)
    got = plots._calibration_points(tmp_path / "cal.yaml")
    assert len(got) == 1 and got[0][0] == "measured: inter_node, 8 ranks" and len(got[0][1]) == 11
    written = plots.plot_busbw([], tmp_path, calibration=tmp_path / "cal.yaml")
    assert "measured: inter_node" in written[1].read_text()


def validation_json(path: Path, name: str, measured: float, predicted: float) -> Path:
    path.write_text(json.dumps({
        "scenario": name,
        "measured": {"step_time_s": {"mean": measured, "p95": measured * 1.1}},
        "predicted": {"step_time_s": {"mean": predicted, "p95": predicted * 1.05}},
        "error_pct": {"step_time_mean": (predicted - measured) / measured * 100},
    }))
    return path


def test_predicted_vs_measured_from_validate_json(tmp_path):
    validation_json(tmp_path / "a.json", "bucket_1MB", 0.50, 0.52)
    validation_json(tmp_path / "b.json", "bucket_25MB_slow", 0.80, 0.95)
    (tmp_path / "other.json").write_text('{"not": "validate"}')
    written = plots.plot_directory(tmp_path)
    assert [p.name for p in written] == ["predicted_vs_measured.png", "predicted_vs_measured.svg"]
    assert_image(written[0])
    svg = written[1].read_text()
    assert "bucket_25MB_slow" in svg and "10% error band" in svg


def test_nothing_to_plot_is_a_one_line_error(tmp_path):
    with pytest.raises(plots.PlotError, match="nothing to plot"):
        plots.plot_directory(tmp_path)
    with pytest.raises(plots.PlotError, match="expected a directory"):
        plots.plot_directory(tmp_path / "missing")


def test_only_plots_imports_matplotlib():
    root = Path(plots.__file__).parent
    offenders = [p.name for p in root.glob("*.py")
                 if p.name != "plots.py" and re.search(r"^\s*(import|from)\s+matplotlib", p.read_text(), re.M)]
    assert offenders == []


def test_plot_run_writes_step_and_waiting_plot(scenario, tmp_path):
    from commsim.sim.engine import simulate
    from commsim.scenario.loader import load_scenario
    from commsim.analysis.report import summarize

    sc = load_scenario(scenario, overrides=["stragglers=[{kind: slow_rank, ranks: [1], factor: 1.5}]"], steps=6)
    result = simulate(sc)
    summary = summarize(sc, result)
    png = plots.plot_run(result, summary, tmp_path / "sub" / "run.png")
    assert_image_png_only(png)
    svg = plots.plot_run(result, summary, tmp_path / "run.svg").read_text()
    # The slow rank is the one everyone waits for: named in the legend as most often last.
    assert "most often last: rank 1" in svg and "step time per step" in svg
    with pytest.raises(plots.PlotError, match="png"):
        plots.plot_run(result, summary, tmp_path / "run.txt")


def assert_image_png_only(path: Path):
    img = imread(path)
    assert path.stat().st_size > 5_000 and img.shape[0] > 200 and img[..., :3].std() > 0.05


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
