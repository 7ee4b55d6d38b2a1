"""One sweep per output directory: the second is refused with the holder's pid, nothing lost."""

from __future__ import annotations

import json
import os
import socket

import pytest

from commsim.cli.main import run_cli
from commsim.sweep.errors import SweepError, SweepLocked
from commsim.sweep.journal import JOURNAL, read_journal
from commsim.sweep.lock import LOCK_FILE, sweep_lock
from commsim.sweep.run import run_sweep
from tests.unit.sweep.helpers import files, kill_session, run_sweep_process, start_gated_sweep
from tests.unit.sweep.test_grid import small_grid



def test_a_held_directory_is_refused_naming_it_and_the_holder(scenario, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with sweep_lock(out):
        assert (out / LOCK_FILE).read_text() == f"pid {os.getpid()} on {socket.gethostname()}\n"
        with pytest.raises(SweepLocked) as err:
            run_sweep(scenario, small_grid(), out, jobs=1)
    text = str(err.value)
    assert text.startswith(f"-o {out}: ") and f"pid {os.getpid()} on " in text and "\n" not in text
    assert isinstance(err.value, SweepError)
    assert not (out / JOURNAL).exists()  # the refused sweep wrote nothing
    assert (out / LOCK_FILE).read_text() == ""  # released, and no stale holder left to read


def test_the_lock_is_released_after_a_run_and_after_a_refusal(scenario, tmp_path):
    out = tmp_path / "out"
    run_sweep(scenario, small_grid(), out, jobs=1)
    with pytest.raises(SweepError, match="--resume"):
        run_sweep(scenario, small_grid(), out, jobs=1)
    res = run_sweep(scenario, small_grid(), out, jobs=1, resume=True)
    assert res.reused == 6
    with sweep_lock(out):
        pass


def test_cli_reports_a_locked_directory_with_exit_2(scenario, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    with sweep_lock(out):
        assert run_cli(["sweep", str(scenario), "-o", str(out), "--grid", "cluster.nodes=1,2", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"commsim: error: -o {out}: is in use by another commsim sweep (pid {os.getpid()} on ")
    assert err.count("\n") == 1


@pytest.mark.parametrize("second_grid", [
    ["cluster.nodes=1,2,4", "cluster.inter_node.bandwidth=25 Gbps,100 Gbps"],   # the same grid
    ["cluster.nodes=8,16"],                                                     # another grid
])
def test_two_sweeps_into_one_directory(scenario, tmp_path, second_grid):
    """A real first sweep holds the directory (gated: it waits, holding the lock, until the
    test lets it go, so no timing is involved); a second one is refused, and the first then
    completes with every point exactly once in its journal and its results."""
    out = tmp_path / "out"
    first = start_gated_sweep([str(scenario), "-o", str(out), "--jobs", "1", "-q", "--grid", "cluster.nodes=1,2,4",
                               "--grid", "cluster.inter_node.bandwidth=25 Gbps,100 Gbps"])
    try:
        assert (out / LOCK_FILE).read_text().startswith(f"pid {first.pid} ")
        second = run_sweep_process([str(scenario), "-o", str(out), "--jobs", "1", "-q",
                                    *[a for g in second_grid for a in ("--grid", g)]])
        assert second.returncode == 2, second.stderr
        assert second.stderr == (f"commsim: error: -o {out}: is in use by another commsim sweep "
                                 f"(pid {first.pid} on {socket.gethostname()}); wait for it to finish "
                                 "or choose another directory\n")
        _, err = first.communicate("go\n", timeout=120)
        assert first.returncode == 0, err
    finally:
        kill_session(first)
    keys = [json.loads(line)["key"] for line in (out / JOURNAL).read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 6
    doc = json.loads((out / "results.json").read_text())
    assert doc["complete"] and doc["points_done"] == 6 and doc["grid"]["cluster.nodes"] == [1, 2, 4]
    run_sweep(scenario, small_grid(), tmp_path / "fresh", jobs=1)
    assert files(out) == files(tmp_path / "fresh")
    assert len(read_journal(out)) == 6
