"""Scale benchmark: the engine against the tight numpy loop and the per-chunk SimPy reference.

One run measures, each case in a fresh subprocess (so that its peak memory, ru_maxrss, is its
own; wall and CPU seconds are both reported, CPU being the steadier on a shared machine):

- ring: the engine at every size of ``--sizes`` (default up to 131,072 ranks) on the scale
  scenario (1e9 fp32 parameters in 25 MB buckets, 1 MB first: 161 buckets; 100 steps; 8 GPUs
  per node; lognormal jitter cv 5% on every rank; one thermally throttled GPU), keeping
  per-step aggregates only, as ``commsim run`` does without --trace/--plot, twice: with DDP's
  own costs on (the default) and with them off;
- bound: :mod:`benchmarks.numpy_bound` (uniform links, per-bucket closed forms, the same
  per-rank streams; DDP's own costs charged as the engine charges them) on the same scenarios,
  costs on and off, side by side: each ratio compares the engine with the bound computing the
  same model (on uniform links the two agree to 1e-9, tests/unit/benchmarks; the scale
  scenario's two link classes the bound prices at the slowest link);
- algorithms: at 4,096 ranks with 1e9 bf16 parameters in 25 MiB buckets (78 buckets), every
  all-reduce algorithm and FSDP, costs on, against the ring and against the numpy bound of the
  same algorithm (its uniform-launch time per collective; FSDP's segment loop);
- reference: the per-chunk SimPy whole-run reference (:mod:`commsim.sim.reference`, ring and
  FSDP) on cut-down cases, and every algorithm's kernel against its per-chunk SimPy
  reference (:mod:`commsim.collectives.reference`) per collective, each in its own process
  (peak memory), with the largest relative difference;
- cli: ``commsim run scenarios/32gpu_throttle.yaml -q``, whole process, median of 5, with compiled
  bytecode as an installed commsim has it (and, for reference, compiled from source every run).

Usage:

    python benchmarks/scale.py [--sizes 32,1024,4096,16384,131072] [--json out/scale.json]
                               [--reference 32:8,256:4,1024:2] [--reference-fsdp 32:4,256:2]

The results go to out/scale.json (ignored by git) unless --json names another file; a file
git tracks (docs/measurements/scale.json, the README's figures) is replaced only with
--update-committed, so that a rerun never overwrites the committed measurement by accident.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # measure this checkout's commsim, not an installed one

import numpy as np  # noqa: E402

from commsim.cli.outputs import check_script_outputs  # noqa: E402
from commsim.network.costs import ddp_buckets  # noqa: E402
from commsim.scenario.spec import DDP, Cluster, Collective, Compute, Jitter, Link, Model, Scenario, Throttle  # noqa: E402

DEFAULT_JSON = ROOT / "out" / "scale.json"

GPUS_PER_NODE = 8
ALGORITHM_CASES = ("ring", "tree", "halving_doubling", "auto", "hierarchical", "fsdp")

# the targets: (case, limit)
TARGET_RING_16K_S = 1.0
TARGET_BOUND_RATIO = 2.0
TARGET_ALGORITHM_RATIO = 2.0
TARGET_131K_S, TARGET_131K_MB = 10.0, 500.0
TARGET_CLI_S = 0.4


def scenario(ranks: int, steps: int = 100, parameters: int = 1_000_000_000, grad_dtype: str = "fp32",
             bucket_cap: float = 25e6, first_bucket: float = 1e6, algorithm: str = "ring") -> Scenario:
    sharding = "fsdp" if algorithm == "fsdp" else "none"
    return Scenario(
        name=f"scale-{ranks}",
        cluster=Cluster(ranks // GPUS_PER_NODE, GPUS_PER_NODE, Link(240e9, 2e-6), Link(25e9, 5e-6)),
        model=Model(parameters, grad_dtype),
        compute=Compute(forward=0.1, backward=0.2, optimizer=0.01, batch_size=8),
        ddp=DDP(bucket_cap=bucket_cap, first_bucket=first_bucket, sharding=sharding),
        collective=Collective(algorithm="ring" if algorithm == "fsdp" else algorithm),
        steps=steps,
        seed=1,
        stragglers=(Jitter(0.05), Throttle((min(13, ranks - 1),), heat_up=20.0, throttled_time=20.0, clock_fraction=0.5)),
    )


def algorithm_scenario(algorithm: str, ranks: int = 4096) -> Scenario:
    """1e9 bf16 parameters in PyTorch's default 25 MiB buckets (1 MiB first): 78 buckets."""
    return scenario(ranks, grad_dtype="bf16", bucket_cap=25 * 2 ** 20, first_bucket=2 ** 20, algorithm=algorithm)


