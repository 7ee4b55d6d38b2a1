"""Concurrent-streams speed: the heap event loop (commsim/sim/concurrent_streams.py) against the
scanning loop it replaced (tests/unit/sim/streams_scan.py), per step, in one run.

The case is the scale scenario (scenarios/scaling_1024.yaml: 1e9 bf16 parameters in 25 MiB
buckets, 1 MiB first: 78 buckets; 8 GPUs per node; lognormal jitter cv 5% on every rank) with
``ddp.comm_streams: 2``, at each world size of ``--sizes``; the old loop runs only at the sizes of
``--reference-sizes`` (its O(buckets x ranks^2) step takes ~16 s at 256 ranks). Each row gives
CPU seconds a step (process time: the steadier on a shared machine) and wall seconds, the
seconds per collective and rank (new) and per collective and rank^2 (old: budget.py's
STREAMS_RANK2 model), the old/new ratio, and whether both gave the same rank_end bit for bit.

Usage:

    python benchmarks/streams_speed.py [--sizes 32,64,128,256,1024,4096] [--reference-sizes 32,64,128,256]
                                       [--steps 2] [--json out/streams_speed.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # measure this checkout's commsim, not an installed one
DEFAULT_JSON = ROOT / "out" / "streams_speed.json"

import numpy as np  # noqa: E402

from commsim.atomic import atomic_write_text  # noqa: E402
from commsim.cli.outputs import check_script_outputs  # noqa: E402
from commsim.scenario.loader import load_scenario  # noqa: E402
from commsim.sim import engine  # noqa: E402
from tests.unit.sim.streams_scan import ScanStreams  # noqa: E402

SCALE = ROOT / "scenarios" / "scaling_1024.yaml"
GPUS_PER_NODE = 8


def _ints(text: str):
    return [int(x) for x in text.split(",") if x]


def case(ranks: int, steps: int, streams: int = 2):
    """The scale scenario at `ranks` ranks with `streams` collective streams per rank."""
    if ranks % GPUS_PER_NODE:
        raise SystemExit(f"--sizes: expected multiples of {GPUS_PER_NODE} ranks, got {ranks}")
    # read at one stream, then given `streams`: the reader's world-size cap is what this measures
    sc = load_scenario(str(SCALE), [f"cluster.nodes={ranks // GPUS_PER_NODE}", f"steps={steps}"])
    return dataclasses.replace(sc, ddp=dataclasses.replace(sc.ddp, comm_streams=streams))


def timed(sc, loop):
    """(CPU s, wall s, rank_end) of simulate(sc) with `loop` as the concurrent-streams class."""
    saved = engine.ConcurrentStreams
    engine.ConcurrentStreams = loop
    try:
        w, c = time.perf_counter(), time.process_time()
        out = engine.simulate(sc).rank_end
        return time.process_time() - c, time.perf_counter() - w, out
    finally:
        engine.ConcurrentStreams = saved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--sizes", default="32,64,128,256,1024,4096", help="world sizes for the new loop")
    ap.add_argument("--reference-sizes", default="32,64,128,256", help="world sizes for the old loop too")
    ap.add_argument("--steps", type=int, default=2, help="steps simulated at each size (default 2)")
    ap.add_argument("--json", default=None, help="where the rows go as JSON (default out/streams_speed.json)")
    a = ap.parse_args(argv)
    if a.json is None:
        DEFAULT_JSON.parent.mkdir(parents=True, exist_ok=True)  # out/ is ignored by git and made on demand
        a.json = str(DEFAULT_JSON)
    check_script_outputs(ap, {"--json": a.json})  # before the runs
    ref_sizes = set(_ints(a.reference_sizes))
    load_before = os.getloadavg()
    rows = []
    print(f"{'ranks':>6} {'buckets':>7} {'new s/step':>10} {'wall':>7} {'us/(coll*rank)':>14} "
          f"{'old s/step':>10} {'wall':>7} {'us/(coll*rank^2)':>16} {'old/new':>7} {'equal':>5}")
    for n in sorted(set(_ints(a.sizes)) | ref_sizes):
        sc = case(n, a.steps)
        nb = len(sc.gradient_buckets())
        cpu, wall, new = timed(sc, engine.ConcurrentStreams)
        row = {"ranks": n, "buckets": nb, "steps": a.steps, "new_cpu_s_per_step": cpu / a.steps,
               "new_wall_s_per_step": wall / a.steps, "new_s_per_collective_rank": cpu / a.steps / nb / n}
        line = (f"{n:>6} {nb:>7} {row['new_cpu_s_per_step']:>10.3f} {row['new_wall_s_per_step']:>7.2f} "
                f"{1e6 * row['new_s_per_collective_rank']:>14.3f}")
        if n in ref_sizes:
            ocpu, owall, old = timed(sc, ScanStreams)
            row.update(old_cpu_s_per_step=ocpu / a.steps, old_wall_s_per_step=owall / a.steps,
                       old_s_per_collective_rank2=ocpu / a.steps / nb / n / n, ratio=ocpu / cpu,
                       equal=bool(np.array_equal(old, new)))
            line += (f" {row['old_cpu_s_per_step']:>10.3f} {row['old_wall_s_per_step']:>7.2f} "
                     f"{1e6 * row['old_s_per_collective_rank2']:>16.3f} {row['ratio']:>7.1f} {str(row['equal']):>5}")
        print(line, flush=True)
        rows.append(row)
    load_after = os.getloadavg()
    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"load average (1/5/15 min) {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f} before, "
          f"{load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} after")
    atomic_write_text(a.json, json.dumps({"rows": rows, "load_before": load_before, "load_after": load_after,
                                         "cpus": os.cpu_count()}, indent=1) + "\n")
    return 0 if all(r.get("equal", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
