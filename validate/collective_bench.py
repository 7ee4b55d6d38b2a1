"""All-reduce size sweep with nccl-tests' conventions, on torch.distributed.

Conventions (NVIDIA/nccl-tests, src/common.cu and doc/PERFORMANCE.md):

- sizes from `min_size` to `max_size`, doubling; float32 elements (count = size / 4);
- untimed warm-up iterations, then timed iterations;
- each timed iteration is timed on every rank, and the iteration's time is the maximum over
  ranks (the collective is done when the last rank is done); we report the mean of those
  maxima (what nccl-tests prints) and keep the median;
- algbw = size / time, busbw = algbw * 2(n-1)/n;
- out-of-place: torch's all_reduce works in place, so out-of-place is timed as copying the
  send buffer into the receive buffer and all-reducing that (the cost of out-of-place
  semantics in torch); in-place times the all_reduce alone (what DDP does to a bucket);
- an optional correctness check (rank r contributes r+1 in every element; the sum must be
  n(n+1)/2): the #wrong column counts wrong elements.

Timing: CPU tensors (gloo) with time.perf_counter; CUDA tensors (nccl) with CUDA events
around each iteration, after torch.cuda.synchronize, so the host clock never reads an
unfinished kernel. A barrier before each timed iteration starts the ranks together.

Run under torchrun: ``torchrun --nproc-per-node 2 -m validate.collective_bench --backend gloo``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Callable, List, Optional

import torch
import torch.distributed as dist

ELEMENT_BYTES = 4


def sweep_sizes(min_size: int, max_size: int) -> List[int]:
    """min_size, 2*min_size, ... <= max_size (multiples of 4 bytes: float32 elements)."""
    if min_size < ELEMENT_BYTES or max_size < min_size:
        raise ValueError(f"need {ELEMENT_BYTES} <= min_size <= max_size, got {min_size}, {max_size}")
    out, s = [], min_size
    while s <= max_size:
        out.append(s)
        s *= 2
    return out


class _Timer:
    """Times one region on this rank: perf_counter on CPU, CUDA events on GPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.start_ev = torch.cuda.Event(enable_timing=True)
            self.end_ev = torch.cuda.Event(enable_timing=True)

    def time(self, fn: Callable[[], None]) -> float:
        if self.cuda:
            torch.cuda.synchronize()
            self.start_ev.record()
            fn()
            self.end_ev.record()
            torch.cuda.synchronize()
            return self.start_ev.elapsed_time(self.end_ev) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0


def _max_over_ranks(values: List[float], device: torch.device) -> List[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def bench_size(size: int, warmup: int, iters: int, check: bool, device: torch.device,
               progress: Optional[Callable] = None) -> dict:
    """One row: out-of-place and in-place timings of an all-reduce of `size` bytes."""
    n, rank = dist.get_world_size(), dist.get_rank()
    count = size // ELEMENT_BYTES
    send = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)
    recv = torch.empty_like(send)
    timer = _Timer(device)
    row = {"size_bytes": count * ELEMENT_BYTES, "count": count, "type": "float", "redop": "sum",
           "root": -1, "world_size": n}
    expected = n * (n + 1) / 2

    def out_of_place():
        recv.copy_(send)
        dist.all_reduce(recv)

    def in_place():
        dist.all_reduce(recv)

    for name, op, reset in (("out_of_place", out_of_place, None), ("in_place", in_place, True)):
        for _ in range(warmup):
            if reset:
                recv.copy_(send)
            op()
        times = []
        wrong = 0
        for _ in range(iters):
            if reset:
                recv.copy_(send)
            if progress:
                progress()
            dist.barrier()
            times.append(timer.time(op))
            if check:
                wrong += int((recv != expected).sum().item())
        per_iter = _max_over_ranks(times, device)
        mean = statistics.fmean(per_iter)
        alg = row["size_bytes"] / mean
        row[name] = {
            "time_s": mean,
            "time_median_s": statistics.median(per_iter),
            "algbw_Bps": alg,
            "busbw_Bps": alg * 2 * (n - 1) / n,
            "wrong": (int(_max_over_ranks([float(wrong)], device)[0]) if check else None),
        }
    return row


def format_header() -> str:
    return "\n".join([
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    ])


def _time_cell(us: float) -> str:
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def format_row(row: dict) -> str:
    cells = [f"{row['size_bytes']:12d}  {row['count']:12d}  {row['type']:>8s}  {row['redop']:>6s}  {row['root']:6d}"]
    for g in ("out_of_place", "in_place"):
        t = row[g]
        wrong = "N/A" if t["wrong"] is None else str(t["wrong"])
        cells.append(f"{_time_cell(t['time_s'] * 1e6)}  {t['algbw_Bps'] / 1e9:6.2f}  {t['busbw_Bps'] / 1e9:6.2f}  {wrong:>6s}")
    return "  ".join(cells)


def run_sweep(sizes: List[int], warmup: int, iters: int, check: bool, device: torch.device,
              progress: Optional[Callable] = None, echo: Optional[Callable[[str], None]] = None) -> List[dict]:
    """The whole sweep on the current process group; `echo` prints the table as it runs."""
    rows = []
    if echo:
        echo(format_header())
    for size in sizes:
        row = bench_size(size, warmup, iters, check, device, progress)
        rows.append(row)
        if progress:
            progress(row)
        if echo:
            echo(format_row(row))
    if echo and rows:
        avg = statistics.fmean(r["out_of_place"]["busbw_Bps"] for r in rows) / 1e9
        echo(f"# Avg bus bandwidth    : {avg:g}")
    return rows


def rank_sweep(ctx, sizes, warmup, iters, check):
    """validate.launch entry point: the sweep on one rank; rank 0 prints the table."""
    echo = (lambda line: print(line, flush=True)) if ctx.rank == 0 else None
    rows = run_sweep(sizes, warmup, iters, check, torch.device(ctx.device),
                     progress=lambda rec=None: ctx.progress(rec if ctx.rank == 0 else None), echo=echo)
    return rows if ctx.rank == 0 else None


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point under torchrun (reads RANK/WORLD_SIZE/MASTER_* from the environment)."""
    import datetime

    ap = argparse.ArgumentParser(prog="python -m validate.collective_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    ap.add_argument("--min-size", type=int, default=8, help="bytes (default 8)")
    ap.add_argument("--max-size", type=int, default=1 << 24, help="bytes (default 16 MiB)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--check", action="store_true", help="check the sums (#wrong column)")
    ap.add_argument("--timeout", type=float, default=300.0, help="process-group timeout, seconds")
    ap.add_argument("--json", default=None, help="rank 0 writes the rows here")
    a = ap.parse_args(argv)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cpu")
    if a.backend == "gloo":
        torch.set_num_threads(1)  # the local ranks share the cores
    if a.backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    dist.init_process_group(a.backend, timeout=datetime.timedelta(seconds=a.timeout))
    try:
        rank = dist.get_rank()
        echo = (lambda line: print(line, flush=True)) if rank == 0 else None
        rows = run_sweep(sweep_sizes(a.min_size, a.max_size), a.warmup, a.iters, a.check, device, echo=echo)
        if rank == 0 and a.json:
            tmp = a.json + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(rows, fh, indent=1)
            os.replace(tmp, a.json)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