def units(sc: Scenario) -> int:
    """rank x bucket x step units of work in a scenario."""
    buckets = len(ddp_buckets(sc.model.grad_bytes, sc.ddp.first_bucket, sc.ddp.bucket_cap))
    return sc.world_size * buckets * sc.steps


def _timed(fn):
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_engine(sc: Scenario) -> dict:
    from commsim.sim.engine import simulate

    r, wall, cpu = _timed(lambda: simulate(sc, ranks=np.arange(0)))
    return {"ranks": sc.world_size, "steps": sc.steps, "buckets": int(len(r.bucket_sizes)),
            "algorithm": "fsdp" if sc.ddp.sharding == "fsdp" else sc.collective.algorithm,
            "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": _peak_mb(), "units_per_s": units(sc) / wall,
            "mean_step_s": float(r.step_time.mean())}


def measure_bound(sc: Scenario) -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from numpy_bound import bound_run

    end, wall, cpu = _timed(lambda: bound_run(sc))
    return {"ranks": sc.world_size, "steps": sc.steps, "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": _peak_mb(),
            "algorithm": "fsdp" if sc.ddp.sharding == "fsdp" else sc.collective.algorithm,
            "mean_step_s": float(np.diff(end, prepend=0.0).mean())}


def measure_reference(ranks: int, buckets: int, algorithm: str = "ring") -> dict:
    """Time the per-chunk reference and the engine on one step of `buckets` 25 MB buckets
    (``algorithm``: ring, or fsdp on ring halves); peak memory is the reference's (run first)."""
    from commsim.sim.engine import simulate
    from commsim.sim.reference import ReferenceModel

    sc = scenario(ranks, steps=1, parameters=int((1e6 + 25e6 * (buckets - 1)) / 4), algorithm=algorithm)
    ref, ref_wall, _ = _timed(lambda: ReferenceModel(sc).run())
    peak = _peak_mb()
    fast, fast_wall, _ = _timed(lambda: simulate(sc))
    return {"algorithm": algorithm, "ranks": ranks, "buckets": buckets, "reference_wall_s": ref_wall,
            "reference_units_per_s": units(sc) / ref_wall, "reference_peak_rss_mb": peak,
            "engine_wall_s_same_case": fast_wall, "max_rel_diff": float(np.max(np.abs(fast.rank_end - ref) / ref))}


def kernel_names() -> list:
    """Every user-facing algorithm with a per-chunk SimPy reference."""
    from commsim.collectives.kernels import ALGORITHMS
    from commsim.collectives.reference import REFERENCES

    return [name for name in ALGORITHMS if name in REFERENCES]


def measure_kernel(ranks: int, name: str, size: float = 25e6) -> dict:
    """One algorithm's kernel against its per-chunk SimPy reference, per collective; the peak
    memory after the kernel's plan and calls, then after the reference (run second)."""
    from commsim.collectives.kernels import make_kernel
    from commsim.collectives.reference import REFERENCES
    from commsim.sim.links import scenario_fabric

    fabric = scenario_fabric(scenario(ranks))
    launch = np.random.default_rng(0).random(ranks) * 1e-3
    kernel = make_kernel(name, fabric, size)
    reps = 200
    _, wall, _ = _timed(lambda: [kernel.finish_times(launch) for _ in range(reps)])
    got = kernel.finish_times(launch)
    kernel_peak = _peak_mb()
    ref, ref_wall, _ = _timed(lambda: REFERENCES[name](fabric.at_size(size), launch, size))
    return {"algorithm": name, "ranks": ranks, "kernel_us": wall / reps * 1e6, "kernel_peak_rss_mb": kernel_peak,
            "reference_s": ref_wall, "reference_peak_rss_mb": _peak_mb(), "speedup": ref_wall / (wall / reps),
            "max_rel_diff": float(np.max(np.abs(got - ref) / ref))}


