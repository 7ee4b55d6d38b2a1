"""What simulating a scenario will cost, estimated from the spec before anything runs.

``commsim run`` simulates the scenario and then its straggler-free baseline; both keep
per-step, per-rank float64 records (:class:`commsim.sim.engine.RunResult`). With ``S`` steps,
``n`` ranks (``cluster.nodes`` x ``gpus_per_node``) and ``c`` collectives per step (the DDP
buckets, ``model.grad_bytes / ddp.bucket_cap``; twice that with ``ddp.sharding: zero2``, a
reduce-scatter and an all-gather per bucket; three times with ``fsdp``, two gathers and a
reduce-scatter), the peak memory is about::

    memory = M0 + S*n*B_RANK_STEP + S*c*B_OP_STEP + n*B_RANK

- ``B_RANK_STEP`` = 96 bytes: 12 (S, n) float64 arrays at the peak, while the baseline runs:
  the scenario's result keeps 5 (rank_end, rank_backward_end, rank_comm_end, rank_busy,
  rank_stall); the baseline's engine holds its own 4, its perturbation factor and stall, and
  one temporary when it fills in the steady state;
- ``B_OP_STEP`` = 64 bytes: last_rank and launch_spread of both runs and the temporaries of
  the straggler ranking (``late_ranks``), 8 (S, c) arrays of 8 bytes;
- ``B_RANK`` = 1 KiB: the collective kernels' per-rank vectors (50-730 B/rank measured with
  tracemalloc around ``Engine(...)`` at 4,096 ranks, every algorithm and sharding);
- ``M0`` = 64 MiB: the interpreter with numpy, SimPy and commsim loaded (47 MB peak RSS for
  the smallest example).

The arrays are allocated for every step even when the engine stops early on a steady state
(it fills the rest in), so this is an upper bound: ``tests/unit/scenario/test_budget.py`` holds
it within a factor of 2 of the measured peak RSS of a mid-size run.

The run time is the engine's loop: for each run, each simulated step and each collective, one
kernel call over the n ranks, ``t = A + B*n`` seconds (``B*n*log2(n)`` for halving-doubling),
plus writing the records and the stragglers' own cost (per-rank random streams, per-rank
thermal clocks)::

    seconds = sum over (scenario, baseline) of S_sim * sum over collectives of (t(n) + d(n))
              + S*n*FILL + jitter/random-stall ranks * (SETUP + S*DRAW) + throttled ranks * S * THROTTLE

where ``d(n) = C + D*n`` is what DDP's own costs add per collective when any is on (the default;
:data:`DDP_COSTS`), 0 with them all off.

``S_sim`` is ``S`` when something differs from step to step (jitter with cv > 0, a stall, a
throttle), else ``min(S, STEADY_STEPS)``: a deterministic run repeats a steady step after a
few (at most 9 in a sweep of small deterministic scenarios: 8-40 ranks, every algorithm,
alpha-beta and NCCL models, every sharding, overlap on and off, gradient accumulation, slow
ranks and links). The constants were fitted to the CPU time of whole runs at 8-65,536 ranks
on the 2-core x86 machine the project is developed on (Python 3.11); the estimate came within
0.7-1.4 times the measured time on nine mid-size runs with stragglers (ring, tree,
halving-doubling, hierarchical, FSDP, an NCCL model, 10,000 buckets, a throttle on every
rank); a deterministic run's fraction of a second of one-off setup is not modeled.

A scenario whose estimate exceeds :data:`MAX_MEMORY_BYTES` (or the memory the machine has
available: ``MemAvailable`` in /proc/meminfo, or a container's memory cgroup headroom if lower)
or :data:`MAX_SECONDS` is refused by
:func:`check` with one line naming the estimate and the key to change;
``load_scenario(..., force=True)`` (``--force``) skips the check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from commsim.collectives.kernels import resolve
from commsim.errors import ScenarioError
from commsim.scenario.topology import cluster_fabric
from commsim.scenario import spec

__all__ = [
    "MAX_MEMORY_BYTES",
    "MAX_SECONDS",
    "BudgetError",
    "Estimate",
    "estimate",
    "available_memory",
    "check",
]

MAX_MEMORY_BYTES = 4 * 1024**3  # 40 times the largest example; beyond it, a typo more often than not
MAX_SECONDS = 600.0  # estimated run time of `commsim run` (scenario and baseline), 10 minutes

M0 = 64 * 1024**2
B_RANK_STEP = 96
B_OP_STEP = 64
B_RANK = 1024

# ``commsim run --trace`` adds a run of its own that records every collective on its first
# ``--trace-ranks`` ranks (``k`` = min(trace ranks, n)) and then one span per step, collective and
# traced rank in the Chrome trace: ``S*c*k`` spans, built as Python dicts and serialized at once.
# That adds the run's simulated steps (as the scenario's) and::
#
#     memory += S*c*k*(TRACE_SPAN_BYTES + 24)      seconds += S*c*k*TRACE_SPAN
#
# (24: the run's three (S, c, k) float64 records of issue, start and finish). Measured with
# ``/usr/bin/time`` on ``commsim run --trace`` minus the same run without it: 1.3-1.5 KiB of peak
# RSS and 12-19 us per span (seed_1b_8gpu_ib100 at 100-400 steps, 8 ranks, 161 buckets;
# 32gpu_throttle at 50-200 steps, 32 ranks, 120 buckets); without the term, ``--steps 20000
# --trace`` of the 8-rank example passed the check and grew past 8 GiB of memory in 2 minutes.
# One span of ``run --trace``: peak memory and seconds to build and write it
TRACE_SPAN_BYTES = 1536
TRACE_SPAN = 20e-6

STEADY_STEPS = 16
FILL = 10e-9  # seconds per rank and step: the engine's records, written once per step
SETUP = 10e-6  # seconds per rank per random straggler entry: its own seeded generator
DRAW = 50e-9  # seconds per rank and step of random draws
THROTTLE = 40e-6  # seconds per throttled rank and step: its thermal clock, in Python

# Seconds per collective call in the engine, A + B*n (B*n*log2(n) where the flag says so),
# fitted to whole runs with jitter at two world sizes each (64 and 2,048-65,536 ranks, full
# 25 MiB buckets); a kernel's cost also depends on how spread the launches are (random
# launches cost tree up to 3 times more), so this is an estimate to a factor of about 3.
COSTS: Dict[str, Tuple[float, float, bool]] = {
    "ring": (12e-6, 6e-9, False),  # closed form: 8.5 us at 8 ranks, 0.26 ms at 65,536
    "tree": (0.25e-3, 2.5e-6, False),  # max-plus per chunk: 0.34 ms at 64 ranks, 3.6 ms at 2,048
    "halving_doubling": (0.1e-3, 24e-9, True),  # 0.11 ms at 64 ranks, 2.6 ms at 8,192
    "hierarchical": (80e-6, 25e-9, False),  # 80 us at 64 ranks, 0.43 ms at 16,384
    "reduce_broadcast": (30e-6, 10e-9, False),  # 65 us at 4,096 ranks
    "uniform": (10e-6, 2e-9, False),  # NCCL cost models: one time for all ranks, the engine's vector work
}
COSTS["reduce_scatter"] = COSTS["all_gather"] = COSTS["ring"]  # half a ring (closed form)

# Seconds per collective, A + B*n, that DDP's own costs (ddp.bucket_overhead, gradient copies,
# overlap_slowdown: commsim/sim/ddp_costs.py) add when any is on, the default: the backward cut
# and slowed bucket by bucket (ten-odd vector operations; the throttled ranks together). Measured
# on the scale scenario (161 buckets, jitter, one throttled rank): 32 us per collective at 1,024
# ranks, 80 us at 16,384 (the ring's own call: 18 and 110 us).
DDP_COSTS = (28e-6, 3e-9)

# Seconds per collective and rank of a step with ddp.comm_streams > 1: commsim/sim/concurrent_streams.py
# steps event by event, each rank's next event on a heap (O(collectives x ranks x log ranks)) and
# never stops early on a steady state, the baseline neither. Measured with simulate() on the scale
# scenario's 78 buckets (jitter on), CPU time on the 2-core VM shared with other jobs (load average 2):
# 3.1e-6 at 256 ranks, 3.0e-6 at 1,024, 3.0e-6 at 4,096, 3.2e-6 at 8,192 (`python
# benchmarks/streams_speed.py --sizes 256,1024,4096,8192 --reference-sizes "" --steps 3`; 2 steps
# at 16,384: 3.7e-6, the log and the caches), and in a run of the default table (2 steps, the old
# loop timed too) 3.0e-6 at 1,024, 3.8e-6 at 4,096, 4.3e-6 at 8,192.
# 4e-6, near the slower runs: an estimate that refuses what would overrun, not one that is met
# only on a quiet machine. The scan it replaced took 2e-6 per collective and rank^2.
STREAMS_RANK = 4e-6
# ddp.comm_shared: all puts every collective in flight into the shared pool for its whole time
# (no fixed part runs free), and each event of the loop advances every member of the pool: 1.4-1.7
# times the seconds of the default (bandwidth) at 1,024 ranks, the same process alternating the
# two (k 2-64, capacity 1 and 1e6: 4.7-5.6e-6 against 3.3e-6 for k 2, bandwidth; k 8, bandwidth:
# 3.8e-6). Without it a 100-step, 8,192-rank scale run with comm_shared all passed at ~7 min.
STREAMS_SHARED_ALL = 1.7

# What counts as large for each key, to name the one to change, and which way to change it
# (fewer buckets take a larger bucket_cap).
_TYPICAL = {"steps": 1000, "cluster.nodes": 1024, "ddp.bucket_cap": 1000}
_ADVICE = {"steps": "lower steps", "cluster.nodes": "lower cluster.nodes", "ddp.bucket_cap": "raise ddp.bucket_cap"}


class BudgetError(ScenarioError):
    """A scenario whose estimated memory or run time exceeds the limits (``--force`` runs it)."""


@dataclass(frozen=True)
class Estimate:
    """The estimated peak memory (bytes) and run time (seconds) of ``commsim run``."""

    memory_bytes: float
    seconds: float
    steps: int
    ranks: int
    collectives: int  # per step
    simulated_steps: int  # of the scenario run (the baseline simulates min(steps, STEADY_STEPS))
    algorithm: str  # the kernel most collectives run (after `auto`)
    trace_ranks: int = 0  # ranks of the --trace run (0: none)

    def key(self, memory: bool) -> str:
        """The key that makes the run big: the factor furthest above its typical value."""
        steps = self.steps if memory else self.simulated_steps
        ratios = {"steps": steps, "cluster.nodes": self.ranks, "ddp.bucket_cap": self.collectives}
        return max(ratios, key=lambda k: ratios[k] / _TYPICAL[k])


def _stochastic(scenario: spec.Scenario) -> bool:
    """True when steps differ (the engine cannot stop early on a steady state)."""
    for s in scenario.stragglers:
        if isinstance(s, spec.Throttle):
            return True
        if isinstance(s, spec.Jitter) and s.cv > 0:
            return True
        if isinstance(s, spec.Stall) and not (s.probability == 0 or (s.every is not None and s.every > scenario.steps)):
            return True
    return False


def _straggler_seconds(scenario: spec.Scenario) -> float:
    n, steps, seconds = scenario.world_size, scenario.steps, 0.0
    for s in scenario.stragglers:
        if isinstance(s, spec.Jitter) and s.cv > 0:
            seconds += (n if s.ranks is None else len(s.ranks)) * (SETUP + steps * DRAW)
        elif isinstance(s, spec.Stall) and s.probability is not None:
            seconds += len(s.ranks) * (SETUP + steps * DRAW)
        elif isinstance(s, spec.Throttle):
            seconds += len(s.ranks) * steps * THROTTLE
    return seconds


def _call_seconds(kind: str, n: int) -> float:
    a, b, log = COSTS[kind]
    return a + b * n * (math.log2(n) if log and n > 1 else 1.0)


def _collective_kinds(scenario: spec.Scenario, sizes) -> list:
    """The kernel each collective of a step runs, as a key of :data:`COSTS`."""
    sharding, collective = scenario.ddp.sharding, scenario.collective
    # NCCL's cost models and the physical `nccl` algorithm: one time for all ranks (a barrier kernel)
    # (a calibration's link levels make the ring per rank; a physical fit keeps `nccl` a barrier)
    uniform = collective.algorithm == "nccl" or (collective.model != "alpha-beta" and scenario.calibration is None)
    if sharding != "none":  # reduce-scatters and all-gathers: ring halves (or one NCCL time)
        per_bucket = 2 if sharding == "zero2" else 3
        return ["uniform" if uniform else "reduce_scatter"] * (per_bucket * len(sizes))
    if uniform:
        return ["uniform"] * len(sizes)
    if scenario.calibration is not None or collective.algorithm == "ring":
        return ["ring"] * len(sizes)
    fabric = cluster_fabric(scenario.cluster)
    chosen: Dict[float, str] = {}
    for size in sizes:  # a few distinct sizes: first, full, remainder
        if size not in chosen:
            chosen[size] = resolve(collective.algorithm, fabric, float(size))
    return [chosen[size] for size in sizes]


def estimate(scenario: spec.Scenario, trace_ranks: int = 0) -> Estimate:
    """The estimated peak memory and run time of simulating ``scenario`` and its baseline, and
    with `trace_ranks` > 0 of ``run --trace`` on that many ranks too (see TRACE_SPAN)."""
    n, steps = scenario.world_size, scenario.steps
    ddp = scenario.ddp
    sizes = scenario.gradient_buckets()
    kinds = _collective_kinds(scenario, sizes)
    c = len(kinds)
    memory = M0 + steps * n * B_RANK_STEP + steps * c * B_OP_STEP + n * B_RANK
    simulated = steps if _stochastic(scenario) else min(steps, STEADY_STEPS)
    baseline = min(steps, STEADY_STEPS)
    calls = sum(_call_seconds(kind, n) for kind in kinds)
    once = 0.0  # per run, not per step
    if ddp.comm_streams > 1:  # every step of both runs, event by event
        simulated = baseline = steps
        # the kernels are planned once and asked their time alone once each, not called every
        # step; DDP's costs are scalars per rank and event there, in STREAMS_RANK's measurement
        once = calls
        per_step = c * STREAMS_RANK * n * (STREAMS_SHARED_ALL if ddp.comm_shared == "all" else 1.0)
    else:
        per_step = calls
        if n > 1 and ddp.costs.on:
            per_step += c * (DDP_COSTS[0] + DDP_COSTS[1] * n)
    seconds = ((simulated + baseline) * per_step + 2 * once + steps * n * FILL
               + _straggler_seconds(scenario))
    traced = min(int(trace_ranks), n) if trace_ranks > 0 else 0
    if traced:  # a third run, as the scenario's, and its spans
        spans = steps * c * traced
        memory += spans * (TRACE_SPAN_BYTES + 24)
        seconds += (simulated * per_step + once + steps * n * FILL + _straggler_seconds(scenario)
                    + spans * TRACE_SPAN)
    common = max(set(kinds), key=kinds.count) if kinds else "ring"
    return Estimate(memory, seconds, steps, n, c, simulated, common, traced)


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 writes "max" for no limit


def _cgroup_headroom(cgroup: str) -> Optional[int]:
    """Bytes the memory cgroup (a container's limit) still allows, or None where it sets none."""
    for limit_file, usage_file in (("memory.max", "memory.current"),  # cgroup v2
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):  # v1
        limit = _read_int(f"{cgroup}/{limit_file}")
        usage = _read_int(f"{cgroup}/{usage_file}")
        if limit is not None and usage is not None:
            return max(limit - usage, 0)
    return None


# The least memory one local rank takes: a fresh interpreter (multiprocessing "spawn") that
# imports torch, measured at 218 MiB peak RSS (torch 2.x CPU, Python 3.11) before any
# process group or tensor; the job itself adds to it.
RANK_MEMORY_BYTES = 200 * 1024**2


def local_ranks_problem(nprocs: int) -> Optional[str]:
    """Why `nprocs` local ranks cannot be launched on this machine, or None: each takes at least
    :data:`RANK_MEMORY_BYTES` (``--nprocs 100000``, or 2**64, would spawn torch interpreters
    until the machine runs out of memory, or fail inside the launcher)."""
    free = available_memory()
    if free is not None and nprocs * RANK_MEMORY_BYTES > free:
        return (f"expected at most {max(free // RANK_MEMORY_BYTES, 1):,} local ranks (each is a Python interpreter "
                f"with torch, at least {RANK_MEMORY_BYTES // 1024**2} MiB; {free / 1024**3:.1f} GiB of memory "
                f"available), got {nprocs:,}")
    return None


# Host memory one gloo rank of an all-reduce sweep holds at its largest size, beyond the
# interpreter: its send and receive tensors of that size (validate.collective_bench.bench_size;
# several smaller ones below a cold-cache threshold take less)
SWEEP_BUFFERS = 2


def sweep_memory_problem(nprocs: int, max_size: int) -> Optional[str]:
    """Why a sweep up to `max_size` bytes on `nprocs` local gloo ranks cannot fit in this
    machine's memory, or None: each rank holds :data:`SWEEP_BUFFERS` tensors of that size beside
    :data:`RANK_MEMORY_BYTES` (``--max-size 1T`` swept for hours towards a 1 TiB tensor, and
    a rank's allocation then failed)."""
    free = available_memory()
    need = nprocs * (RANK_MEMORY_BYTES + SWEEP_BUFFERS * max_size)
    if free is not None and need > free:
        return (f"expected a sweep that fits in memory, got {nprocs:,} local ranks x ({RANK_MEMORY_BYTES // 1024**2} "
                f"MiB + {SWEEP_BUFFERS} tensors of {max_size:,} bytes) = {need / 1024**3:,.1f} GiB, with "
                f"{free / 1024**3:.1f} GiB of memory available")
    return None


def available_memory(meminfo: str = "/proc/meminfo", cgroup: str = "/sys/fs/cgroup") -> Optional[int]:
    """Bytes of memory available to a new process, or None where unknown: the kernel's
    ``MemAvailable``, or less when a memory cgroup (a container's limit) allows less."""
    found = []
    try:
        with open(meminfo, encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)  # the kernel writes kB (KiB)
                    break
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        pass
    headroom = _cgroup_headroom(cgroup)
    if headroom is not None:
        found.append(headroom)
    return min(found) if found else None


def _advice(key: str, est: Estimate) -> str:
    return f"{_ADVICE[key]} or --trace-ranks" if est.trace_ranks else _ADVICE[key]


def _bytes_text(value: float) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value / 1024:.1f} KiB"


