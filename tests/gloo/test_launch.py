"""Tests for validate.launch: gloo ranks on CPU, failures and hangs named, nothing left behind."""

import os
import time

import pytest

pytest.importorskip("torch")

from tests.gloo import workers_launch as w  # noqa: E402
from validate.launch import LaunchError, launch  # noqa: E402


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not running: read its state
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_results_from_every_rank(tmp_path):
    out = launch(w.sum_ranks, 2, "gloo", timeout_s=60, args=(10,), result_dir=str(tmp_path))
    assert [r["rank"] for r in out] == [0, 1]
    assert all(r["sum"] == 21.0 for r in out)  # (0+10) + (1+10)
    assert not any(alive(r["pid"]) for r in out)


def test_dead_rank_is_named_and_partial_results_kept(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"rank 1 failed: RuntimeError: injected failure at iteration 2") as exc:
        launch(w.die_on_rank, 2, "gloo", timeout_s=30, args=(1, 2), result_dir=str(tmp_path))
    assert time.monotonic() - t0 < 30
    assert exc.value.partial[0][:2] == [{"iteration": 0}, {"iteration": 1}]
    assert exc.value.partial[1] == [{"iteration": 0}, {"iteration": 1}]


def test_hung_rank_is_named_within_timeout_and_killed(tmp_path):
    pidfile = tmp_path / "pids"
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"rank 0 hung: no progress for 3 s"):
        launch(w.hang_on_rank, 2, "gloo", timeout_s=3, args=(0, 2, str(pidfile)), result_dir=str(tmp_path))
    elapsed = time.monotonic() - t0
    pids = [int(x) for x in pidfile.read_text().split()]
    assert len(pids) == 2 and not any(alive(p) for p in pids)
    assert elapsed < 60  # start-up + 3 s + teardown


def test_silent_death_is_named(tmp_path):
    with pytest.raises(LaunchError, match=r"rank 1 failed: exit code 7 \(died without reporting an error\)"):
        launch(w.hard_exit, 2, "gloo", timeout_s=20, result_dir=str(tmp_path))


def test_bad_arguments():
    with pytest.raises(ValueError, match="backend"):
        launch(w.sum_ranks, 2, "mpi")
    with pytest.raises(ValueError, match="nprocs"):
        launch(w.sum_ranks, 0)


def test_nccl_without_enough_gpus_fails_in_one_line(tmp_path):
    import torch

    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    n = found + 1  # always one more than this machine has
    with pytest.raises(ValueError, match=rf"^--backend nccl needs {n} CUDA GPUs?, found {found}$"):
        launch(w.sum_ranks, n, "nccl", timeout_s=10, result_dir=str(tmp_path))
    assert not list(tmp_path.glob("rank*"))  # refused before any rank started


def test_rank_setup_failure_is_reported_not_raised(tmp_path, monkeypatch):
    # a rank whose device setup fails (here: nccl asked for on a machine without that GPU)
    # writes its one-line error for the parent and exits 1, like any other failure
    import torch

    from validate.launch import _rank_main

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.setenv(key, "")  # _rank_main sets them; restored afterwards
    with pytest.raises(SystemExit) as exc:
        _rank_main(0, 1, "nccl", 0, 5.0, w.sum_ranks, (1,), str(tmp_path), None, os.getppid())
    assert exc.value.code == 1
    assert (tmp_path / "rank0.error.txt").read_text().splitlines()[0]


def test_own_temporary_folder_removed_after_success_kept_after_failure(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    launch(w.sum_ranks, 2, "gloo", timeout_s=60, args=(1,))
    assert not list(tmp_path.glob("commsim-launch-*"))
    with pytest.raises(LaunchError) as exc:
        launch(w.die_on_rank, 2, "gloo", timeout_s=30, args=(1, 0))
    left = list(tmp_path.glob("commsim-launch-*"))
    assert len(left) == 1 and str(left[0]) in str(exc.value)
