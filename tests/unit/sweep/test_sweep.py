"""`commsim sweep` and `commsim plot` (commsim/cli/sweep.py): exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

import click
import pytest
from click.testing import CliRunner

from commsim.cli.main import run_cli
from commsim.cli.sweep import register
from commsim.sweep.errors import SweepInterrupted, SweepRunFailed
from commsim.sweep.grid import parse_grid_args
from commsim.sweep.journal import JOURNAL, read_journal
from commsim.sweep.run import run_sweep
from tests.unit.sweep import helpers
from tests.unit.sweep.helpers import files, kill_session, poll, start_sweep
from tests.unit.sweep.test_grid import HOSTILE_FILES

TINY = helpers.TINY  # tests/unit/output/test_plots.py imports it from here


def cli():
    @click.group()
    def main():
        pass

    register(main)
    return main


def test_cli_sweep_writes_results(scenario, tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(cli(), ["sweep", str(scenario), "-o", str(out), "--grid", "cluster.nodes=1,2",
                                   "--grid", "stragglers[0].cv=0.01,0.1", "--jobs", "1",
                                   "--steps", "3", "--set", "compute.forward=1 ms"])
    assert r.exit_code == 0, r.output
    assert "4 points (4 run, 0 reused)" in r.output
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert {row["steps"] for row in rows} == {3}
    assert rows[0]["compute_time_s"] == pytest.approx(1e-3 + 4e-3)


def test_cli_sweep_of_one_point_says_point(scenario, tmp_path):
    # It said "1 points (1 run, 0 reused)".
    out = tmp_path / "out"
    args = ["sweep", str(scenario), "-o", str(out), "--grid", "cluster.nodes=2", "--jobs", "1", "--steps", "2"]
    r = CliRunner().invoke(cli(), args)
    assert r.exit_code == 0, r.output
    assert r.output.startswith("1 point (1 run, 0 reused) in "), r.output
    r = CliRunner().invoke(cli(), [*args, "--resume"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("1 point (0 run, 1 reused) in ") and r.output.rstrip().endswith(
        f"s -> {out / 'results.csv'}, {out / 'results.json'}"), r.output


def test_interrupted_and_failed_sweeps_of_one_point_say_point(tmp_path):
    assert str(SweepInterrupted(0, 1, tmp_path)) == (
        f"interrupted: 0 of 1 point saved in {tmp_path}; rerun with --resume to complete the sweep")
    assert str(SweepRunFailed("worker died", 1, 1, tmp_path)) == (
        f"worker died; 1 of 1 point saved in {tmp_path}; rerun with --resume to complete the sweep")
    assert "0 of 2 points saved" in str(SweepInterrupted(0, 2, tmp_path))


@pytest.mark.parametrize("grid", ["cluster.nodse=1,2", "cluster.nodes=", "cluster.nodes=1,-1",
                                  "steps=" + "1" * 4301, "cluster.nodes=!!int abc", "seed=!!timestamp x"])
def test_cli_bad_grid_exits_2_with_one_line(scenario, tmp_path, grid):
    r = CliRunner().invoke(cli(), ["sweep", str(scenario), "-o", str(tmp_path / "o"), "--grid", grid])
    assert r.exit_code == 2
    err = r.stderr if hasattr(r, "stderr") else r.output
    assert err.startswith("commsim: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name", ["utf16", "deep", "bigint", "bad_int_tag", "duplicate_key", "alias_bomb"])
def test_cli_hostile_grid_file_exits_2_with_one_line(scenario, tmp_path, capsys, name):
    grid = tmp_path / "grid.yaml"
    grid.write_bytes(HOSTILE_FILES[name])
    assert run_cli(["sweep", str(scenario), "-o", str(tmp_path / "o"), "--grid", str(grid), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"commsim: error: {grid}: ") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_cli_interrupted_while_planning_exits_130(scenario, tmp_path, capsys, monkeypatch):
    from commsim.sweep import run

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "plan_sweep", interrupted)
    assert run_cli(["sweep", str(scenario), "-o", str(tmp_path / "o"), "--grid", "cluster.nodes=1,2", "-q"]) == 130
    err = capsys.readouterr().err
    assert err == f"commsim: error: interrupted; rerun with --resume to complete the sweep in {tmp_path / 'o'}\n"


def test_cli_missing_scenario_exits_2(tmp_path):
    r = CliRunner().invoke(cli(), ["sweep", str(tmp_path / "nope.yaml"), "-o", str(tmp_path / "o"),
                                   "--grid", "cluster.nodes=1,2"])
    assert r.exit_code == 2 and "nope.yaml" in r.output


def test_plot_into_a_full_directory_is_one_line(scenario, small_tmpfs, capsys):
    pytest.importorskip("matplotlib")
    out = small_tmpfs / "out"
    run_sweep(scenario, parse_grid_args(["cluster.nodes=1,2,4"]), out, jobs=1)
    (small_tmpfs / "filler").write_bytes(b"\0" * shutil.disk_usage(small_tmpfs).free)
    assert run_cli(["plot", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("commsim: error: ") and "cannot write the plot" in err and "No space left on device" in err
    assert err.count("\n") == 1 and str(small_tmpfs) in err


def test_killed_sweep_process_loses_only_points_in_flight(scenario, tmp_path):
    """SIGKILL a real `commsim sweep` process mid-way: the journal keeps every finished point
    and --resume completes the sweep to the same bytes as an uninterrupted one."""
    out = tmp_path / "out"
    grid_args = ["cluster.nodes=1,2", "stragglers[0].cv=0.01,0.05,0.1"]  # 6 points: killed after 2
    proc = start_sweep([str(scenario), "-o", str(out), "--jobs", "1", "--steps", "2000",
                        *[a for g in grid_args for a in ("--grid", g)]],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = out / JOURNAL
    try:
        poll(lambda: journal.exists() and journal.read_bytes().count(b"\n") >= 2, what="two finished points",
             proc=proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        kill_session(proc)
    kept = len(read_journal(out))
    assert 2 <= kept < 6
    grid = parse_grid_args(grid_args)
    res = run_sweep(scenario, grid, out, jobs=1, steps=2000, resume=True)
    assert (res.ran, res.reused) == (6 - kept, kept)
    run_sweep(scenario, grid, tmp_path / "fresh", jobs=1, steps=2000)
    assert files(out) == files(tmp_path / "fresh")