def _seconds_text(value: float) -> str:
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 60:
        return f"{value / 60:.0f} min"
    return f"{value:.0f} s"


def check(
    scenario: spec.Scenario,
    source: str,
    available: Callable[[], Optional[int]] = available_memory,
    trace_ranks: int = 0,
) -> Estimate:
    """The scenario's :class:`Estimate` (with a ``--trace`` of `trace_ranks` ranks when > 0), or
    :class:`BudgetError` (at the key to change) when it exceeds :data:`MAX_MEMORY_BYTES`, the
    memory ``available()`` or :data:`MAX_SECONDS`."""
    est = estimate(scenario, trace_ranks)
    shape = f"{est.steps:,} steps x {est.ranks:,} ranks, {est.collectives:,} collectives per step"
    if est.trace_ranks:
        shape += f", a trace of {est.trace_ranks:,} ranks"
    limit, limit_text = MAX_MEMORY_BYTES, f"the {_bytes_text(MAX_MEMORY_BYTES)} limit"
    free = available()
    if free is not None and free < limit:
        limit, limit_text = free, f"the {_bytes_text(free)} of memory available"
    if est.memory_bytes > limit:
        key = est.key(memory=True)
        raise BudgetError(
            source, key,
            f"the run needs about {_bytes_text(est.memory_bytes)} of memory ({shape}), more than {limit_text}; "
            f"{_advice(key, est)}, or pass --force to run it anyway",
        )
    if est.seconds > MAX_SECONDS:
        key = est.key(memory=False)
        raise BudgetError(
            source, key,
            f"the run would take about {_seconds_text(est.seconds)} ({est.simulated_steps:,} steps simulated x "
            f"{est.ranks:,} ranks, {est.collectives:,} {est.algorithm} collectives per step), more than the "
            f"{_seconds_text(MAX_SECONDS)} limit; {_advice(key, est)}, or pass --force to run it anyway",
        )
    return est
