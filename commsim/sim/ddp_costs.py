"""DDP's own costs, beyond the collectives: what PyTorch's Reducer adds to a training step.

Three costs (PyTorch DistributedDataParallel, torch/csrc/distributed/c10d/reducer.cpp; Li et
al., "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020,
Sec. 3-4), each a scenario key under ``ddp:`` (:func:`parse_ddp_costs`):

- ``bucket_overhead`` (seconds per bucket, default 20 us): the host work of launching one
  bucket's all-reduce (the autograd hook marking the bucket ready, ProcessGroupNCCL's work
  object and stream synchronisation, the NCCL kernel launch). It delays every bucket's
  collective after its last gradient is ready, and it is why many small buckets lose to few
  large ones when communication is exposed (the paper's bucket-size sweep). The default is
  of the order of NCCL's own base latencies (tuning.cc baseLat 6.6-14 us) plus one launch;
  an estimate to be fitted (``commsim calibrate`` from a ``validate --mode ddp`` run), not a
  measured constant.
- ``memory_bandwidth`` (bytes/s, default 1.5 TB/s, the A100 40 GB HBM2 datasheet rate) with
  ``gradient_as_bucket_view`` (default false, as PyTorch): each gradient is copied into its
  bucket's flat buffer on the compute stream (read + write: 2 bytes moved per byte, so
  ``2 B / memory_bandwidth``), and, without the bucket view, copied back into ``.grad`` after
  the all-reduce (the same again, before the optimizer). With the view, neither copy.
- ``overlap_slowdown`` (fraction, default 0.1): compute runs slower while a collective is in
  flight, since NCCL's kernels occupy SMs (one thread block per channel: 16 of an A100's 108
  SMs is 15%) and memory bandwidth. Compute that overlaps communication progresses at
  ``1 / (1 + overlap_slowdown)`` of its rate (:func:`stretched_finish`). The default is the
  order of that SM share, not a measured constant.

Pure module: numbers and closed forms; the engine calls :func:`bucket_launch_time`,
:func:`bucket_copy_in_time`, :func:`copy_back_time` and :func:`stretched_finish`.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence, Tuple

from commsim.errors import ScenarioError
from commsim.scenario.spec import DDPCosts
from commsim.units import parse_rate, parse_time

__all__ = ["DDPCosts", "NONE", "KEYS", "bucket_copy_in_time", "bucket_launch_time", "copy_back_time",
           "stretched_finish", "step_overhead", "parse_ddp_costs"]

KEYS = ("bucket_overhead", "memory_bandwidth", "gradient_as_bucket_view", "overlap_slowdown")


NONE = DDPCosts(0.0, 1e30, True, 0.0)  # no DDP costs at all: the model before them


def bucket_copy_in_time(bucket_bytes: float, costs: DDPCosts) -> float:
    """Seconds the compute stream spends copying a bucket's gradients into its flat buffer
    (read + write at memory bandwidth); 0 with ``gradient_as_bucket_view``."""
    if costs.gradient_as_bucket_view:
        return 0.0
    return 2.0 * bucket_bytes / costs.memory_bandwidth


def bucket_launch_time(ready: float, previous_launch: float, costs: DDPCosts) -> float:
    """When a bucket's collective starts: its last gradient (and its copy-in) done at `ready`,
    plus the per-bucket host cost; launches are issued one after another by one host thread,
    so never sooner than `previous_launch` plus that cost."""
    return max(ready, previous_launch) + costs.bucket_overhead


def copy_back_time(total_bytes: float, costs: DDPCosts) -> float:
    """Seconds after the last all-reduce to copy the reduced buckets back into ``.grad``
    before the optimizer (read + write); 0 with ``gradient_as_bucket_view``."""
    if costs.gradient_as_bucket_view:
        return 0.0
    return 2.0 * total_bytes / costs.memory_bandwidth


def stretched_finish(start: float, work: float, busy: Iterable[Tuple[float, float]], slowdown: float) -> float:
    """When compute of `work` seconds (at full rate) that starts at `start` finishes, if it
    runs at ``1 / (1 + slowdown)`` of its rate inside the `busy` intervals (collectives in
    flight; (begin, end) pairs, any order, may overlap) and at full rate outside them."""
    if work <= 0:
        return start
    if slowdown <= 0:
        return start + work
    # merge the busy intervals that end after `start`
    merged = []
    for b, e in sorted((max(b, start), e) for b, e in busy if e > start and e > b):
        if merged and b <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([b, e])
    t, left, rate_busy = start, work, 1.0 / (1.0 + slowdown)
    for b, e in merged:
        if b > t:  # free time before this interval
            if left <= b - t:
                return t + left
            left -= b - t
            t = b
        span = e - t
        if left <= span * rate_busy:
            return t + left / rate_busy
        left -= span * rate_busy
        t = e
    return t + left


def step_overhead(bucket_sizes: Sequence[float], costs: DDPCosts) -> float:
    """DDP's own seconds per step when nothing overlaps (communication fully exposed): every
    bucket's copy-in and host cost, and the copy back. With overlap the engine hides part of
    it; this bound is what a per-bucket cost adds to a communication-bound step."""
    total = float(sum(bucket_sizes))
    return (sum(bucket_copy_in_time(b, costs) for b in bucket_sizes) + len(bucket_sizes) * costs.bucket_overhead
            + copy_back_time(total, costs))


def parse_ddp_costs(raw: Mapping[str, Any], source: str, where: str = "ddp") -> DDPCosts:
    """The DDP costs of a scenario's raw ``ddp:`` mapping (keys :data:`KEYS`; the section's
    other keys are the schema's). ScenarioError naming ``ddp.KEY`` for a bad value."""
    if raw is None:
        return DDPCosts()
    if not isinstance(raw, Mapping):
        raise ScenarioError(source, where, f"expected a mapping, got {type(raw).__name__}")
    kw = {}
    for key, parse in (("bucket_overhead", lambda v: parse_time(v, allow_zero=True)), ("memory_bandwidth", parse_rate)):
        if key in raw:
            try:
                kw[key] = parse(raw[key])
            except ValueError as exc:  # the unit parser's message says what was expected and given
                raise ScenarioError(source, f"{where}.{key}", str(exc)) from None
    if "gradient_as_bucket_view" in raw:
        v = raw["gradient_as_bucket_view"]
        if not isinstance(v, bool):
            raise ScenarioError(source, f"{where}.gradient_as_bucket_view", f"expected true or false, got {v!r}")
        kw["gradient_as_bucket_view"] = v
    if "overlap_slowdown" in raw:
        v = raw["overlap_slowdown"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v <= 10):
            raise ScenarioError(source, f"{where}.overlap_slowdown", f"expected a fraction in [0, 10] (0.1 = 10% slower), got {v!r}")
        kw["overlap_slowdown"] = float(v)
    return DDPCosts(**kw)
