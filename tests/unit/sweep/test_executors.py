"""Executors: pool workers never outlive the sweep (SIGKILL, SIGTERM, Ctrl-C, a dead worker)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from commsim.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED
from commsim.sweep.executors import init_worker, stop_workers, watch_sweep
from commsim.sweep.journal import JOURNAL, read_journal
from commsim.sweep.lock import sweep_lock
from tests.unit.sweep.helpers import alive, children, kill_session, poll, start_sweep

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# 8 points of about a second each on one core: long enough that the sweep is surely mid-way
# when a test acts on it (each test acts as soon as what it waits for is there, polling every
# 10 ms; after the first finished point 7 are left, at least 3 points' time on 2 workers).
SLOW = ["--steps", "10000",  # ~1 s a point here (20,000 waited 5-13 s for the first point under load)
        "--grid", "cluster.nodes=4,5,6,7", "--grid", "stragglers[0].cv=0.01,0.02"]


def test_watch_sweep_exits_once_the_sweep_is_gone():
    answers = iter([True, True, False])
    exits = []
    watch_sweep(lambda: next(answers), exit=exits.append, interval=0)
    assert exits == [1]


def _dispositions():
    return signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
def test_workers_ignore_sigint_and_take_sigterm_by_default():
    with ProcessPoolExecutor(1, initializer=init_worker, initargs=(os.getpid(),)) as pool:
        assert pool.submit(_dispositions).result(timeout=60) == (signal.SIG_IGN, signal.SIG_DFL)


def test_stop_workers_does_not_wait_for_the_points_in_flight():
    pool = ProcessPoolExecutor(2, initializer=init_worker, initargs=(os.getpid(),))
    futures = [pool.submit(time.sleep, 600) for _ in range(4)]
    poll(lambda: len(pool._processes or {}) == 2 and any(f.running() for f in futures), what="workers busy")
    procs = list(pool._processes.values())
    t0 = time.monotonic()
    stop_workers(pool)
    assert time.monotonic() - t0 < 30
    # by pid, not Process.is_alive(): the executor's own thread may reap a worker first, and
    # is_alive() then reports True for a child it can no longer wait for (waitpid: ECHILD)
    assert not any(alive(p.pid) for p in procs)


def _start(scenario, out, *extra):
    from subprocess import DEVNULL, PIPE

    return start_sweep([str(scenario), "-o", str(out), "--jobs", "2", "-q", *SLOW, *extra],
                       stdout=DEVNULL, stderr=PIPE, text=True)


def _workers(proc):
    poll(lambda: len(children(proc.pid)) >= 2, what="two pool workers", proc=proc)
    return children(proc.pid)


@linux_only
def test_sigkill_of_the_sweep_takes_its_workers_with_it(scenario, tmp_path):
    proc = _start(scenario, tmp_path / "out")
    try:
        workers = _workers(proc)
        os.kill(proc.pid, signal.SIGKILL)  # the sweep alone, not its process group
        proc.wait(timeout=60)
        poll(lambda: not any(alive(w) for w in workers), timeout=30, what=f"workers {workers} gone")
    finally:
        kill_session(proc)
    with sweep_lock(tmp_path / "out"):  # nothing holds the directory any more
        pass


@linux_only
def test_sigterm_stops_the_sweep_like_ctrl_c(scenario, tmp_path):
    out = tmp_path / "out"
    proc = _start(scenario, out)
    try:
        workers = _workers(proc)
        poll(lambda: (out / JOURNAL).exists() and (out / JOURNAL).read_bytes().count(b"\n") >= 1,
             what="a finished point", proc=proc)
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == EXIT_INTERRUPTED, err
        assert not any(alive(w) for w in workers)  # stopped and reaped before the sweep exited
    finally:
        kill_session(proc)
    saved = len(read_journal(out))
    assert err == (f"commsim: error: interrupted: {saved} of 8 points saved in {out}; "
                   "rerun with --resume to complete the sweep\n")
    assert 1 <= saved < 8
    assert json.loads((out / "results.json").read_text())["points_done"] == saved
    with sweep_lock(out):
        pass


@linux_only
def test_ctrl_c_on_the_process_group_is_one_line_and_leaves_no_worker(scenario, tmp_path):
    """A terminal's Ctrl-C reaches the sweep and its workers: no worker traceback, exit 130."""
    out = tmp_path / "out"
    proc = _start(scenario, out)
    try:
        workers = _workers(proc)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == EXIT_INTERRUPTED, err
        assert not any(alive(w) for w in workers)
    finally:
        kill_session(proc)
    assert err.startswith("commsim: error: interrupted: ") and err.count("\n") == 1


@linux_only
def test_a_worker_killed_under_a_point_fails_the_run_with_exit_3(scenario, tmp_path):
    out = tmp_path / "out"
    proc = _start(scenario, out)
    try:
        workers = _workers(proc)
        poll(lambda: (out / JOURNAL).exists() and (out / JOURNAL).read_bytes().count(b"\n") >= 1,
             what="a finished point", proc=proc)
        os.kill(workers[0], signal.SIGKILL)  # what the OOM killer does
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == EXIT_RUN_FAILED, err
        assert not any(alive(w) for w in workers)
    finally:
        kill_session(proc)
    saved = len(read_journal(out))
    assert err.startswith("commsim: error: a worker process died while running grid point ")
    assert f"{saved} of 8 points saved in {out}; rerun with --resume" in err and err.count("\n") == 1
    assert json.loads((out / "results.json").read_text())["points_done"] == saved
