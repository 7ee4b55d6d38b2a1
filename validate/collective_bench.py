"""All-reduce size sweep with nccl-tests' conventions, on torch.distributed.

Conventions (NVIDIA/nccl-tests, src/common.cu and doc/PERFORMANCE.md):

- sizes from `min_size` to `max_size`, doubling; float32 elements (count = size / 4);
- untimed warm-up iterations, then timed iterations, back to back after a barrier;
- each timed iteration is timed on every rank (from the previous iteration's end), and the
  iteration's time is the maximum over ranks (the collective is done when the last rank is
  done); we report the mean of those maxima (what nccl-tests prints) and keep the median;
- CPU tensors cycle through enough buffers to defeat the caches (see buffer_count);
- algbw = size / time, busbw = algbw * 2(n-1)/n;
- out-of-place: torch's all_reduce works in place, so out-of-place is timed as copying the
  send buffer into the receive buffer and all-reducing that (the cost of out-of-place
  semantics in torch); in-place times the all_reduce alone (what DDP does to a bucket);
- an optional correctness check (rank r contributes r+1 in every element; the sum must be
  n(n+1)/2, times n for every further in-place reduction): the #wrong column counts
  elements off by more than a relative 1e-5 (float32 rounds sums past 2^24).

Timing: CPU tensors (gloo) with time.perf_counter; CUDA tensors (nccl) with a CUDA event
after each iteration, read after torch.cuda.synchronize.

Run it as ``python -m validate.collective_bench`` (it launches its ranks) or under torchrun
(``torchrun --nproc-per-node 2 -m validate.collective_bench --backend gloo``); ``--help``
lists the options.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Callable, List, Optional

import click
import torch
import torch.distributed as dist

from commsim.atomic import atomic_write_text
from commsim.collectives.busbw import algbw, busbw
from commsim.output.nccl_table import nccl_table_header, time_cell
from commsim.paramtypes import iterations
from validate.entry import CONTEXT, BenchSize, check_local_ranks, check_sweep_memory, Failure, check_outputs, run_command, save_partial, timeout_seconds
from validate.launch import LaunchError, launch

ELEMENT_BYTES = 4
COLD_BYTES = 64 * 1024 * 1024
MAX_BUFFERS = 64
# float32 sums are exact only up to 2^24; repeated in-place reductions round past it
SUM_RTOL = 1e-5


def sweep_sizes(min_size: int, max_size: int) -> List[int]:
    """min_size, 2*min_size, ... <= max_size (multiples of 4 bytes: float32 elements)."""
    if min_size < ELEMENT_BYTES or max_size < min_size:
        raise ValueError(f"need {ELEMENT_BYTES} <= min_size <= max_size, got {min_size}, {max_size}")
    out, s = [], min_size
    while s <= max_size:
        out.append(s)
        s *= 2
    return out


class _Clock:
    """Timestamps after each back-to-back iteration: perf_counter on CPU, CUDA events on GPU
    (the host clock never reads an unfinished kernel)."""

    def __init__(self, device: torch.device, count: int):
        self.cuda = device.type == "cuda"
        self.marks: list = []
        if self.cuda:
            self.events = [torch.cuda.Event(enable_timing=True) for _ in range(count + 1)]

    def mark(self) -> None:
        if self.cuda:
            self.events[len(self.marks)].record()
            self.marks.append(None)
        else:
            self.marks.append(time.perf_counter())

    def intervals(self) -> List[float]:
        if self.cuda:
            torch.cuda.synchronize()
            ev = self.events[: len(self.marks)]
            return [a.elapsed_time(b) / 1e3 for a, b in zip(ev, ev[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def _max_over_ranks(values: List[float], device: torch.device) -> List[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def buffer_count(size: int, device: torch.device, cold_bytes: int = COLD_BYTES) -> int:
    """How many buffers a size cycles through. CPU: enough to exceed `cold_bytes` (at most
    MAX_BUFFERS), because DDP reduces each bucket from its own memory, cold in the caches,
    and a 1 MiB all-reduce from a cache-hot buffer is about twice as fast on a CPU. CUDA:
    one, as nccl-tests does."""
    if device.type == "cuda":
        return 1
    return max(1, min(MAX_BUFFERS, -(-cold_bytes // max(size, 1))))


# Iterations between two progress marks within a size: the hang timer counts marks, and a size
# of many long iterations (--iters 100000 of 16 MB over gloo is most of an hour) would otherwise
# read as a hung run. Every rank runs the same iterations, so the counts stay level; a mark is
# a few shared-memory writes, under a microsecond in one of these iterations.
BEAT_EVERY = 64


def _beat(progress: Optional[Callable], i: int) -> None:
    if progress and i % BEAT_EVERY == BEAT_EVERY - 1:
        progress()


def bench_size(size: int, warmup: int, iters: int, check: bool, device: torch.device,
               progress: Optional[Callable] = None) -> dict:
    """One row: out-of-place and in-place timings of an all-reduce of `size` bytes.

    Iterations run back to back after a barrier, as nccl-tests times them (a pipeline of
    collectives, like DDP's buckets); iteration i lasts from the end of iteration i-1 (the
    barrier for the first) to its own end on each rank, and its time is the max over ranks."""
    n, rank = dist.get_world_size(), dist.get_rank()
    count = size // ELEMENT_BYTES
    k = buffer_count(size, device)
    sends = [torch.full((count,), float(rank + 1), dtype=torch.float32, device=device) for _ in range(k)]
    recvs = [torch.empty_like(sends[0]) for _ in range(k)]
    row = {"size_bytes": count * ELEMENT_BYTES, "count": count, "type": "float", "redop": "sum",
           "root": -1, "world_size": n, "buffers": k}
    expected = n * (n + 1) / 2

    def out_of_place(i):
        recvs[i % k].copy_(sends[i % k])
        dist.all_reduce(recvs[i % k])

    def in_place(i):
        dist.all_reduce(recvs[i % k])

    for name, op in (("out_of_place", out_of_place), ("in_place", in_place)):
        for i in range(warmup):
            op(i)
            _beat(progress, i)
        wrong = 0
        if name == "in_place":
            for b in range(k):
                recvs[b].copy_(sends[b])
        if progress:
            progress()
        clock = _Clock(device, iters)
        dist.barrier()
        clock.mark()
        for i in range(iters):
            op(i)
            clock.mark()
            _beat(progress, i)
        per_iter = _max_over_ranks(clock.intervals(), device)
        if check:  # after the timed loop: each buffer was reduced a known number of times
            for b in range(k):
                times_reduced = len(range(b, iters, k)) if name == "in_place" else min(1, len(range(b, iters, k)))
                if times_reduced:
                    want = expected * (n ** (times_reduced - 1)) if name == "in_place" else expected
                    # relative tolerance: past 2^24 the float32 sums round (each reduction
                    # rounds again), so an exact comparison calls a correct run wrong
                    ok = torch.isclose(recvs[b], torch.full_like(recvs[b], want), rtol=SUM_RTOL, atol=0.0)
                    wrong += int((~ok).sum().item())
        mean = statistics.fmean(per_iter)
        row[name] = {
            "time_s": mean,
            "time_median_s": statistics.median(per_iter),
            "algbw_Bps": algbw(row["size_bytes"], mean),
            "busbw_Bps": busbw("all_reduce", row["size_bytes"], mean, n),
            "wrong": (int(_max_over_ranks([float(wrong)], device)[0]) if check else None),
        }
    return row


def format_header() -> str:
    """all_reduce_perf's header with both column groups and #wrong."""
    return nccl_table_header(in_place=True)


