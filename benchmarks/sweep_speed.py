"""Wall time of a 200-point sweep of 1,024-GPU scenarios: local process pool vs Dask LocalCluster.

Usage (from the repository root; needs the `sweep` extra for the Dask half):

    python benchmarks/sweep_speed.py [--scenario scenarios/scaling_1024.yaml] [--jobs 2]
                                     [--json benchmarks/sweep_speed.json] [--skip-dask]

The grid varies the network, the jitter and the bucket size (10 x 5 x 4 = 200 points), every
point a full `commsim run` of the scenario (1,024 ranks, 100 steps) and of its straggler-free
baseline. The same grid then runs on a Dask LocalCluster with the same number of worker
processes, and the two results.csv files are compared byte for byte.

Wall times depend on the machine and on what else runs on it; the figures this prints are
for the moment it ran, not a property of the code alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from commsim.atomic import atomic_write_text  # noqa: E402
from commsim.cli.outputs import check_script_outputs  # noqa: E402
from commsim.errors import InputError  # noqa: E402
from commsim.scenario.loader import load_scenario  # noqa: E402
from commsim.sweep.grid import combine_grids, parse_grid_option  # noqa: E402
from commsim.sweep.run import run_sweep  # noqa: E402

GRID = [
    "cluster.inter_node.bandwidth=25 Gbps,50 Gbps,100 Gbps,200 Gbps,400 Gbps,800 Gbps,1600 Gbps,"
    "3200 Gbps,6400 Gbps,12800 Gbps",
    "stragglers[0].cv=0.0,0.02,0.05,0.1,0.2",
    "ddp.bucket_cap=25 MiB,50 MiB,100 MiB,200 MiB",
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "scaling_1024.yaml"), help="the scenario every point runs")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes, for the pool and the Dask cluster alike")
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--skip-dask", action="store_true", help="time the process pool only")
    args = ap.parse_args(argv)
    check_script_outputs(ap, {"--json": args.json})  # before the sweeps
    if args.jobs < 1:
        ap.error(f"--jobs: at least 1, got {args.jobs}")
    try:
        load_scenario(args.scenario)  # a bad file is one line now, not a traceback from a worker
    except InputError as exc:
        ap.error(f"--scenario: {exc}")

    grid = combine_grids(parse_grid_option(g) for g in GRID)
    report = {"scenario": args.scenario, "points": len(grid), "jobs": args.jobs,
              "cpus": os.cpu_count(), "python": platform.python_version(),
              "load_average_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = run_sweep(args.scenario, grid, Path(tmp) / "pool", jobs=args.jobs)
        report["pool_wall_s"] = time.perf_counter() - t0
        world = {json.loads(line)["summary"]["world_size"]
                 for line in (Path(tmp) / "pool" / "points.jsonl").read_text().splitlines()}
        report["world_sizes"] = sorted(world)
        print(f"{len(grid)} points x {sorted(world)} ranks, process pool --jobs {args.jobs}: "
              f"{report['pool_wall_s']:.1f} s wall ({report['pool_wall_s'] / len(grid) * 1000:.0f} ms/point, "
              f"{res.ran} run)")
        if not args.skip_dask:
            from dask.distributed import Client, LocalCluster

            t0 = time.perf_counter()
            with LocalCluster(n_workers=args.jobs, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cluster, Client(cluster) as client:
                report["dask_startup_s"] = time.perf_counter() - t0
                t1 = time.perf_counter()
                run_sweep(args.scenario, grid, Path(tmp) / "dask", dask_client=client)
                report["dask_sweep_s"] = time.perf_counter() - t1
            report["dask_wall_s"] = time.perf_counter() - t0
            same = (Path(tmp) / "pool" / "results.csv").read_bytes() == (Path(tmp) / "dask" / "results.csv").read_bytes()
            report["dask_results_identical"] = same
            print(f"{len(grid)} points, Dask LocalCluster ({args.jobs} worker processes x 1 thread): "
                  f"{report['dask_wall_s']:.1f} s wall including {report['dask_startup_s']:.1f} s cluster start "
                  f"({report['dask_sweep_s']:.1f} s sweep); results.csv identical to the pool's: {same}")
    report["load_average_after"] = os.getloadavg()[0]
    print(f"load average (1 min) before/after: {report['load_average_before']:.2f} / "
          f"{report['load_average_after']:.2f} on {report['cpus']} CPUs (shared machine)")
    if args.json:
        atomic_write_text(args.json, json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
