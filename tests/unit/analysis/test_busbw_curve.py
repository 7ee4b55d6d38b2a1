"""Predicted busbw through the collectives' kernels: the ring recurrence step by step, the
uniform ring's closed form, other algorithms, a sweep's curves and their JSON round trip,
and a calibration's measured points."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from commsim.analysis.busbw_curve import (DEFAULT_SIZES, RESULTS_KEY, BusbwCurve, calibration_points,
                                          collective_finish, predicted_busbw, results_field, stored_curves,
                                          sweep_curves)
from commsim.analysis.sweep_table import ResultsError
from commsim.collectives.kernels import REGISTRY
from commsim.collectives.busbw import busbw
from commsim.network.fabric import Fabric
from commsim.scenario.spec import Cluster, Link
from commsim.sweep.run import combine_grids, parse_grid_option, plan_sweep
from tests.unit.sweep.test_sweep import TINY

ROOT = Path(__file__).resolve().parents[3]


def _ring_finish_brute_force(t: np.ndarray) -> float:
    """the ring's max-plus recurrence (docs/collectives.md), step by step, all ranks launching at 0."""
    n = len(t)
    f = np.zeros(n)
    for _ in range(2 * (n - 1)):
        f = np.maximum(f, np.roll(f, 1)) + t
    return float(f.max())


@pytest.mark.parametrize("nodes, gpus", [(1, 4), (3, 1), (3, 4), (2, 8)])
def test_predicted_busbw_matches_the_ring_recurrence(nodes, gpus):
    """Step times as documented in commsim.collectives.ring_closed_form.hop_times: the ring's mean
    hop latency plus the chunk over the hop's bandwidth; network hops enter each node's first rank."""
    cluster = Cluster(nodes, gpus, Link(300e9, 3e-6), Link(12.5e9, 10e-6))
    n = cluster.world_size
    sizes = np.array([8.0, 4096.0, 1e6, 4e9])
    bw = predicted_busbw(cluster, sizes)
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
    assert predicted_busbw(cluster, sizes) == pytest.approx(expected, rel=1e-9)
    # large messages approach the link bandwidth: what nccl-tests' busbw is meant to show
    assert predicted_busbw(cluster, np.array([1e12]))[0] == pytest.approx(100e9, rel=1e-3)


@pytest.mark.parametrize("algorithm", ["tree", "hierarchical"])
def test_other_algorithms_come_from_their_own_module(algorithm):
    """Not a copy of the ring: the algorithm's own finish times (simultaneous launch)."""
    fabric = Fabric(4, 4, 3e-6, 300e9, 10e-6, 12.5e9)
    sizes = [4096.0, 64e6]
    got = predicted_busbw(fabric, sizes, algorithm=algorithm)
    for s, b in zip(sizes, got):
        t = float(np.max(REGISTRY[algorithm].plan("all_reduce", fabric.at_size(s), s).finish_times(np.zeros(16))))
        assert b == pytest.approx(busbw("all_reduce", s, t, 16), rel=1e-9)
    assert not np.allclose(got, predicted_busbw(fabric, sizes))
    assert collective_finish(fabric, 64e6, algorithm) == pytest.approx(busbw("all_reduce", 64e6, 1.0, 16) / got[1])


def test_one_rank_has_no_busbw():
    assert np.isnan(predicted_busbw(Cluster(1, 1, Link(1e9, 1e-6), Link(1e9, 1e-6)), [1e6])).all()


def test_sweep_curves_one_per_network_at_the_largest_world_size(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    grid = combine_grids([parse_grid_option("cluster.nodes=1,4"),
                          parse_grid_option("cluster.inter_node.bandwidth=100 Gbps,25 Gbps"),
                          parse_grid_option("ddp.bucket_cap=1 MB,4 MB")])
    points = plan_sweep(path, grid)
    curves = sweep_curves(points, ["cluster.inter_node.bandwidth"])
    assert [c.label for c in curves] == ["inter_node.bandwidth = 25 Gbps", "inter_node.bandwidth = 100 Gbps"]
    assert {c.world_size for c in curves} == {8} and {(c.algorithm, c.model) for c in curves} == {("ring", "alpha-beta")}
    big = next(p for p in points if p.scenario.world_size == 8)
    assert curves[1].busbw_Bps == pytest.approx(tuple(predicted_busbw(big.scenario.cluster, DEFAULT_SIZES)))
    # the slower network's large-message busbw is lower
    assert curves[0].busbw_Bps[-1] < curves[1].busbw_Bps[-1]


def test_results_field_is_what_plot_reads_back(tmp_path):
    """The sweep stores results_field(points, grid) in results.json; commsim plot reads the
    same curves back without the scenario file."""
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    g = combine_grids([parse_grid_option("cluster.nodes=1,2"), parse_grid_option("cluster.inter_node.bandwidth=25 Gbps,100 Gbps")])
    points = plan_sweep(path, g)
    field = results_field(points, g.as_dict())
    doc = json.loads(json.dumps({RESULTS_KEY: field}))
    assert stored_curves(doc, "results.json") == sweep_curves(points, ["cluster.inter_node.bandwidth"])
    assert [c["label"] for c in field] == ["inter_node.bandwidth = 25 Gbps", "inter_node.bandwidth = 100 Gbps"]
    # in numeric order whatever the grid order
    assert [c.label for c in sweep_curves(plan_sweep(path, combine_grids([
        parse_grid_option("cluster.inter_node.bandwidth=100 Gbps,25 Gbps")])), ["cluster.inter_node.bandwidth"])] == \
        ["inter_node.bandwidth = 25 Gbps", "inter_node.bandwidth = 100 Gbps"]
    # nothing of the links varied: one curve, named after the scenario
    g = combine_grids([parse_grid_option("cluster.nodes=1,2")])
    assert [c["label"] for c in results_field(plan_sweep(path, g), g.as_dict())] == ["scenario"]


def test_curves_round_trip_through_results_json():
    curve = BusbwCurve("inter_node.bandwidth = 25 Gbps", 1024, "ring", "alpha-beta", (8.0, 1024.0), (1.5e3, 2.5e5))
    doc = json.loads(json.dumps({RESULTS_KEY: [curve.to_json()]}))
    assert stored_curves(doc, "results.json") == [curve]
    assert stored_curves({}, "results.json") is None
    with pytest.raises(ResultsError, match=r"busbw_curves\[0\]: expected label"):
        stored_curves({RESULTS_KEY: [{"label": "x"}]}, "results.json")
    with pytest.raises(ResultsError, match="entries"):
        stored_curves({RESULTS_KEY: [dict(curve.to_json(), busbw_Bps=[1.0])]}, "results.json")
    with pytest.raises(ResultsError, match="list of curves"):
        stored_curves({RESULTS_KEY: {}}, "results.json")


def test_calibration_points_per_level_and_world_size():
    path = ROOT / "docs" / "measurements" / "gloo2_vm_calibration.yaml"
    points = calibration_points(path)
    assert points and all(p.label.startswith("measured: ") and p.label.endswith(" ranks") for p in points)
    for p in points:
        assert len(p.size_bytes) == len(p.busbw_Bps) > 3
        assert np.all(np.diff(p.size_bytes) > 0) and np.all(p.busbw_Bps > 0)
