"""Measure this machine and build a calibration (what ``commsim calibrate --backend`` runs).

Launches `nprocs` local ranks (:mod:`validate.launch`); each runs the all-reduce sweep
(:mod:`validate.collective_bench`) and then times the synthetic model's forward/backward
(:mod:`validate.compute_timing`). The calibration is fitted from the sweep's *in-place*
times (the mean over iterations of each iteration's maximum over ranks, as nccl-tests
reports it): torch's all_reduce is in place, and so is DDP's all-reduce of a bucket.
"""

from __future__ import annotations

import socket
import statistics
from typing import Callable, List, Optional

import torch

from commsim import calibration as calib
from validate import collective_bench, compute_timing
from validate.launch import launch

COMPUTE_BATCH = 32


def rank_calibrate(ctx, sizes: List[int], warmup: int, iters: int, parameters: int, batch_size: int) -> dict:
    """validate.launch entry point: sweep, then compute timing; rank 0 prints the table."""
    rows = collective_bench.rank_sweep(ctx, sizes, warmup, iters, check=True)
    compute = None
    if parameters > 0:
        compute = compute_timing.rank_compute(ctx, parameters, batch_size, warmup=2, iters=5)
    return {"rank": ctx.rank, "host": socket.gethostname(), "rows": rows, "compute": compute}


def versions(backend: str) -> dict:
    """torch / NCCL / gloo versions as this torch reports them (None when unknown)."""
    nccl = None
    if backend == "nccl" and torch.cuda.is_available():
        v = torch.cuda.nccl.version()
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    return {
        "torch_version": str(torch.__version__),
        "nccl_version": nccl,
        # gloo has no version API; it is the copy vendored in this torch build
        "gloo_version": f"bundled with torch {torch.__version__}" if backend == "gloo" else None,
    }


def calibration_from_results(results: List[dict], backend: str, level: Optional[str],
                             command: Optional[str]) -> calib.Calibration:
    """Fit the calibration from the per-rank results of :func:`rank_calibrate`."""
    n = len(results)
    rows = results[0]["rows"]
    wrong = [r["size_bytes"] for r in rows for g in ("out_of_place", "in_place") if r[g]["wrong"]]
    if wrong:
        raise calib.CalibrationError(f"all-reduce gave wrong sums at sizes {wrong}: not calibrating on a broken run")
    hosts = tuple(sorted({r["host"] for r in results}))
    lv = level or ("intra_node" if len(hosts) == 1 else "inter_node")
    # the mean over iterations of the per-iteration max over ranks, as nccl-tests reports it:
    # a training step pays the mean cost of its many all-reduces, hiccups included (the
    # median, tried first, under-predicted replayed steps by 10-40% on a shared machine)
    link = calib.fit_link(lv, [calib.Measurement(r["size_bytes"], r["in_place"]["time_s"], n) for r in rows])
    compute = None
    per_rank = [r["compute"] for r in results if r["compute"]]
    if per_rank:
        compute = calib.ComputeTiming(
            parameters=per_rank[0]["parameters"],
            batch_size=COMPUTE_BATCH,
            forward_s=statistics.median(c["forward_s"] for c in per_rank),
            backward_s=statistics.median(c["backward_s"] for c in per_rank),
            per_rank=tuple(calib.RankCompute(c["rank"], c["forward_s"], c["backward_s"]) for c in per_rank),
        )
    prov = calib.Provenance(backend=backend, world_size=n, hostnames=hosts, date=calib.utc_now_iso(),
                            command=command, **versions(backend))
    return calib.Calibration((link,), prov, compute)


def measure_calibration(backend: str, nprocs: int, max_size: int, iters: int = 10, warmup: int = 3,
                        compute_params: int = 0, level: Optional[str] = None, timeout_s: float = 300.0,
                        command: Optional[str] = None, echo: Callable[[str], None] = print,
                        min_size: int = 8, result_dir: Optional[str] = None) -> calib.Calibration:
    """Run the sweep and compute timing on `nprocs` local ranks and fit a calibration.

    Raises validate.launch.LaunchError (with the partial records) if a rank dies or hangs."""
    sizes = collective_bench.sweep_sizes(min_size, max_size)
    echo(f"# commsim calibrate: all_reduce {sizes[0]}..{sizes[-1]} B on {nprocs} x {backend}, "
         f"warmup {warmup}, iters {iters}, timeout {timeout_s:g} s")
    results = launch(rank_calibrate, nprocs, backend, timeout_s,
                     args=(sizes, warmup, iters, compute_params, COMPUTE_BATCH), result_dir=result_dir)
    return calibration_from_results(results, backend, level, command)
