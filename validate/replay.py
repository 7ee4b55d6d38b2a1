"""Replay a scenario's sync-SGD job on real ranks (``commsim validate --mode replay``).

Every rank does what the simulator assumes (docs/collectives.md, "PyTorch DDP"; commsim.sim.engine):

- per step: the scenario's stall, then forward (and, with gradient accumulation, the earlier
  micro-batches) for the scenario's durations times the rank's straggler factor;
- during the last backward, bucket j of the scenario's DDP layout is ready when fraction
  ready_fraction[j] of the backward is done (at the end of backward without overlap);
- a ready bucket is all-reduced for real (a float32 tensor of the bucket's bytes) by one
  communication thread, in bucket order (DDP's one stream): a bucket starts when it is
  ready and the previous one is done;
- the optimizer runs when both backward and the last all-reduce are done; the next step
  starts right after, on that rank (no barrier between steps).

Compute is emulated by sleeping, not spinning: a GPU's compute leaves the host CPU free
for communication, and a spinning host thread would steal cores from gloo. Straggler
factors and stalls come from commsim.sim.stragglers.perturbations, so the real run and the
simulation see the same draws. Clocks: time.monotonic (one clock for all local ranks).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Dict, List

import numpy as np
import torch
import torch.distributed as dist

SETTLE_S = 0.02  # common start: every rank begins this long after the last one left the barrier


def _sleep_until(t: float) -> None:
    while True:
        left = t - time.monotonic()
        if left <= 0:
            return
        time.sleep(left)


def common_start(device: str = "cpu") -> float:
    """Start every rank's timed steps at one instant: a barrier, then all ranks agree on the
    latest clock reading after it (one monotonic clock for all local ranks) and sleep until
    SETTLE_S past it. Returns that instant; used by the replay and the DDP job alike."""
    dist.barrier()
    left = torch.tensor([time.monotonic()], dtype=torch.float64, device=device)
    dist.all_reduce(left, op=dist.ReduceOp.MAX)
    start = float(left.item()) + SETTLE_S
    _sleep_until(start)
    return start


class CommStream:
    """One thread that all-reduces buckets in order (on `group`, default the whole job),
    recording when each starts and ends."""

    def __init__(self, buffers: List[torch.Tensor], group=None):
        self.buffers, self.group = buffers, group
        self.jobs: "queue.Queue" = queue.Queue()
        self.done: "queue.Queue" = queue.Queue()
        self.error: List[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            j = self.jobs.get()
            if j is None:
                return
            try:
                t0 = time.monotonic()
                dist.all_reduce(self.buffers[j], group=self.group)
                self.done.put((j, t0, time.monotonic()))
            except BaseException as exc:  # surfaced in the main thread
                self.error.append(exc)
                self.done.put((j, float("nan"), float("nan")))
                return

    def launch(self, j: int) -> None:
        self.jobs.put(j)

    def wait(self, count: int, timeout_s: float) -> List[tuple]:
        out = [self.done.get(timeout=timeout_s) for _ in range(count)]
        if self.error:
            raise self.error[0]
        return out

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join(timeout=5.0)


def _one_step(plan: Dict, comm: CommStream, factor: float, stall: float, timeout_s: float) -> Dict:
    """One step on this rank, starting now. Returns its timestamps."""
    m = plan["gradient_accumulation"]
    fwd, bwd, opt = plan["forward_s"], plan["backward_s"], plan["optimizer_s"]
    fractions = plan["ready_fraction"] if plan["overlap"] else [1.0] * len(plan["ready_fraction"])
    t0 = time.monotonic()
    _sleep_until(t0 + stall)
    backward_start = t0 + stall + factor * (m * fwd + (m - 1) * bwd)
    _sleep_until(backward_start)
    for j, frac in enumerate(fractions):
        _sleep_until(backward_start + factor * bwd * frac)
        comm.launch(j)
    _sleep_until(backward_start + factor * bwd)
    done = sorted(comm.wait(len(fractions), timeout_s))
    comm_end = max([d[2] for d in done], default=time.monotonic())
    _sleep_until(max(comm_end, time.monotonic()) + factor * opt)
    return {"start": [d[1] for d in done], "finish": [d[2] for d in done],
            "end": time.monotonic()}


def rank_replay(ctx, plan: Dict) -> Dict:
    """validate.launch entry point: warm-up steps, then the timed steps; returns timestamps.

    plan: steps, warmup_steps, forward_s, backward_s, optimizer_s, gradient_accumulation,
    overlap, bucket_bytes, ready_fraction, factor (steps x n), stall (steps x n), timeout_s."""
    rank = ctx.rank
    buffers = [torch.zeros(max(1, int(b) // 4), dtype=torch.float32) for b in plan["bucket_bytes"]]
    comm = CommStream(buffers)
    timeout_s = plan["timeout_s"]
    try:
        for _ in range(plan["warmup_steps"]):
            ctx.progress()
            _one_step(plan, comm, 1.0, 0.0, timeout_s)
        ctx.progress()
        start = common_start(ctx.device)
        steps = []
        for s in range(plan["steps"]):
            ctx.progress()
            steps.append(_one_step(plan, comm, plan["factor"][s][rank], plan["stall"][s][rank], timeout_s))
        ctx.progress()
        dist.barrier()
    finally:
        comm.close()
    return {"rank": rank, "start": start, "steps": steps}


def assemble(results: List[Dict]) -> Dict[str, np.ndarray]:
    """Per-rank results -> arrays: start, rank_end (steps, n), bucket_launch/finish (steps, buckets, n)."""
    n = len(results)
    steps = len(results[0]["steps"])
    nb = len(results[0]["steps"][0]["start"]) if steps else 0
    rank_end = np.zeros((steps, n))
    launch = np.zeros((steps, nb, n))
    finish = np.zeros((steps, nb, n))
    for r, res in enumerate(results):
        for s, st in enumerate(res["steps"]):
            rank_end[s, r] = st["end"]
            launch[s, :, r] = st["start"]
            finish[s, :, r] = st["finish"]
    return {"start": float(results[0]["start"]), "rank_end": rank_end, "bucket_launch": launch, "bucket_finish": finish}


def measure(scenario, backend: str, nprocs: int, warmup_steps: int = 2, timeout_s: float = 120.0,
            echo=print) -> Dict:
    """Replay `scenario` on `nprocs` local ranks; return commsim.analysis.validation.measured_summary.

    Raises validate.launch.LaunchError if a rank dies or hangs, CalibrationError if the
    scenario cannot be replayed."""
    from commsim.analysis.validation import measured_summary, replay_plan
    from validate.launch import launch

    plan = replay_plan(scenario, warmup_steps, timeout_s)
    echo(f"# replay {scenario.name}: {len(plan['bucket_bytes'])} buckets, {scenario.steps} steps "
         f"(+{warmup_steps} warm-up) on {nprocs} x {backend}")
    arrays = assemble(launch(rank_replay, nprocs, backend, timeout_s, args=(plan,)))
    return measured_summary(arrays["start"], arrays["rank_end"], arrays["bucket_launch"], arrays["bucket_finish"])


def validate_scenario(scenario, calibration, backend: str, nprocs: int, warmup_steps: int = 2,
                      timeout_s: float = 120.0, echo=print) -> Dict:
    """Measure the scenario (and, with stragglers, its straggler-free baseline) and compare it
    with its calibrated simulation: the `commsim validate` report (without its header keys)."""
    from commsim.analysis.validation import compare, predicted_summary

    predicted = predicted_summary(scenario, calibration)
    measured = measure(scenario, backend, nprocs, warmup_steps, timeout_s, echo)
    baseline = None
    if scenario.stragglers:
        baseline = measure(scenario.without_stragglers(), backend, nprocs, warmup_steps, timeout_s, echo)
        measured["comm_time_s"] = baseline.get("comm_time_s")  # predicted comm is the baseline's too
    return compare(measured, predicted, baseline)
