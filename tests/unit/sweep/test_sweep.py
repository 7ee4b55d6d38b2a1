"""Sweeps: grid parsing and expansion, validation before running, journal/resume, executors."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from commsim.cli.sweep import register
from commsim.errors import ScenarioError
from commsim.sweep.grid import split_top_level as _split_top_level
from commsim.sweep.plan import yaml_flow as _yaml_flow
from commsim.sweep.run import (
    JOURNAL,
    Grid,
    SweepError,
    SweepInterrupted,
    combine_grids,
    load_grid_file,
    parse_grid_args,
    parse_grid_option,
    plan_sweep,
    read_journal,
    run_sweep,
)

TINY = textwrap.dedent(
    """\
    name: tiny
    steps: 4
    seed: 7
    cluster:
      nodes: 2
      gpus_per_node: 2
      intra_node: {bandwidth: 100 GB/s, latency: 2 us}
      inter_node: {bandwidth: 100 Gbps, latency: 5 us}
    model: {parameters: 2e6}
    compute: {forward: 2 ms, backward: 4 ms}
    ddp: {bucket_cap: 4 MB}
    stragglers:
      - {kind: jitter, cv: 0.05}
    """
)


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def small_grid() -> Grid:
    return combine_grids([
        parse_grid_option("cluster.nodes=1,2,4"),
        parse_grid_option("cluster.inter_node.bandwidth=25 Gbps,100 Gbps"),
    ])


def files(out: Path):
    return (out / "results.csv").read_bytes(), (out / "results.json").read_bytes()


# ---------------------------------------------------------------------------------------
# Grids


def test_grid_option_values_are_yaml_and_keep_order():
    g = parse_grid_option("cluster.inter_node.bandwidth=25 Gbps, 100 Gbps ,400 Gbps")
    assert g.keys == ("cluster.inter_node.bandwidth",)
    assert g.values == (("25 Gbps", "100 Gbps", "400 Gbps"),)
    assert parse_grid_option("steps=3,5").values == ((3, 5),)
    assert parse_grid_option("ddp.overlap=true,false").values == ((True, False),)


def test_split_respects_flow_collections_and_quotes():
    assert _split_top_level("[],[{kind: jitter, cv: 0.1}],'a,b'") == [
        "[]", "[{kind: jitter, cv: 0.1}]", "'a,b'"]
    g = parse_grid_option("stragglers=[],[{kind: jitter, cv: 0.1}]")
    assert g.values == (([], [{"kind": "jitter", "cv": 0.1}]),)


def test_cartesian_product_last_key_fastest():
    g = small_grid()
    assert len(g) == 6
    pts = g.points()
    assert [(p["cluster.nodes"], p["cluster.inter_node.bandwidth"]) for p in pts] == [
        (1, "25 Gbps"), (1, "100 Gbps"), (2, "25 Gbps"), (2, "100 Gbps"), (4, "25 Gbps"), (4, "100 Gbps")]


def test_grid_file_flat_and_nested_mean_the_same(tmp_path):
    flat = tmp_path / "flat.yaml"
    flat.write_text("cluster.nodes: [1, 2]\ncluster.inter_node.bandwidth: [25 Gbps, 100 Gbps]\n")
    nested = tmp_path / "nested.yaml"
    nested.write_text("cluster:\n  nodes: [1, 2]\n  inter_node:\n    bandwidth: [25 Gbps, 100 Gbps]\n")
    assert load_grid_file(flat) == load_grid_file(nested)
    # --grid accepts files and KEY=V lists together
    both = parse_grid_args([str(flat), "stragglers[0].cv=0.01,0.1"])
    assert both.keys == ("cluster.nodes", "cluster.inter_node.bandwidth", "stragglers[0].cv")
    assert len(both) == 8


def test_yaml_flow_round_trips():
    import yaml

    for v in ["100 Gbps", "1e9", 3, 0.05, True, [], [{"kind": "jitter", "cv": 0.1}], "yes", "a: b"]:
        assert yaml.safe_load(_yaml_flow(v)) == v


@pytest.mark.parametrize("arg, fragment", [
    ("cluster.nodes=", "empty list"),
    ("cluster.nodes=1,,2", "empty one"),
    ("cluster.nodes=1,1", "twice"),
    ("nodes", "expected KEY=V1,V2"),
])
def test_bad_grid_options(arg, fragment):
    with pytest.raises(SweepError, match=fragment):
        parse_grid_args([arg])


@pytest.mark.parametrize("text, fragment", [
    ("cluster.nodes: []\n", "empty list"),
    ("cluster.nodes: 4\n", "expected a list of values"),
    ("[1, 2]\n", "expected a mapping"),
    ("", "empty document"),
    ("cluster.nodes: [1, 2\n", "invalid YAML"),
])
def test_bad_grid_files(tmp_path, text, fragment):
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    with pytest.raises(SweepError, match=fragment) as err:
        load_grid_file(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_key_given_twice_is_rejected():
    with pytest.raises(SweepError, match="more than one grid"):
        parse_grid_args(["cluster.nodes=1,2", "cluster.nodes=4"])


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


def test_plan_resolves_each_point(scenario):
    points = plan_sweep(scenario, small_grid())
    assert [p.scenario.world_size for p in points] == [2, 2, 4, 4, 8, 8]
    assert points[1].scenario.cluster.inter_node.bandwidth == pytest.approx(100e9 / 8)
    assert len({p.key for p in points}) == 6
    # Two spellings of one rate are one point (the fingerprint is of the resolved scenario).
    same = plan_sweep(scenario, parse_grid_option("cluster.inter_node.bandwidth=100 Gbps,12.5 GB/s"))
    assert same[0].key == same[1].key


# ---------------------------------------------------------------------------------------
# Running, results, determinism


def test_results_have_one_row_per_point_with_values_and_metrics(scenario, tmp_path):
    out = tmp_path / "out"
    res = run_sweep(scenario, small_grid(), out, jobs=1)
    assert (res.ran, res.reused) == (6, 0)
    doc = json.loads((out / "results.json").read_text())
    assert doc["complete"] and doc["points_total"] == 6
    cols = doc["columns"]
    for c in ["point", "cluster.nodes", "cluster.inter_node.bandwidth", "world_size", "step_time_s.mean",
              "step_time_s.p50", "step_time_s.p95", "step_time_s.p99", "baseline_step_time_s", "slowdown",
              "compute_time_s", "comm_time_s", "exposed_comm_s", "straggler_cost_s", "scaling_efficiency",
              "throughput_samples_per_s"]:
        assert c in cols
    assert [r["point"] for r in doc["rows"]] == list(range(6))
    assert [r["world_size"] for r in doc["rows"]] == [2, 2, 4, 4, 8, 8]
    lines = (out / "results.csv").read_text().splitlines()
    assert len(lines) == 7 and lines[0].split(",")[:3] == ["point", "cluster.nodes", "cluster.inter_node.bandwidth"]
    assert lines[2].startswith("1,1,100 Gbps,")
    # The slower network makes communication slower once there is more than one node.
    rows = doc["rows"]
    for slow, fast in zip(rows[0::2], rows[1::2]):
        if slow["cluster.nodes"] == 1:
            assert slow["comm_time_s"] == fast["comm_time_s"]
        else:
            assert slow["comm_time_s"] > fast["comm_time_s"]


def test_pool_and_inline_runs_are_byte_identical(scenario, tmp_path):
    run_sweep(scenario, small_grid(), tmp_path / "a", jobs=1)
    run_sweep(scenario, small_grid(), tmp_path / "b", jobs=2)
    assert files(tmp_path / "a") == files(tmp_path / "b")


def test_existing_results_need_resume(scenario, tmp_path):
    out = tmp_path / "out"
    run_sweep(scenario, small_grid(), out, jobs=1)
    with pytest.raises(SweepError, match="--resume"):
        run_sweep(scenario, small_grid(), out, jobs=1)


def test_interrupted_sweep_keeps_finished_points_and_resume_completes(scenario, tmp_path):
    out = tmp_path / "out"

    def interrupt_after_three(done, total):
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(SweepInterrupted) as err:
        run_sweep(scenario, small_grid(), out, jobs=1, on_point=interrupt_after_three)
    assert (err.value.done, err.value.total) == (3, 6)
    assert len(read_journal(out)) == 3
    partial = json.loads((out / "results.json").read_text())
    assert partial["points_done"] == 3 and not partial["complete"]
    assert len((out / "results.csv").read_text().splitlines()) == 4

    # A kill mid-write leaves a torn last line: it is ignored, that point reruns.
    with open(out / JOURNAL, "a") as fh:
        fh.write('{"key": "abc", "summ')
    res = run_sweep(scenario, small_grid(), out, jobs=2, resume=True)
    assert (res.ran, res.reused) == (3, 3)
    run_sweep(scenario, small_grid(), tmp_path / "fresh", jobs=1)
    assert files(out) == files(tmp_path / "fresh")


def test_grown_grid_is_completed_not_restarted(scenario, tmp_path):
    out = tmp_path / "out"
    run_sweep(scenario, small_grid(), out, jobs=1)
    grown = combine_grids([
        parse_grid_option("cluster.nodes=1,2,4,8"),
        parse_grid_option("cluster.inter_node.bandwidth=25 Gbps,100 Gbps,400 Gbps"),
    ])
    res = run_sweep(scenario, grown, out, jobs=1, resume=True)
    assert (res.ran, res.reused) == (12 - 6, 6)
    run_sweep(scenario, grown, tmp_path / "fresh", jobs=1)
    assert files(out) == files(tmp_path / "fresh")
    # And nothing left to do: a second resume runs nothing.
    again = run_sweep(scenario, grown, out, jobs=1, resume=True)
    assert (again.ran, again.reused) == (0, 12)


def test_changed_scenario_is_rerun_on_resume(scenario, tmp_path):
    out = tmp_path / "out"
    run_sweep(scenario, small_grid(), out, jobs=1)
    scenario.write_text(TINY.replace("forward: 2 ms", "forward: 3 ms"))
    res = run_sweep(scenario, small_grid(), out, jobs=1, resume=True)
    assert (res.ran, res.reused) == (6, 0)


def test_dask_local_cluster_equals_process_pool(scenario, tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    run_sweep(scenario, small_grid(), tmp_path / "pool", jobs=2)
    # Threads in this process: keeps a 2-core machine usable and starts in well under a second.
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        res = run_sweep(scenario, small_grid(), tmp_path / "dask", dask_client=client)
        assert res.ran == 6
        # The scheduler address path (what --dask-scheduler uses) works too, with --resume.
        grown = combine_grids([parse_grid_option("cluster.nodes=1,2,4"),
                               parse_grid_option("cluster.inter_node.bandwidth=25 Gbps,100 Gbps,400 Gbps")])
        res2 = run_sweep(scenario, grown, tmp_path / "dask", dask_scheduler=cluster.scheduler_address,
                         resume=True)
        assert (res2.ran, res2.reused) == (3, 6)
    run_sweep(scenario, grown, tmp_path / "pool", jobs=2, resume=True)
    assert files(tmp_path / "pool") == files(tmp_path / "dask")


# ---------------------------------------------------------------------------------------
# CLI


def cli():
    @click.group()
    def main():
        pass

    register(main)
    return main


def test_cli_sweep_writes_results(scenario, tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(cli(), ["sweep", str(scenario), "-o", str(out), "--grid", "cluster.nodes=1,2",
                                   "--grid", "stragglers[0].cv=0.01,0.1", "--jobs", "1", "--quiet",
                                   "--steps", "3", "--set", "compute.forward=1 ms"])
    assert r.exit_code == 0, r.output
    assert "4 points (4 run, 0 reused)" in r.output
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert {row["steps"] for row in rows} == {3}
    assert rows[0]["compute_time_s"] == pytest.approx(1e-3 + 4e-3)


@pytest.mark.parametrize("grid", ["cluster.nodse=1,2", "cluster.nodes=", "cluster.nodes=1,-1"])
def test_cli_bad_grid_exits_2_with_one_line(scenario, tmp_path, grid):
    r = CliRunner().invoke(cli(), ["sweep", str(scenario), "-o", str(tmp_path / "o"), "--grid", grid])
    assert r.exit_code == 2
    err = r.stderr if hasattr(r, "stderr") else r.output
    assert err.startswith("commsim: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_cli_missing_scenario_exits_2(tmp_path):
    r = CliRunner().invoke(cli(), ["sweep", str(tmp_path / "nope.yaml"), "-o", str(tmp_path / "o"),
                                   "--grid", "cluster.nodes=1,2"])
    assert r.exit_code == 2 and "nope.yaml" in r.output


def test_killed_sweep_process_loses_only_points_in_flight(scenario, tmp_path):
    """SIGKILL a real `commsim sweep` process mid-way: the journal keeps every finished point
    and --resume completes the sweep to the same bytes as an uninterrupted one."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    script = ("import click, sys\nfrom commsim.cli.sweep import register\n"
              "@click.group()\ndef main(): pass\nregister(main)\nmain()\n")
    args = ["sweep", str(scenario), "-o", str(out), "--jobs", "1", "--steps", "300",
            "--grid", "cluster.nodes=1,2,3,4", "--grid", "stragglers[0].cv=0.01,0.05,0.1"]
    proc = subprocess.Popen([sys.executable, "-c", script, *args], cwd=Path(__file__).resolve().parents[3],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    journal = out / JOURNAL
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and len(journal.read_text().splitlines()) >= 2:
            break
        time.sleep(0.005)
    if proc.poll() is not None:
        pytest.skip("the sweep finished before it could be killed (machine too fast)")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = len(read_journal(out))
    assert 2 <= kept < 12
    grid = parse_grid_args(["cluster.nodes=1,2,3,4", "stragglers[0].cv=0.01,0.05,0.1"])
    res = run_sweep(scenario, grid, out, jobs=1, steps=300, resume=True)
    assert (res.ran, res.reused) == (12 - kept, kept)
    run_sweep(scenario, grid, tmp_path / "fresh", jobs=1, steps=300)
    assert files(out) == files(tmp_path / "fresh")
