"""Scale benchmark (issue 6): the fast engine at 32 .. 16,384 ranks, against the per-chunk reference.

Each size runs in a fresh subprocess so that its peak memory (ru_maxrss) is its own. The
scenario: 1e9 fp32 parameters in 25 MB buckets (1 MB first: 161 buckets), 100 steps, 8 GPUs
per node, lognormal jitter (cv 5%) on every rank and one thermally throttled GPU.

The per-chunk SimPy reference (commsim.sim.reference) is O(n^2) events per all-reduce, so it is
timed on the same scenario cut to a few buckets and one step, and compared per
rank x bucket x step. Usage:

    python benchmarks/scale.py [--sizes 32,1024,4096,16384] [--json out/scale.json]

The results go to out/scale.json (ignored by git) unless --json names another file; a file
git tracks (docs/measurements/scale.json, the README's figures) is replaced only with
--update-committed, so that a rerun never overwrites the committed measurement by accident.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # measure this checkout's commsim, not an installed one

import numpy as np  # noqa: E402

from commsim.network.costs import ddp_buckets  # noqa: E402
from commsim.sim.engine import simulate  # noqa: E402
from commsim.sim.reference import ReferenceModel  # noqa: E402
from commsim.scenario.spec import DDP, Cluster, Compute, Jitter, Link, Model, Scenario, Throttle  # noqa: E402

DEFAULT_JSON = ROOT / "out" / "scale.json"

GPUS_PER_NODE = 8


def scenario(ranks: int, steps: int = 100, parameters: int = 1_000_000_000) -> Scenario:
    return Scenario(
        name=f"scale-{ranks}",
        cluster=Cluster(ranks // GPUS_PER_NODE, GPUS_PER_NODE, Link(240e9, 2e-6), Link(25e9, 5e-6)),
        model=Model(parameters, "fp32"),
        compute=Compute(forward=0.1, backward=0.2, optimizer=0.01, batch_size=8),
        ddp=DDP(bucket_cap=25e6, first_bucket=1e6),
        steps=steps,
        seed=1,
        stragglers=(Jitter(0.05), Throttle((min(13, ranks - 1),), heat_up=20.0, throttled_time=20.0, clock_fraction=0.5)),
    )


def units(sc: Scenario) -> int:
    """rank x bucket x step units of work in a scenario."""
    buckets = len(ddp_buckets(sc.model.grad_bytes, sc.ddp.first_bucket, sc.ddp.bucket_cap))
    return sc.world_size * buckets * sc.steps


def measure_engine(ranks: int) -> dict:
    sc = scenario(ranks)
    t = time.perf_counter()
    r = simulate(sc)
    wall = time.perf_counter() - t
    return {
        "ranks": ranks,
        "steps": sc.steps,
        "buckets": int(len(r.bucket_sizes)),
        "wall_s": wall,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "units_per_s": units(sc) / wall,
        "mean_step_s": float(r.step_time.mean()),
    }


def measure_reference(ranks: int, buckets: int) -> dict:
    """Time the per-chunk reference and the engine on one step of `buckets` 25 MB buckets."""
    sc = scenario(ranks, steps=1, parameters=int((1e6 + 25e6 * (buckets - 1)) / 4))
    t = time.perf_counter()
    ref = ReferenceModel(sc).run()
    ref_wall = time.perf_counter() - t
    t = time.perf_counter()
    fast = simulate(sc)
    fast_wall = time.perf_counter() - t
    return {
        "ranks": ranks,
        "buckets": buckets,
        "reference_wall_s": ref_wall,
        "reference_units_per_s": units(sc) / ref_wall,
        "engine_wall_s_same_case": fast_wall,
        "max_rel_diff": float(np.max(np.abs(fast.rank_end - ref) / ref)),
    }


def child(kind: str, ranks: int, buckets: int) -> None:
    out = measure_engine(ranks) if kind == "engine" else measure_reference(ranks, buckets)
    print(json.dumps(out))


def run_child(*args) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", *map(str, args)], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def tracked_by_git(path: Path) -> bool:
    """Whether git tracks `path` (False outside a git checkout or without git)."""
    try:
        r = subprocess.run(["git", "ls-files", "--error-unmatch", str(path)], cwd=ROOT,
                           capture_output=True, text=True)
    except OSError:
        return False
    return r.returncode == 0


def output_path(json_arg, update_committed: bool) -> Path:
    """Where the results go; refuses (before measuring) a committed file without --update-committed."""
    path = Path(json_arg) if json_arg else DEFAULT_JSON
    if path.exists() and not update_committed and tracked_by_git(path):
        sys.exit(f"scale.py: error: --json {path}: a file git tracks (a committed measurement); "
                 f"pass --update-committed to replace it, or write elsewhere (default {DEFAULT_JSON})")
    if not path.parent.is_dir():
        if path == DEFAULT_JSON:
            path.parent.mkdir(parents=True, exist_ok=True)
        else:
            sys.exit(f"scale.py: error: --json {path}: the folder {path.parent} does not exist")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="32,1024,4096,16384", help="rank counts timed with the engine")
    ap.add_argument("--reference", default="32:8,256:4,1024:2", help="ranks:buckets pairs timed with the reference")
    ap.add_argument("--json", default=None, help=f"write the results here (default: {DEFAULT_JSON.relative_to(ROOT)})")
    ap.add_argument("--update-committed", action="store_true",
                    help="allow --json to replace a file git tracks (docs/measurements/scale.json)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), int(a.child[2]))
        return
    json_path = output_path(a.json, a.update_committed)  # before the minutes of measuring
    sizes = [int(s) for s in a.sizes.split(",")]
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()} numpy {np.__version__}")
    print(f"{'ranks':>7} {'buckets':>7} {'steps':>5} {'wall s':>8} {'peak MB':>8} {'units/s':>12}")
    engine = []
    for n in sizes:
        m = run_child("engine", n, 0)
        engine.append(m)
        print(f"{m['ranks']:>7} {m['buckets']:>7} {m['steps']:>5} {m['wall_s']:>8.3f} {m['peak_rss_mb']:>8.0f} {m['units_per_s']:>12.3e}")
    x = np.log([m["ranks"] * m["buckets"] * m["steps"] for m in engine])
    y = np.log([m["wall_s"] for m in engine])
    slope = float(np.polyfit(x, y, 1)[0]) if len(engine) > 1 else float("nan")
    print(f"log-log slope of wall time vs ranks x buckets x steps: {slope:.2f} (1.0 = linear)")
    if len(engine) > 2:  # small sizes are dominated by per-collective overhead; the tail shows the trend
        tail = float((y[-1] - y[-2]) / (x[-1] - x[-2]))
        print(f"slope between the two largest sizes: {tail:.2f}")
    refs = []
    for pair in filter(None, a.reference.split(",")):
        n, b = (int(v) for v in pair.split(":"))
        r = run_child("reference", n, b)
        match = next((m for m in engine if m["ranks"] == n), None)
        r["speedup_vs_engine_full_run"] = (match["units_per_s"] / r["reference_units_per_s"]) if match else None
        refs.append(r)
        speed = f"{r['speedup_vs_engine_full_run']:,.0f}x" if match else "n/a"
        print(f"reference {n} ranks x {b} buckets x 1 step: {r['reference_wall_s']:.2f} s "
              f"({r['reference_units_per_s']:.3e} units/s); engine/reference per unit: {speed}; "
              f"max rel diff {r['max_rel_diff']:.1e}")
    from commsim.atomic import atomic_write_text

    atomic_write_text(json_path, json.dumps({"engine": engine, "slope": slope, "reference": refs}, indent=2) + "\n")
    print(f"wrote {os.path.relpath(json_path)}")


if __name__ == "__main__":
    main()
