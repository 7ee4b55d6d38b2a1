"""Rank functions for tests/test_launch.py (module level: spawned ranks import them)."""

import os
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