def format_row(row: dict) -> str:
    cells = [f"{row['size_bytes']:12d}  {row['count']:12d}  {row['type']:>8s}  {row['redop']:>6s}  {row['root']:6d}"]
    for g in ("out_of_place", "in_place"):
        t = row[g]
        wrong = "N/A" if t["wrong"] is None else str(t["wrong"])
        cells.append(f"{time_cell(t['time_s'] * 1e6)}  {t['algbw_Bps'] / 1e9:6.2f}  {t['busbw_Bps'] / 1e9:6.2f}  {wrong:>6s}")
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


# where rank 0 prints the sweep's table: this script's own output; a command whose stdout holds
# another document (calibrate -o -) or that is quiet (-q) sends it to stderr or nowhere
TABLE_STREAMS = ("stdout", "stderr", None)


def rank_sweep(ctx, sizes, warmup, iters, check, table="stdout"):
    """validate.launch entry point: the sweep on one rank; rank 0 prints the table on `table`
    (:data:`TABLE_STREAMS`)."""
    stream = {"stdout": sys.stdout, "stderr": sys.stderr}.get(table)
    echo = (lambda line: print(line, file=stream, flush=True)) if ctx.rank == 0 and stream is not None else None
    rows = run_sweep(sizes, warmup, iters, check, torch.device(ctx.device),
                     progress=lambda rec=None: ctx.progress(rec if ctx.rank == 0 else None), echo=echo)
    return rows if ctx.rank == 0 else None


