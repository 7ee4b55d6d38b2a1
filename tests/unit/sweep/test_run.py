"""Running sweeps: results, determinism, resume, Dask, and a full filesystem."""

from __future__ import annotations

import json
import shutil

import pytest

from commsim.cli.main import run_cli
from commsim.sweep.errors import SweepError, SweepInterrupted
from commsim.sweep.grid import combine_grids, parse_grid_option
from commsim.sweep.journal import JOURNAL, read_journal
from commsim.sweep.run import run_sweep
from tests.unit.sweep.helpers import files
from tests.unit.sweep.test_grid import small_grid


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
    scenario.write_text(scenario.read_text().replace("forward: 2 ms", "forward: 3 ms"))
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
# A full filesystem: a real tmpfs of 256 KiB.


FULL_GRID = ["cluster.nodes=1,2,3,4,5,6", "stragglers[0].cv=0.01,0.02,0.05,0.1"]  # 24 points


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_full_filesystem_is_one_line_and_results_match_the_journal(scenario, small_tmpfs, tmp_path, capsys, jobs):
    out = small_tmpfs / "out"
    filler = small_tmpfs / "filler"
    # Room for a few points' journal lines and results, far from all 24 (about 1.6 KB of
    # results and 0.8 KB of journal per point, the results twice during their atomic rewrite).
    filler.write_bytes(b"\0" * (shutil.disk_usage(small_tmpfs).free - 24 * 1024))
    args = ["sweep", str(scenario), "-o", str(out), "--jobs", jobs, "-q"]
    for g in FULL_GRID:
        args += ["--grid", g]
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{out}/" in err and "errno 28" in err and "No space left on device" in err

    lines = (out / JOURNAL).read_bytes().splitlines(keepends=True)
    assert lines and all(line.endswith(b"\n") and json.loads(line) for line in lines)  # no torn line
    saved = len(read_journal(out))
    assert 0 < saved < 24 and f"{saved} of 24 points saved" in err
    if (out / "results.json").exists():
        doc = json.loads((out / "results.json").read_text())
        assert doc["points_done"] == saved
        assert len((out / "results.csv").read_text().splitlines()) == saved + 1
        assert "match it" in err
    else:
        assert not (out / "results.csv").exists() and "removed" in err
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]

    # Room again: --resume finishes the sweep, to the bytes of an uninterrupted one.
    filler.unlink()
    assert run_cli(args + ["--resume"]) == 0
    assert run_cli(["sweep", str(scenario), "-o", str(tmp_path / "fresh"), "--jobs", "1", "-q",
                    *[a for g in FULL_GRID for a in ("--grid", g)]]) == 0
    assert files(out) == files(tmp_path / "fresh")
    assert len(read_journal(out)) == 24
