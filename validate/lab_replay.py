"""Replay a scenario on a sub-group of a multi-node job, every straggler kind injected for real.

The step is validate.replay's (the scenario's compute emulated by sleeping, its DDP buckets
all-reduced for real by one communication thread, in order, as they become ready; see that
module's docstring), with what the lab adds:

- a process sub-group: the replay runs on `plan["ranks"]` of the job (the scenario's ranks
  0..n-1, in that order) while the other ranks wait, so that one job can replay several
  scenarios on different nodes (a slow node's link in one, not in the others) at one start-up;
- ``throttle``: a throttled rank's compute follows the scenario's thermal clock
  (commsim.sim.stragglers.ThermalClock: full speed for heat_up seconds, clock_fraction of it for
  throttled_time, repeating, from the first timed step on, as the simulator's time zero), the
  duty cycle the simulator assumes;
- ``slow_link``: nothing to do on the ranks: the lab shapes the node's link (the parent does it
  before the run); :func:`lab_plan` says which node, and refuses a rank's hop inside a node
  (loopback cannot be shaped) with a reason;
- a ring probe after the timed steps: every rank sends `probe_bytes` to the next and times
  what it receives from the previous one (the link into it), so a slow link can be named.

Clocks: time.monotonic, one clock for every namespace of the machine (network namespaces do
not change clocks). On a real cluster the replay's common start needs synchronized clocks.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Dict, List, Optional

import torch
import torch.distributed as dist

from commsim.calibration import CalibrationError
from commsim.scenario.spec import Scenario, SlowLink, Throttle
from commsim.sim.stragglers import ThermalClock, perturbations
from validate.replay import CommStream, _sleep_until

SETTLE_S = 0.02
PROBE_BYTES = 1 << 20


def lab_plan(scenario: Scenario, ranks: List[int], warmup_steps: int = 1, timeout_s: float = 120.0,
             probe_bytes: int = PROBE_BYTES) -> Dict:
    """What every rank of the replay does (JSON-able), and the slow links the lab must shape:
    plan["slow_nodes"] = {scenario node: bandwidth factor}.

    Everything validate.replay refuses (sharding, too big a gradient) is refused here too; a
    slow link on a rank's hop inside a node is refused (only a node's network link is shaped)."""
    from commsim.analysis.validation import replay_plan

    if len(ranks) != scenario.world_size:
        raise ValueError(f"scenario {scenario.name!r} has {scenario.world_size} ranks, the replay is given {len(ranks)}")
    slow: Dict[int, float] = {}
    for s in scenario.stragglers:
        if isinstance(s, SlowLink):
            if s.node is None:
                raise CalibrationError(
                    f"scenario {scenario.name!r}: slow_link on rank {s.rank} cannot be applied in the lab: it shapes a "
                    "node's network link, not a rank's hop (inside a node that hop is loopback); use node: K")
            slow[s.node] = slow.get(s.node, 1.0) * s.factor
    # validate.replay's plan of the compute and buckets, without the two kinds it cannot inject;
    # the per-step draws come from the whole scenario (a draw's stream is its entry's index)
    rest = tuple(s for s in scenario.stragglers if not isinstance(s, (SlowLink, Throttle)))
    plan = replay_plan(replace(scenario, stragglers=rest), warmup_steps, timeout_s)
    pert = perturbations(scenario)
    plan.update(factor=pert.factor.tolist(), stall=pert.stall.tolist(), ranks=[int(r) for r in ranks],
                clocks={str(r): [c.heat_up, c.throttled_time, c.clock_fraction, c.phase] for r, c in pert.clocks.items()},
                slow_nodes={str(k): f for k, f in sorted(slow.items())}, probe_bytes=int(probe_bytes))
    return plan


class _Compute:
    """When compute of a given amount of full-clock work, begun at a time, is done on this rank:
    at once proportional, or under a thermal clock whose time zero is `zero`."""

    def __init__(self, clock: Optional[ThermalClock] = None, zero: float = 0.0):
        self.clock, self.zero = clock, zero

    def finish(self, t: float, work: float) -> float:
        if self.clock is None:
            return t + work
        return self.zero + float(self.clock.finish(t - self.zero, work))


def _one_step(plan: Dict, comm: CommStream, factor: float, stall: float, compute: _Compute) -> Dict:
    """One step on this rank, starting now (validate.replay's step, compute through `compute`).
    Besides validate.replay's timestamps: when each bucket was ready (handed to the thread)."""
    m = plan["gradient_accumulation"]
    fwd, bwd, opt = plan["forward_s"], plan["backward_s"], plan["optimizer_s"]
    fractions = plan["ready_fraction"] if plan["overlap"] else [1.0] * len(plan["ready_fraction"])
    t0 = time.monotonic()
    _sleep_until(t0 + stall)
    backward_start = compute.finish(t0 + stall, factor * (m * fwd + (m - 1) * bwd))
    _sleep_until(backward_start)
    ready = []
    for j, frac in enumerate(fractions):
        _sleep_until(compute.finish(backward_start, factor * bwd * frac))
        ready.append(time.monotonic())
        comm.launch(j)
    _sleep_until(compute.finish(backward_start, factor * bwd))
    done = sorted(comm.wait(len(fractions), plan["timeout_s"]))
    comm_end = max([d[2] for d in done], default=time.monotonic())
    _sleep_until(compute.finish(max(comm_end, time.monotonic()), factor * opt))
    return {"start": [d[1] for d in done], "finish": [d[2] for d in done], "ready": ready, "end": time.monotonic()}


def _common_start(group, device: str) -> float:
    """Every member starts its timed steps at one instant (validate.replay.common_start on a group)."""
    dist.barrier(group=group)
    t = torch.tensor([time.monotonic()], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    start = float(t.item()) + SETTLE_S
    _sleep_until(start)
    return start


def _ring_probe(group, me: int, n: int, nbytes: int, device: str) -> Optional[float]:
    """Seconds until this rank has received `nbytes` from the previous rank of the ring, all
    ranks sending to the next at once: the time of the link into this rank.

    With 2 ranks the two directions are timed one after the other: they would share one
    gloo connection (one pair per peer), whose two directions do not proceed independently
    (measured: one of them took twice as long), while with more ranks the sends and receives
    of a rank go to two different peers."""
    if n < 2 or nbytes <= 0:
        return None
    send = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
    recv = torch.empty_like(send)
    nxt, prev = dist.get_global_rank(group, (me + 1) % n), dist.get_global_rank(group, (me - 1) % n)
    if n == 2:
        took = None
        for sender in (0, 1):
            dist.barrier(group=group)
            if me == sender:
                dist.send(send, nxt, group=group)
            else:
                t0 = time.monotonic()
                dist.recv(recv, prev, group=group)
                took = time.monotonic() - t0
        return took
    dist.barrier(group=group)
    t0 = time.monotonic()
    out = dist.isend(send, nxt, group=group)
    inc = dist.irecv(recv, prev, group=group)
    inc.wait()
    took = time.monotonic() - t0
    out.wait()
    return took


def rank_replay(ctx, plan: Dict) -> Optional[Dict]:
    """validate.multinode entry point: the replay on the plan's ranks; the others wait.

    Returns, on a member, {"rank" (its scenario rank), "start", "steps", "probe_recv_s"} (the
    shape validate.replay.assemble reads); None elsewhere. Every rank of the job calls it."""
    ranks = plan["ranks"]
    group = dist.new_group(ranks)  # a collective of the whole job
    result = None
    if ctx.rank in ranks:
        result = _replay(ctx, plan, group, ranks.index(ctx.rank))
    dist.barrier()
    return result


def _replay(ctx, plan: Dict, group, me: int) -> Dict:
    buffers = [torch.zeros(max(1, int(b) // 4), dtype=torch.float32, device=ctx.device) for b in plan["bucket_bytes"]]
    comm = CommStream(buffers, group)
    clock = plan["clocks"].get(str(me))
    try:
        for _ in range(plan["warmup_steps"]):
            ctx.progress()
            _one_step(plan, comm, 1.0, 0.0, _Compute())
        ctx.progress()
        start = _common_start(group, ctx.device)
        compute = _Compute(ThermalClock(*clock) if clock else None, zero=start)
        steps = []
        for s in range(plan["steps"]):
            ctx.progress()
            steps.append(_one_step(plan, comm, plan["factor"][s][me], plan["stall"][s][me], compute))
        ctx.progress()
        dist.barrier(group=group)
    finally:
        comm.close()
    probe = _ring_probe(group, me, len(plan["ranks"]), int(plan.get("probe_bytes", 0)), ctx.device)
    return {"rank": me, "start": start, "steps": steps, "probe_recv_s": probe}