HELP = """All-reduce size sweep on torch.distributed, printed as nccl-tests' all_reduce_perf table.

\b
Without torchrun it launches --nprocs local ranks itself:
  python -m validate.collective_bench --backend gloo --nprocs 2 --max-size 16M --check
Under torchrun every process is one rank:
  torchrun --nproc-per-node 2 -m validate.collective_bench --backend gloo --max-size 16M

Sizes double from --min-size to --max-size (float32 elements). Each size is timed out of
place and in place after --warmup untimed iterations: --iters back-to-back iterations, each
the slowest rank's time; the table shows their mean, with algbw and busbw as nccl-tests
computes them. Exit codes: 0 done, 2 bad input, 3 a rank failed or hung (what was measured
is kept), 130 interrupted.
"""


@click.command(help=HELP, context_settings=CONTEXT)
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo", show_default=True,
              help="Process-group backend: gloo (CPU tensors) or nccl (CUDA tensors, one GPU per rank).")
@click.option("--nprocs", type=click.IntRange(min=1), default=2, show_default=True,
              help="Local ranks to launch when run without torchrun (under torchrun, --nproc-per-node decides).")
@click.option("--min-size", type=BenchSize(), default="8", show_default=True,
              help="Smallest all-reduce, in bytes; K/M/G are binary (64K = 65536).")
@click.option("--max-size", type=BenchSize(), default="16M", show_default=True,
              help="Largest all-reduce, in bytes; the sizes double from --min-size up to it.")
@click.option("--warmup", type=iterations(0), default=3, show_default=True,
              help="Untimed iterations per size and column group.")
@click.option("--iters", type=iterations(1), default=10, show_default=True,
              help="Timed iterations per size and column group.")
@click.option("--check", is_flag=True,
              help="Check the sums (rank r contributes r+1) and count wrong elements in the #wrong columns.")
@click.option("--timeout", "timeout_s", type=timeout_seconds(), default=300.0, show_default=True,
              help="Seconds. Without torchrun: no progress for this long fails the run, naming the rank; "
                   "under torchrun: the process group's timeout.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the rows here as JSON (after a failure, what was measured goes to JSON.partial.json).")
def command(backend, nprocs, min_size, max_size, warmup, iters, check, timeout_s, json_path):
    check_local_ranks(nprocs)
    check_outputs({"--json": json_path})
    if not ELEMENT_BYTES <= min_size <= max_size:
        raise Failure(f"--min-size {min_size}, --max-size {max_size}: expected {ELEMENT_BYTES} <= --min-size <= --max-size "
                      "(bytes of float32 elements)")
    sizes = sweep_sizes(min_size, max_size)
    if not under_torchrun():  # under torchrun the ranks are already running: each checks nothing
        check_sweep_memory(backend, nprocs, max_size)
    if under_torchrun():
        world = int(os.environ["WORLD_SIZE"])
        source = click.get_current_context().get_parameter_source("nprocs")
        if source is not click.core.ParameterSource.DEFAULT and nprocs != world:
            raise Failure(f"--nprocs {nprocs}, but torchrun started {world} ranks: leave --nprocs out under torchrun")
        rows = _torchrun_sweep(backend, sizes, warmup, iters, check, timeout_s)
    else:
        try:
            rows = launch(rank_sweep, nprocs, backend, timeout_s, args=(sizes, warmup, iters, check))[0]
        except LaunchError as exc:
            if not (json_path and exc.partial.get(0)):  # nothing measured: no file to point to
                raise
            saved = save_partial(json_path, {"error": str(exc), "rows": exc.partial[0]})
            raise type(exc)(f"{exc} (rows measured so far saved to {saved})", exc.partial, exc.result_dir)
    if rows is not None and json_path:
        atomic_write_text(json_path, json.dumps(rows, indent=1) + "\n")


def under_torchrun() -> bool:
    """Whether torchrun (or another launcher of that kind) started this process as one rank."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def _torchrun_sweep(backend: str, sizes: List[int], warmup: int, iters: int, check: bool,
                    timeout_s: float) -> Optional[List[dict]]:
    """The sweep as one rank of a torchrun job (RANK, WORLD_SIZE, MASTER_* from the
    environment); rank 0 prints the table and returns the rows, the others None."""
    import datetime

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cpu")
    if backend == "gloo":
        torch.set_num_threads(1)  # the local ranks share the cores
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    try:
        rank = dist.get_rank()
        echo = (lambda line: print(line, flush=True)) if rank == 0 else None
        rows = run_sweep(sizes, warmup, iters, check, device, echo=echo)
    finally:
        dist.destroy_process_group()
    return rows if rank == 0 else None


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m validate.collective_bench``: run the command, return its exit code."""
    return run_command(command, argv, prog_name="python -m validate.collective_bench")


if __name__ == "__main__":
    sys.exit(main())