def _run_cli(env: dict, repeat: int) -> dict:
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "commsim.cli", "run", "scenarios/32gpu_throttle.yaml", "-q"],
                       cwd=ROOT, check=True, env=env)
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return {"median_wall_s": statistics.median(walls), "min_wall_s": min(walls), "median_cpu_s": statistics.median(cpus)}


def measure_cli(repeat: int = 5) -> dict:
    """``commsim run scenarios/32gpu_throttle.yaml -q`` as a whole process, median of `repeat`,
    as an installed commsim runs it: with compiled bytecode (``pip install .`` compiles it at
    install time), kept in a temporary cache after one warm-up run so that the checkout is not
    written to. ``uncompiled`` is the same with every module compiled from source on every run
    (what PYTHONDONTWRITEBYTECODE=1 does to a checkout), for reference."""
    import tempfile

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    with tempfile.TemporaryDirectory(prefix="commsim-pyc-") as cache:
        compiled = dict(env, PYTHONPYCACHEPREFIX=cache)
        _run_cli(compiled, 1)  # warm-up: compiles the bytecode into the cache
        out = _run_cli(compiled, repeat)
    out["uncompiled"] = _run_cli(dict(env, PYTHONDONTWRITEBYTECODE="1"), repeat)
    return {"command": "commsim run scenarios/32gpu_throttle.yaml -q", **out}


def costs_off(sc: Scenario) -> Scenario:
    """The scenario without DDP's own costs (the schedule before they existed), for reference."""
    from commsim.sim.ddp_costs import NONE

    return dataclasses.replace(sc, ddp=dataclasses.replace(sc.ddp, costs=NONE))


def child(kind: str, ranks: int, extra: str) -> None:
    if kind == "engine" and extra == "scale-off":
        out = measure_engine(costs_off(scenario(ranks)))
    elif kind == "engine":
        out = measure_engine(scenario(ranks) if extra == "scale" else algorithm_scenario(extra, ranks))
    elif kind == "bound" and extra == "scale-off":
        out = measure_bound(costs_off(scenario(ranks)))
    elif kind == "bound":
        out = measure_bound(scenario(ranks) if extra == "scale" else algorithm_scenario(extra, ranks))
    elif kind == "reference":
        algorithm, buckets = extra.split(":")
        out = measure_reference(ranks, int(buckets), algorithm)
    else:
        out = measure_kernel(ranks, extra)
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


