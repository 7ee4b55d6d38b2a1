"""Measure this machine and build a calibration (what ``commsim calibrate --backend`` runs).

Launches `nprocs` local ranks (:mod:`validate.launch`); each runs the all-reduce sweep
(:mod:`validate.collective_bench`) and then times the synthetic model's forward/backward
(:mod:`validate.compute_timing`). The calibration is fitted from the sweep's *in-place*
times (the mean over iterations of each iteration's maximum over ranks, as nccl-tests
reports it): torch's all_reduce is in place, and so is DDP's all-reduce of a bucket.

Across hosts (:func:`measure_calibration_on_hosts`, ``--nnodes/--node-rank/--rdzv-endpoint`` or
one rank per process under srun/mpirun), each host launches its own ranks through
:func:`validate.multinode.launch_node`; the job sweeps each level of its own placement
(validate.collectives_multi: 2 ranks on one node, 1 rank on each of 2 nodes, the full job),
rank 0 gathers every rank's results, and rank 0's host writes the per-level nccl-tests tables
and fits the calibration from them (levels from the tables' host names), with the hosts in
node order and the compute timing of every rank.
"""

from __future__ import annotations

import socket
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch

from commsim import calibration as calib
from validate import collective_bench, collectives_multi, compute_timing
from validate.collectives_multi import versions
from validate.launch import launch

COMPUTE_BATCH = 32


def rank_calibrate(ctx, sizes: List[int], warmup: int, iters: int, parameters: int, batch_size: int,
                   table: Optional[str] = "stdout") -> dict:
    """validate.launch entry point: sweep, then compute timing; rank 0 prints the table on
    `table` (collective_bench.TABLE_STREAMS)."""
    rows = collective_bench.rank_sweep(ctx, sizes, warmup, iters, check=True, table=table)
    compute = None
    if parameters > 0:
        compute = compute_timing.rank_compute(ctx, parameters, batch_size, warmup=2, iters=5)
    return {"rank": ctx.rank, "host": socket.gethostname(), "rows": rows, "compute": compute}


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
    compute = compute_from_ranks([r["compute"] for r in results])
    prov = calib.Provenance(backend=backend, world_size=n, hostnames=hosts, date=calib.utc_now_iso(),
                            command=command, **versions(backend))
    return calib.Calibration((link,), prov, compute)


def compute_from_ranks(per_rank: List[Optional[dict]]) -> Optional[calib.ComputeTiming]:
    """The compute timing of a calibration from each rank's compute_timing.rank_compute result
    (None entries skipped): medians over ranks, each rank kept."""
    per_rank = [c for c in per_rank if c]
    if not per_rank:
        return None
    return calib.ComputeTiming(
        parameters=per_rank[0]["parameters"],
        batch_size=COMPUTE_BATCH,
        forward_s=statistics.median(c["forward_s"] for c in per_rank),
        backward_s=statistics.median(c["backward_s"] for c in per_rank),
        per_rank=tuple(calib.RankCompute(c["rank"], c["forward_s"], c["backward_s"]) for c in per_rank),
    )


def measure_calibration(backend: str, nprocs: int, max_size: int, iters: int = 10, warmup: int = 3,
                        compute_params: int = 0, level: Optional[str] = None, timeout_s: float = 300.0,
                        command: Optional[str] = None, echo: Callable[[str], None] = print,
                        min_size: int = 8, result_dir: Optional[str] = None,
                        table: Optional[str] = "stdout") -> calib.Calibration:
    """Run the sweep and compute timing on `nprocs` local ranks and fit a calibration; rank 0
    prints the sweep's table on `table` ("stdout", "stderr" or None).

    Raises validate.launch.LaunchError (with the partial records) if a rank dies or hangs."""
    sizes = collective_bench.sweep_sizes(min_size, max_size)
    echo(f"# commsim calibrate: all_reduce {sizes[0]}..{sizes[-1]} B on {nprocs} x {backend}, "
         f"warmup {warmup}, iters {iters}, timeout {timeout_s:g} s")
    results = launch(rank_calibrate, nprocs, backend, timeout_s,
                     args=(sizes, warmup, iters, compute_params, COMPUTE_BATCH, table), result_dir=result_dir)
    return calibration_from_results(results, backend, level, command)


