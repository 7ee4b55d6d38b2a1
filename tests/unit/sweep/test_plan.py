"""Plans: every grid point resolved through the loader before anything runs."""

from __future__ import annotations

import pytest
import yaml

from commsim.errors import InputError, ScenarioError
from commsim.sweep.grid import parse_grid_args, parse_grid_option
from commsim.sweep.plan import plan_sweep, yaml_flow
from commsim.sweep.run import run_sweep
from tests.unit.sweep.test_grid import small_grid


def test_yaml_flow_round_trips():
    for v in ["100 Gbps", "1e9", 3, 0.05, True, [], [{"kind": "jitter", "cv": 0.1}], "yes", "a: b"]:
        assert yaml.safe_load(yaml_flow(v)) == v


@pytest.mark.parametrize("arg, fragment", [
    ("cluster.nodse=1,2", "cluster.nodse"),          # unknown key: the loader's message
    ("cluster.nodes=2,0", "cluster.nodes"),          # invalid value at point 1
    ("cluster.inter_node.bandwidth=100 Gbps,5 us", "bandwidth"),  # unit of the wrong kind
])
def test_bad_points_rejected_before_anything_runs(scenario, tmp_path, arg, fragment):
    out = tmp_path / "out"
    with pytest.raises(ScenarioError, match=fragment) as err:
        run_sweep(scenario, parse_grid_args([arg]), out, jobs=1)
    assert "grid point" in str(err.value) and "\n" not in str(err.value)
    assert not out.exists()  # nothing ran, nothing written


def test_a_bad_grid_value_is_named_as_the_grid_s_and_a_bad_set_as_the_set_s(scenario):
    # a grid value was reported "(after --set 'cluster.nodes=0')", a flag the user never gave
    with pytest.raises(ScenarioError) as err:
        plan_sweep(scenario, parse_grid_option("cluster.nodes=2,0"))
    assert f"{scenario} (after --grid 'cluster.nodes=0'): cluster.nodes: expected a positive count" in str(err.value)
    assert str(err.value).endswith("(grid point 1: cluster.nodes=0)")
    with pytest.raises(ScenarioError) as err:
        plan_sweep(scenario, parse_grid_option("steps=2,3"), overrides=["cluster.nodes=0"])
    assert f"{scenario} (after --set 'cluster.nodes=0'): cluster.nodes:" in str(err.value)


def test_plan_resolves_each_point(scenario):
    points = plan_sweep(scenario, small_grid())
    assert [p.scenario.world_size for p in points] == [2, 2, 4, 4, 8, 8]
    assert points[1].scenario.cluster.inter_node.bandwidth == pytest.approx(100e9 / 8)
    assert len({p.key for p in points}) == 6
    assert points[3].label == "cluster.nodes=2 cluster.inter_node.bandwidth=100 Gbps"
    # Two spellings of one rate are one point (the fingerprint is of the resolved scenario).
    same = plan_sweep(scenario, parse_grid_option("cluster.inter_node.bandwidth=100 Gbps,12.5 GB/s"))
    assert same[0].key == same[1].key


def test_run_point_keeps_no_per_rank_records(monkeypatch):
    """A sweep point's summary needs no (steps x ranks) arrays: its run and baseline keep none,
    and the summary is the one `commsim run` computes from full records."""
    from commsim.analysis.report import summarize
    from commsim.scenario.loader import load_scenario
    from commsim.sim import engine
    from commsim.sweep.plan import run_point

    sc = load_scenario("scenarios/32gpu_throttle.yaml", [], 20, None)
    expected = summarize(sc)
    kept = []
    run = engine.Engine.run

    def recording_run(self):
        result = run(self)
        kept.append(result.rank_end.shape[1])
        return result

    monkeypatch.setattr(engine.Engine, "run", recording_run)
    assert run_point(sc) == expected
    assert kept == [0, 0]  # the run and its baseline


@pytest.mark.parametrize("grid_arg, kwargs, option", [
    ("steps=2,3", {"steps": 4}, "--steps"),   # every point would run 4 steps, its row saying 2 or 3
    ("seed=0,1", {"seed": 5}, "--seed"),
    ("cluster.nodes=2,4", {"overrides": ["cluster.nodes=8"]}, "--set"),
])
def test_a_swept_key_set_by_another_option_is_refused(scenario, tmp_path, grid_arg, kwargs, option):
    from commsim.sweep.errors import SweepError

    out = tmp_path / "out"
    with pytest.raises(SweepError, match=f"set by {option}, got both") as err:
        run_sweep(scenario, parse_grid_args([grid_arg]), out, jobs=1, **kwargs)
    assert str(err.value).startswith(f"--grid {grid_arg.partition('=')[0]}: ") and "\n" not in str(err.value)
    assert not out.exists()


def test_other_options_beside_the_grid_still_apply(scenario):
    points = plan_sweep(scenario, parse_grid_args(["seed=0,1"]), ["cluster.nodes=4"], steps=3)
    assert [(p.scenario.steps, p.scenario.seed, p.scenario.world_size) for p in points] == [(3, 0, 8), (3, 1, 8)]  # 4 nodes x 2 GPUs


@pytest.mark.parametrize("grid, overrides, message", [
    # the swept mapping replaced the --set inside it at every point, silently
    (["cluster={nodes: 2, gpus_per_node: 2}"], ["cluster.nodes=8"],
     "--grid cluster: expected --set cluster.nodes outside the swept cluster"),
    (["stragglers=[]"], ["stragglers[0].cv=0.2"], "--grid stragglers: expected --set stragglers[0].cv outside"),
    # the inner key's column said one thing, the outer mapping's another
    (["cluster={nodes: 2, gpus_per_node: 2}", "cluster.nodes=1,2"], [],
     "--grid cluster.nodes: expected swept keys apart, got cluster.nodes inside the swept cluster"),
])
def test_a_key_inside_a_swept_mapping_is_refused_before_anything_runs(scenario, tmp_path, grid, overrides, message):
    out = tmp_path / "out"
    with pytest.raises(InputError) as err:
        run_sweep(scenario, parse_grid_args(grid), out, overrides=overrides, jobs=1)
    assert str(err.value).startswith(message), str(err.value)
    assert not out.exists()


def test_a_set_that_refines_a_swept_neighbour_is_allowed(scenario):
    # --set cluster.gpus_per_node with --grid cluster.nodes: apart, both apply
    points = plan_sweep(scenario, parse_grid_option("cluster.nodes=1,2"), overrides=["cluster.gpus_per_node=2"])
    assert [p.scenario.world_size for p in points] == [2, 4]
