"""Rank functions for tests/test_launch.py (module level: spawned ranks import them)."""

import os
import sys
import threading
import time

import torch
import torch.distributed as dist


def sum_ranks(ctx, value):
    t = torch.tensor([float(ctx.rank + value)])
    dist.all_reduce(t)
    ctx.progress({"rank": ctx.rank, "sum": t.item()})
    return {"rank": ctx.rank, "sum": t.item(), "pid": os.getpid()}


def die_on_rank(ctx, bad_rank, after):
    for i in range(after + 1):
        if ctx.rank == bad_rank and i == after:
            raise RuntimeError(f"injected failure at iteration {i}")
        t = torch.ones(4)
        dist.all_reduce(t)
        ctx.progress({"iteration": i})
    return "done"


def hang_on_rank(ctx, bad_rank, after, pidfile):
    with open(pidfile, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    for i in range(100):
        if ctx.rank == bad_rank and i == after:
            time.sleep(3600)  # hung before reaching the collective
        ctx.progress()
        t = torch.ones(4)
        dist.all_reduce(t)
        ctx.progress({"iteration": i})
    return "done"


def hard_exit(ctx):
    if ctx.rank == 1:
        os._exit(7)  # dies without a word (segfault, OOM kill)
    dist.barrier()
    return "done"


def repeated_inplace_sums(ctx, size, iters):
    """collective_bench's in-place check with ONE buffer, so it is reduced `iters` times
    (the sums grow past float32's exact 2^24)."""
    from validate import collective_bench

    collective_bench.buffer_count = lambda size, device: 1
    return collective_bench.bench_size(size, 1, iters, True, torch.device("cpu"))


def common_start_then_clock(ctx, delay_rank):
    """validate.replay.common_start after rank `delay_rank` arrives late: (start, clock after)."""
    from validate.replay import common_start

    if ctx.rank == delay_rank:
        time.sleep(0.3)
    start = common_start(ctx.device)
    return [start, time.monotonic()]


class _HoldShutdown:
    """Keeps the interpreter's shutdown going: module globals are cleared after the
    interpreter is marked as finalizing, and then this __del__ sleeps with the GIL released
    (its helper bound early: builtins are gone by then)."""

    def __del__(self, _sleep=time.sleep):
        _sleep(1.0)


class _ReleasedByWorker:
    """Attached to a tensor that only a gloo worker thread still holds: its __del__ runs in
    that thread when it lets go of the finished collective, and then, as a loaded machine
    may delay a thread, keeps taking the GIL until the interpreter's shutdown has begun."""

    def __init__(self, started):
        self.started = started

    def __del__(self, _sleep=time.sleep, _finalizing=sys.is_finalizing, _now=time.monotonic):
        self.started.set()
        if threading.current_thread() is threading.main_thread():
            return
        give_up = _now() + 60.0
        while not _finalizing() and _now() < give_up:
            _sleep(0.01)


def release_during_shutdown(ctx, folder):
    """The numerics job's abort at exit, made certain: a process group kept alive past
    destroy_process_group (DDP's constructor imports torch._inductor, which leaves references
    to the group behind) whose gloo worker takes the GIL to free a finished collective's
    tensor while the interpreter shuts down."""
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    DDP(nn.Linear(2, 1))
    dropped = os.path.join(folder, "rank0.dropped")
    if ctx.rank == 1:  # joins the collective only once rank 0 holds no Python reference to it
        while not os.path.exists(dropped):
            time.sleep(0.01)
        dist.all_reduce(torch.ones(16))
        return {"rank": 1}
    started = threading.Event()
    t = torch.ones(16)
    t.guard = _ReleasedByWorker(started)
    work = dist.all_reduce(t, async_op=True)
    del t, work
    open(dropped, "w").close()
    if not started.wait(60.0):
        raise RuntimeError("the collective's tensor was never released")
    global _HOLD
    _HOLD = _HoldShutdown()
    return {"rank": 0}


def _note_pid(pidfile):
    with open(pidfile, "a") as fh:
        fh.write(f"{os.getpid()}\n")


def stop_self(ctx, stop_rank, pidfile, stampfile):
    """Rank `stop_rank` SIGSTOPs itself right before a collective (after its progress mark,
    as a rank stopped inside the collective): the others wait for it there."""
    import signal

    _note_pid(pidfile)
    for i in range(100):
        ctx.progress()
        if ctx.rank == stop_rank and i == 1:
            with open(stampfile, "w") as fh:
                fh.write(repr(time.monotonic()))
            os.kill(os.getpid(), signal.SIGSTOP)
        dist.all_reduce(torch.ones(4))
        ctx.progress({"iteration": i})
    return "done"


def record_then_wait(ctx, pidfile):
    """Two records, then progress without end (no hang): only an interrupt ends the run."""
    _note_pid(pidfile)
    for i in range(2):
        dist.all_reduce(torch.ones(4))
        ctx.progress({"iteration": i})
    while True:
        ctx.progress()
        time.sleep(0.05)


def child_then_fail(ctx, pidfile):
    """Rank 1 starts a child process (which would outlive it), then fails."""
    import subprocess

    if ctx.rank == 1:
        child = subprocess.Popen(["sleep", "600"])
        with open(pidfile, "a") as fh:
            fh.write(f"{child.pid}\n")
        raise RuntimeError("failed after starting a child")
    dist.barrier()
    return "done"


def launch_and_report(fn_name, nprocs, timeout_s, args, result_dir, report):
    """A launcher process for tests that signal or kill it: runs launch() and writes how it
    ended to `report` (JSON), exiting with the error's exit code."""
    import json

    from validate.launch import LaunchError, launch

    fn = globals()[fn_name]
    try:
        out = launch(fn, nprocs, "gloo", timeout_s=timeout_s, args=tuple(args), result_dir=result_dir)
    except LaunchError as exc:
        with open(report, "w") as fh:
            json.dump({"type": type(exc).__name__, "message": str(exc), "result_dir": exc.result_dir,
                       "partial": {str(r): recs for r, recs in exc.partial.items()}}, fh)
        raise SystemExit(exc.exit_code)
    with open(report, "w") as fh:
        json.dump({"type": None, "results": out}, fh)