def rank_calibrate_levels(ctx, sizes: List[int], warmup: int, iters: int, parameters: int, batch_size: int) -> dict:
    """validate.multinode_rank entry point of a calibration across hosts: the all_reduce sweep
    of each level of this job's placement (validate.collectives_multi), then compute timing.
    Returns {"host", "ranks_per_node", "layouts" (rank 0 only, else None), "compute"}."""
    hosts, counts, layouts = collectives_multi.own_layouts(ctx)
    measured = collectives_multi.rank_levels(ctx, collectives_multi.plan(layouts, sizes, ["all_reduce"], warmup, iters))
    compute = None
    if parameters > 0:
        compute = compute_timing.rank_compute(ctx, parameters, batch_size, warmup=2, iters=5)
    return {"host": socket.gethostname(), "hosts": hosts, "ranks_per_node": counts,
            "layouts": measured["layouts"] if measured else None, "compute": compute}


def calibration_from_hosts(entries: List[dict], backend: str, tables_dir: str, warmup: int, iters: int,
                           command: Optional[str]) -> Tuple[calib.Calibration, Dict[Tuple[str, str], Path]]:
    """Fit the calibration of a job across hosts from what rank 0 gathered (one entry per rank,
    validate.multinode_rank's {"rank", "host", "result"} with :func:`rank_calibrate_levels`'s
    result): write each level's nccl-tests table under `tables_dir` and fit them as
    ``commsim calibrate --from-nccl-tests --in-place`` does. The provenance names the hosts in
    node order (node 0 first) and the job's world size; the tables (its sources) say each
    level's layout and which rank ran on which host."""
    first = entries[0]["result"]
    counts = first["ranks_per_node"]
    wrong = [(lay["name"], r["size_bytes"]) for lay in first["layouts"] for r in lay["rows"] if r["wrong"]]
    if wrong:
        raise calib.CalibrationError(f"all-reduce gave wrong sums at (layout, size) {wrong}: not calibrating "
                                     "on a broken run")
    paths = collectives_multi.write_tables(first["layouts"], Path(tables_dir), warmup, iters,
                                           note=f"{backend}, {len(counts)} hosts, ranks per node {counts}")
    cal = collectives_multi.calibrate_levels(paths, command=command, backend=backend)
    hosts = list(dict.fromkeys(first["hosts"]))  # node order: the ranks are numbered node-major
    prov = replace(cal.provenance, world_size=len(entries), hostnames=tuple(hosts), date=calib.utc_now_iso(),
                   ranks_per_node=tuple(int(c) for c in counts))
    compute = compute_from_ranks([e["result"]["compute"] for e in sorted(entries, key=lambda e: e["rank"])])
    return replace(cal, provenance=prov, compute=compute), paths


def measure_calibration_on_hosts(job, backend: str, max_size: int, tables_dir: str, iters: int = 10,
                                 warmup: int = 3, compute_params: int = 0, timeout_s: float = 300.0,
                                 command: Optional[str] = None, echo: Callable[[str], None] = print,
                                 min_size: int = 8, startup_s: float = 300.0):
    """This host's part of a calibration across hosts (`job`: a validate.multinode.HostJob).

    Returns (calibration, table paths) on the host of rank 0, None on the others. Raises
    validate.launch.LaunchError (with this host's partial records) if a rank dies or hangs."""
    from validate.multinode import launch_node

    sizes = collective_bench.sweep_sizes(min_size, max_size)
    echo(f"# commsim calibrate: all_reduce {sizes[0]}..{sizes[-1]} B per level, {job.describe()}, {backend}, "
         f"warmup {warmup}, iters {iters}, timeout {timeout_s:g} s")
    entries = launch_node(job, "validate.calibrate:rank_calibrate_levels", backend, timeout_s,
                          args=(sizes, warmup, iters, compute_params, COMPUTE_BATCH), startup_s=startup_s)
    if entries is None:
        return None
    return calibration_from_hosts(entries, backend, tables_dir, warmup, iters, command)
