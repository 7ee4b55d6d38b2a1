"""Tests for validate.launch: gloo ranks on CPU, failures and hangs named, nothing left behind."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.gloo import workers_launch as w  # noqa: E402
from validate.launch import LaunchError, LaunchInterrupted, launch  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[2])
# a launcher process of its own, for the tests that interrupt or kill it; Ctrl-C raises
# KeyboardInterrupt in it even when pytest runs with SIGINT ignored (a background job)
LAUNCHER = ("import json, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from tests.gloo import workers_launch as w; "
            "w.launch_and_report(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4]), "
            "sys.argv[5], sys.argv[6])")


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


def state(pid):
    """The process state letter from /proc (R, S, T for stopped, Z), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def pids_in(path):
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def wait_for(condition, timeout_s, what):
    """Poll `condition` until it holds; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def start_launcher(fn_name, nprocs, timeout_s, args, run_dir, report):
    # a session of its own: signals sent to its group reach neither pytest nor other tests
    return subprocess.Popen([sys.executable, "-c", LAUNCHER, fn_name, str(nprocs), str(timeout_s), json.dumps(args),
                             str(run_dir), str(report)], cwd=ROOT, start_new_session=True)


def kill_all(pids):
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_results_from_every_rank(tmp_path, monkeypatch):
    # without a result_dir: the launch's own temporary folder, removed after a success (one
    # launch for both; a given result_dir is the other tests')
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    out = launch(w.sum_ranks, 2, "gloo", timeout_s=60, args=(10,))
    assert [r["rank"] for r in out] == [0, 1]
    assert all(r["sum"] == 21.0 for r in out)  # (0+10) + (1+10)
    assert not any(alive(r["pid"]) for r in out)
    assert not list(tmp_path.glob("commsim-launch-*"))


def test_dead_rank_is_named_and_partial_results_kept(tmp_path, monkeypatch):
    # without a result_dir: the launch's own temporary folder, kept after a failure and named
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"rank 1 failed: RuntimeError: injected failure at iteration 2") as exc:
        launch(w.die_on_rank, 2, "gloo", timeout_s=30, args=(1, 2))
    assert time.monotonic() - t0 < 30
    assert exc.value.partial[0][:2] == [{"iteration": 0}, {"iteration": 1}]
    assert exc.value.partial[1] == [{"iteration": 0}, {"iteration": 1}]
    left = list(tmp_path.glob("commsim-launch-*"))
    assert len(left) == 1 and str(exc.value).endswith(f"; partial measurements in {left[0]}")
    assert exc.value.result_dir == str(left[0]) and exc.value.measured


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
    with pytest.raises(ValueError, match="timeout must be at least 1 s, got 0.2"):
        launch(w.sum_ranks, 2, timeout_s=0.2)


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

    from validate.launch import _run_rank

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.setenv(key, "")  # _run_rank sets them; restored afterwards
    assert _run_rank(0, 1, "nccl", 0, 5.0, w.sum_ranks, (1,), str(tmp_path), None) == 1
    assert (tmp_path / "rank0.error.txt").read_text().splitlines()[0]


def test_stopped_rank_is_named_within_timeout_and_killed(tmp_path):
    # rank 1 is SIGSTOPped with rank 0 waiting for it in a collective: both made the same
    # progress, so only the heartbeat tells which one stopped; the stopped rank ignores
    # SIGTERM, so it must be killed outright, within the timeout, not after a grace period
    pidfile, stamp, timeout = tmp_path / "pids", tmp_path / "stopped_at", 4.0
    try:
        with pytest.raises(LaunchError) as exc:
            launch(w.stop_self, 2, "gloo", timeout_s=timeout, args=(1, str(pidfile), str(stamp)),
                   result_dir=str(tmp_path / "run"))
        failed_after = time.monotonic() - float(stamp.read_text())
        msg = str(exc.value)
        assert msg.startswith("rank 1 stopped making progress: no heartbeat for "), msg
        assert "(rank 1: stopped by a signal); rank 0 waited for it" in msg
        assert failed_after < timeout + 2.0, f"failed {failed_after:.1f} s after the stop, timeout {timeout} s"
        assert exc.value.partial[0] == [{"iteration": 0}] and exc.value.partial[1] == [{"iteration": 0}]
        assert not any(alive(p) for p in pids_in(pidfile))
    finally:
        kill_all(pids_in(pidfile))


def test_sigkilled_launcher_takes_a_stopped_rank_with_it(tmp_path):
    # a stopped rank runs no thread that could notice its parent is gone: the kernel must
    # kill it (the launcher's own hang timeout, 120 s, is far off)
    pidfile, stamp = tmp_path / "pids", tmp_path / "stopped_at"
    launcher = start_launcher("stop_self", 2, 120, [1, str(pidfile), str(stamp)], tmp_path / "run", tmp_path / "r.json")
    try:
        wait_for(lambda: stamp.exists() and "T" in [state(p) for p in pids_in(pidfile)], 120, "rank 1 to stop")
        launcher.kill()
        launcher.wait(30)
        wait_for(lambda: not any(alive(p) for p in pids_in(pidfile)), 20, "the ranks to die with their launcher")
    finally:
        launcher.kill()
        kill_all(pids_in(pidfile))


def test_a_failed_ranks_children_die_with_it(tmp_path):
    pidfile = tmp_path / "child"
    try:
        with pytest.raises(LaunchError, match="rank 1 failed: RuntimeError: failed after starting a child"):
            launch(w.child_then_fail, 2, "gloo", timeout_s=30, args=(str(pidfile),), result_dir=str(tmp_path / "run"))
        wait_for(lambda: not alive(pids_in(pidfile)[0]), 10, "the rank's child to be killed with its process group")
    finally:
        kill_all(pids_in(pidfile))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupt_kills_the_ranks_and_keeps_the_measurements(tmp_path, sig):
    pidfile, run, report = tmp_path / "pids", tmp_path / "run", tmp_path / "report.json"
    launcher = start_launcher("record_then_wait", 2, 120, [str(pidfile)], run, report)

    def recorded():
        return all(len(w_lines(run / f"rank{r}.jsonl")) == 2 for r in (0, 1))

    try:
        wait_for(recorded, 120, "both ranks' two records")
        if sig == signal.SIGINT:
            os.killpg(launcher.pid, sig)  # what a terminal's Ctrl-C does: the whole foreground group
        else:
            launcher.send_signal(sig)  # `kill PID`
        assert launcher.wait(60) == 130
        rep = json.loads(report.read_text())
        assert rep["type"] == "LaunchInterrupted"
        assert rep["message"] == ("interrupted (Ctrl-C)" if sig == signal.SIGINT else "terminated (SIGTERM)") + \
            f"; partial measurements in {run}"
        assert rep["partial"] == {str(r): [{"iteration": 0}, {"iteration": 1}] for r in (0, 1)}
        assert rep["result_dir"] == str(run)
        wait_for(lambda: not any(alive(p) for p in pids_in(pidfile)), 10, "the ranks to be killed")
    finally:
        launcher.kill()
        kill_all(pids_in(pidfile))


def w_lines(path):
    return path.read_text().splitlines() if path.exists() else []


def test_interrupted_is_a_launch_error_with_its_own_exit_code():
    from commsim.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED

    assert issubclass(LaunchInterrupted, LaunchError)
    assert (LaunchError.exit_code, LaunchInterrupted.exit_code) == (EXIT_RUN_FAILED, EXIT_INTERRUPTED) == (3, 130)


def test_failure_before_any_measurement_says_so(tmp_path, monkeypatch):
    # rank 0 hangs before its first record: no folder of ours is named as holding measurements
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(LaunchError) as exc:
        launch(w.hang_on_rank, 2, "gloo", timeout_s=3, args=(0, 0, str(tmp_path / "pids")))
    assert str(exc.value).endswith("; no measurements were taken") and "partial measurements" not in str(exc.value)
    assert exc.value.partial == {0: [], 1: []} and exc.value.result_dir is None and not exc.value.measured
    assert not list(tmp_path.glob("commsim-launch-*"))


def test_rank_leaves_cleanly_while_a_gloo_worker_frees_a_tensor(tmp_path):
    # the numerics job's intermittent abort after complete results ("terminate called
    # without an active exception", exit code -6), made certain by the rank function: a
    # rank must not shut its interpreter down while torch's threads may still take the GIL
    out = launch(w.release_during_shutdown, 2, "gloo", timeout_s=60, args=(str(tmp_path),),
                 result_dir=str(tmp_path / "run"))
    assert out == [{"rank": 0}, {"rank": 1}]


def test_sigterm_raises_once_while_watching():
    # the first SIGTERM ends the watch; a second one, while the ranks are being killed,
    # must not break off their killing (and afterwards SIGTERM's own action is back)
    from validate.launch import _sigterm_raises, _Terminated

    before = signal.getsignal(signal.SIGTERM)
    with _sigterm_raises():
        with pytest.raises(_Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)  # the handler runs at the next bytecode: well before this ends
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
    assert signal.getsignal(signal.SIGTERM) is before