def output_path(parser, json_arg, update_committed: bool) -> Path:
    """Where the results go, checked before measuring: a path that cannot be written, or a
    committed file without --update-committed, is a usage error (exit 2)."""
    if json_arg is None:
        DEFAULT_JSON.parent.mkdir(parents=True, exist_ok=True)  # out/ is ignored by git and made on demand
        json_arg = str(DEFAULT_JSON)
    check_script_outputs(parser, {"--json": json_arg})
    path = Path(json_arg)
    if path.exists() and not update_committed and tracked_by_git(path):
        parser.error(f"--json {path}: a file git tracks (a committed measurement); "
                     f"pass --update-committed to replace it, or write elsewhere (default {DEFAULT_JSON})")
    return path


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="32,1024,4096,16384,131072", help="rank counts timed with the engine (ring)")
    ap.add_argument("--reference", default="32:8,256:4,1024:2", help="ranks:buckets pairs timed with the reference")
    ap.add_argument("--reference-fsdp", default="32:4,256:2", help="ranks:buckets pairs of FSDP timed with the reference")
    ap.add_argument("--kernel-ranks", type=int, default=64, help="ranks of the per-algorithm kernel/reference check")
    ap.add_argument("--algorithm-ranks", type=int, default=4096, help="ranks of the algorithm comparison")
    ap.add_argument("--json", default=None, help=f"write the results here (default: {DEFAULT_JSON.relative_to(ROOT)})")
    ap.add_argument("--update-committed", action="store_true",
                    help="allow --json to replace a file git tracks (docs/measurements/scale.json)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), a.child[2])
        return
    json_path = output_path(ap, a.json, a.update_committed)  # before the minutes of measuring
    sizes = [int(s) for s in a.sizes.split(",")]
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()} "
          f"numpy {np.__version__}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("ring, jitter + throttle, 161 buckets x 100 steps: engine vs the tight numpy loop")
    print("(DDP's own costs on in both, the default; then off in both: each ratio is engine / bound of one model)")
    print(f"{'':>7} {'costs on':^64} | {'costs off':^46}")
    print(f"{'ranks':>7} {'wall s':>7} {'cpu s':>7} {'peak MB':>7} | {'bound wall':>10} {'bound cpu':>9} {'peak MB':>7} | "
          f"{'cpu ratio':>9} | {'cpu s':>7} {'peak MB':>7} | {'bound cpu':>9} | {'cpu ratio':>9}")
    engine, bound, engine_off, bound_off = [], [], [], []
    for n in sizes:
        m = run_child("engine", n, "scale")
        b = run_child("bound", n, "scale")
        o = run_child("engine", n, "scale-off")
        bo = run_child("bound", n, "scale-off")
        engine.append(m)
        bound.append(b)
        engine_off.append(o)
        bound_off.append(bo)
        print(f"{n:>7} {m['wall_s']:>7.3f} {m['cpu_s']:>7.3f} {m['peak_rss_mb']:>7.0f} | {b['wall_s']:>10.3f} "
              f"{b['cpu_s']:>9.3f} {b['peak_rss_mb']:>7.0f} | {m['cpu_s'] / b['cpu_s']:>8.2f}x | "
              f"{o['cpu_s']:>7.3f} {o['peak_rss_mb']:>7.0f} | {bo['cpu_s']:>9.3f} | {o['cpu_s'] / bo['cpu_s']:>8.2f}x")
    x = np.log([m["ranks"] * m["buckets"] * m["steps"] for m in engine])
    y = np.log([m["cpu_s"] for m in engine])
    slope = float(np.polyfit(x, y, 1)[0]) if len(engine) > 1 else float("nan")
    print(f"log-log slope of CPU time vs ranks x buckets x steps: {slope:.2f} (1.0 = linear)")

    print(f"\n{a.algorithm_ranks} ranks, 78 buckets, 100 steps, jitter + throttle: every algorithm against the ring"
          " and against its numpy bound")
    print(f"{'algorithm':>17} {'wall s':>7} {'cpu s':>7} {'peak MB':>7} {'vs ring':>8} | {'bound cpu':>9} "
          f"{'peak MB':>7} | {'vs bound':>8}")
    algorithms = []
    for name in ALGORITHM_CASES:
        m = run_child("engine", a.algorithm_ranks, name)
        m["bound"] = run_child("bound", a.algorithm_ranks, name)
        algorithms.append(m)
    ring_case = algorithms[0]
    for m in algorithms:
        m["cpu_vs_ring"] = m["cpu_s"] / ring_case["cpu_s"]
        m["cpu_vs_bound"] = m["cpu_s"] / m["bound"]["cpu_s"]
        print(f"{m['algorithm']:>17} {m['wall_s']:7.3f} {m['cpu_s']:7.3f} {m['peak_rss_mb']:7.0f} {m['cpu_vs_ring']:7.2f}x"
              f" | {m['bound']['cpu_s']:9.3f} {m['bound']['peak_rss_mb']:7.0f} | {m['cpu_vs_bound']:7.2f}x")

    print(f"\nkernels against their per-chunk SimPy references ({a.kernel_ranks} ranks, 25 MB, random launches;"
          " one process each):")
    kernels = [run_child("kernel", a.kernel_ranks, name) for name in kernel_names()]
    for k in kernels:
        print(f"{k['algorithm']:>17}: kernel {k['kernel_us']:8.1f} us ({k['kernel_peak_rss_mb']:4.0f} MB), reference "
              f"{k['reference_s'] * 1e3:8.1f} ms ({k['reference_peak_rss_mb']:4.0f} MB), {k['speedup']:,.0f}x, "
              f"max rel diff {k['max_rel_diff']:.1e}")
    refs = []
    pairs = [("ring", p) for p in filter(None, a.reference.split(","))]
    pairs += [("fsdp", p) for p in filter(None, a.reference_fsdp.split(","))]
    for algorithm, pair in pairs:
        n, b = (int(v) for v in pair.split(":"))
        r = run_child("reference", n, f"{algorithm}:{b}")
        match = next((m for m in engine if m["ranks"] == n), None) if algorithm == "ring" else None
        r["speedup_vs_engine_full_run"] = (match["units_per_s"] / r["reference_units_per_s"]) if match else None
        refs.append(r)
        speed = f"{r['speedup_vs_engine_full_run']:,.0f}x" if match else "n/a"
        print(f"whole-run reference, {algorithm}, {n} ranks x {b} buckets x 1 step: {r['reference_wall_s']:.2f} s, "
              f"{r['reference_peak_rss_mb']:.0f} MB ({r['reference_units_per_s']:.3e} units/s); engine/reference per "
              f"unit: {speed}; max rel diff {r['max_rel_diff']:.1e}")

    cli = measure_cli()
    print(f"\n{cli['command']}: median {cli['median_wall_s']:.3f} s wall (min {cli['min_wall_s']:.3f}), "
          f"{cli['median_cpu_s']:.3f} s cpu, with compiled bytecode as installed; every module compiled from "
          f"source on every run: {cli['uncompiled']['median_wall_s']:.3f} s wall, "
          f"{cli['uncompiled']['median_cpu_s']:.3f} s cpu")

    print("\ntargets (CPU seconds: the machine's wall clock includes other processes' time):")
    targets = []

    def target(name, value, limit, unit=""):
        targets.append({"target": name, "value": value, "limit": limit, "met": value <= limit})
        print(f"  {name}: {value:.3f}{unit} (limit {limit}{unit}) {_verdict(value <= limit)}")

    by_size = {m["ranks"]: (m, b) for m, b in zip(engine, bound)}
    if 16384 in by_size:
        m, b = by_size[16384]
        target("16,384 ranks ring", m["cpu_s"], TARGET_RING_16K_S, " s")
        target("16,384 ranks: engine / numpy bound, costs on in both", m["cpu_s"] / b["cpu_s"], TARGET_BOUND_RATIO, "x")
        o, bo = next((o, bo) for o, bo in zip(engine_off, bound_off) if o["ranks"] == 16384)
        target("16,384 ranks: engine / numpy bound, costs off in both", o["cpu_s"] / bo["cpu_s"], TARGET_BOUND_RATIO, "x")
    for m in algorithms[1:]:
        target(f"{m['algorithm']} / ring at {a.algorithm_ranks} ranks", m["cpu_vs_ring"], TARGET_ALGORITHM_RATIO, "x")
    if 131072 in by_size:
        m, _ = by_size[131072]
        target("131,072 ranks time", m["cpu_s"], TARGET_131K_S, " s")
        target("131,072 ranks peak memory", m["peak_rss_mb"], TARGET_131K_MB, " MB")
    target("commsim run 32gpu_throttle (whole process)", cli["median_cpu_s"], TARGET_CLI_S, " s")

    from commsim.atomic import atomic_write_text

    atomic_write_text(json_path, json.dumps({"engine": engine, "bound": bound, "engine_costs_off": engine_off,
                                             "bound_costs_off": bound_off, "slope": slope, "algorithms": algorithms,
                                             "kernels": kernels, "reference": refs, "cli": cli, "targets": targets},
                                            indent=2) + "\n")
    print(f"wrote {os.path.relpath(json_path)}")


if __name__ == "__main__":
    main()
