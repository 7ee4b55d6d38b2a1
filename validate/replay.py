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
simulation see the same draws. Every straggler kind goes through this one replay (:func:`plan_for`):

- ``slow_rank``, ``jitter``, ``stall``: the per-step factor and stall of each rank;
- ``throttle``: a throttled rank's compute follows the scenario's thermal clock
  (commsim.sim.stragglers.ThermalClock: full speed for heat_up seconds, clock_fraction of it for
  throttled_time, repeating, from the first timed step on, as the simulator's time zero), the
  duty cycle the simulator assumes; it needs nothing but a clock on compute, so it runs anywhere;
- ``slow_link`` (``node: k``): node k's network link shaped for real (tc) while the scenario
  runs, which only the lab can do (``links="lab"``: its launcher, or each host's own under
  ``commsim lab run``, shapes the node's link); on other hardware it is refused in one line.

A replay may run on a sub-group of the job (``plan["ranks"]``: the scenario's ranks 0..n-1, in
that order; the other ranks wait), so that one job replays several scenarios at one start-up.
After the timed steps a ring probe (every rank sends ``probe_bytes`` to the next and times what
it receives from the previous one) lets the validator name a slow link (commsim.lab.diagnose).

Clocks: time.monotonic, one clock for every rank of a machine (network namespaces do not
change clocks). Across real hosts the common start needs synchronized clocks.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist

from commsim.calibration import CalibrationError
from commsim.scenario.spec import Scenario, SlowLink, Throttle
from commsim.sim.stragglers import ThermalClock, perturbations

SETTLE_S = 0.02  # common start: every rank begins this long after the last one left the barrier
PROBE_BYTES = 1 << 20
NO_SHAPING = ("cannot be applied on this hardware: it needs a node's network link that commsim can shape (tc on "
              "the link of a `commsim lab` node); run it in the lab (commsim lab validate, or commsim validate "
              "--nnodes N under commsim lab run) or remove it with --set")


def _sleep_until(t: float) -> None:
    while True:
        left = t - time.monotonic()
        if left <= 0:
            return
        time.sleep(left)


def common_start(device: str = "cpu", group=None) -> float:
    """Start every rank's timed steps at one instant: a barrier, then all ranks agree on the
    latest clock reading after it (one monotonic clock for all local ranks) and sleep until
    SETTLE_S past it. Returns that instant; used by the replay and the DDP job alike."""
    dist.barrier(group=group)
    left = torch.tensor([time.monotonic()], dtype=torch.float64, device=device)
    dist.all_reduce(left, op=dist.ReduceOp.MAX, group=group)
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


def plan_for(scenario: Scenario, ranks: Optional[Sequence[int]] = None, warmup_steps: int = 2,
             timeout_s: float = 120.0, probe_bytes: int = PROBE_BYTES, links: str = "refuse") -> Dict:
    """What every rank of the replay does (JSON-able), every straggler kind included.

    commsim.analysis.validation.replay_plan's plan of the compute and buckets (what it refuses,
    sharding or too big a gradient, is refused here too), with the per-step draws of the whole
    scenario, each throttled rank's thermal clock (``clocks``) and ``slow_nodes`` = {scenario
    node: bandwidth factor} for whoever shapes the links. `ranks`: the job ranks the replay runs
    on (default: the whole job). `links`: "lab" when a node's link can be shaped, else
    "refuse": a slow_link is then a one-line CalibrationError saying why. A slow_link on a
    rank's hop (``rank: r``) is refused everywhere: only a node's network link is shaped
    (inside a node the hop is loopback)."""
    from commsim.analysis.validation import replay_plan

    if ranks is not None and len(ranks) != scenario.world_size:
        raise ValueError(f"scenario {scenario.name!r} has {scenario.world_size} ranks, the replay is given {len(ranks)}")
    if links not in ("lab", "refuse"):
        raise ValueError(f"links must be lab or refuse, got {links!r}")
    slow: Dict[int, float] = {}
    for i, s in enumerate(scenario.stragglers):
        if isinstance(s, SlowLink):
            if s.node is None:
                raise CalibrationError(
                    f"slow_link on rank {s.rank} cannot be applied for real: it shapes a node's network link, not a "
                    "rank's hop (inside a node that hop is loopback); use node: K", key=f"stragglers[{i}]")
            if links == "refuse":
                raise CalibrationError(f"slow_link on node {s.node} {NO_SHAPING}", key=f"stragglers[{i}]")
            slow[s.node] = slow.get(s.node, 1.0) * s.factor
    # the compute and buckets without the two kinds replay_plan leaves to this module; the
    # per-step draws come from the whole scenario (a draw's stream is its entry's index)
    rest = tuple(s for s in scenario.stragglers if not isinstance(s, (SlowLink, Throttle)))
    plan = replay_plan(replace(scenario, stragglers=rest), warmup_steps, timeout_s)
    pert = perturbations(scenario)
    plan.update(factor=pert.factor.tolist(), stall=pert.stall.tolist(),
                ranks=None if ranks is None else [int(r) for r in ranks],
                clocks={str(r): [c.heat_up, c.throttled_time, c.clock_fraction, c.phase] for r, c in pert.clocks.items()},
                slow_nodes={str(k): f for k, f in sorted(slow.items())}, probe_bytes=int(probe_bytes))
    return plan


class Compute:
    """When compute of a given amount of full-clock work, begun at a time, is done on this rank:
    at once proportional, or under a thermal clock whose time zero is `zero` (throttle)."""

    def __init__(self, clock: Optional[ThermalClock] = None, zero: float = 0.0):
        self.clock, self.zero = clock, zero

    def finish(self, t: float, work: float) -> float:
        if self.clock is None:
            return t + work
        return self.zero + float(self.clock.finish(t - self.zero, work))


def _one_step(plan: Dict, comm: CommStream, factor: float, stall: float, timeout_s: float,
              compute: Optional[Compute] = None) -> Dict:
    """One step on this rank, starting now. Returns its timestamps: when each bucket was ready
    (handed to the communication thread), started and finished, and when the step ended."""
    compute = compute or Compute()
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
    done = sorted(comm.wait(len(fractions), timeout_s))
    comm_end = max([d[2] for d in done], default=time.monotonic())
    _sleep_until(compute.finish(max(comm_end, time.monotonic()), factor * opt))
    return {"start": [d[1] for d in done], "finish": [d[2] for d in done], "ready": ready, "end": time.monotonic()}


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
    peer = (lambda i: dist.get_global_rank(group, i)) if group is not None else (lambda i: i)
    nxt, prev = peer((me + 1) % n), peer((me - 1) % n)
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
    """validate.launch / validate.multinode entry point: warm-up steps, then the timed steps.

    With plan["ranks"] the replay runs on those job ranks (a sub-group; the others wait) and
    returns None on the others. A member returns {"rank" (its scenario rank), "start",
    "steps", "probe_recv_s"} (the shape :func:`assemble` reads). Every rank of the job calls it.
    plan: see :func:`plan_for`."""
    ranks = plan.get("ranks")
    if ranks is None:
        return _replay(ctx, plan, None, ctx.rank)
    group = dist.new_group(ranks)  # a collective of the whole job
    result = None
    if ctx.rank in ranks:
        result = _replay(ctx, plan, group, ranks.index(ctx.rank))
    dist.barrier()
    return result


def _replay(ctx, plan: Dict, group, me: int) -> Dict:
    buffers = [torch.zeros(max(1, int(b) // 4), dtype=torch.float32, device=ctx.device) for b in plan["bucket_bytes"]]
    comm = CommStream(buffers, group)
    clock = plan.get("clocks", {}).get(str(me))
    timeout_s = plan["timeout_s"]
    try:
        for _ in range(plan["warmup_steps"]):
            ctx.progress()
            _one_step(plan, comm, 1.0, 0.0, timeout_s)
        ctx.progress()
        start = common_start(ctx.device, group)
        compute = Compute(ThermalClock(*clock) if clock else None, zero=start)
        steps = []
        for s in range(plan["steps"]):
            ctx.progress()
            steps.append(_one_step(plan, comm, plan["factor"][s][me], plan["stall"][s][me], timeout_s, compute))
        ctx.progress()
        dist.barrier(group=group)
    finally:
        comm.close()
    n = len(plan["ranks"]) if plan.get("ranks") is not None else ctx.world_size
    probe = _ring_probe(group, me, n, int(plan.get("probe_bytes", 0)), ctx.device)
    return {"rank": me, "start": start, "steps": steps, "probe_recv_s": probe}


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


def findings(per_rank: Sequence[Dict], node_of: Optional[Sequence[int]] = None) -> Tuple[Dict, List[Dict]]:
    """The measured summary (commsim.analysis.validation.measured_summary) of one replay's
    per-rank results (:func:`rank_replay`'s, by scenario rank) and the stragglers its
    measurements name (commsim.lab.diagnose; node_of[r]: rank r's node, default one per node)."""
    from commsim.analysis.validation import measured_summary
    from commsim.lab import diagnose

    arrays = assemble(list(per_rank))
    measured = measured_summary(arrays["start"], arrays["rank_end"], arrays["bucket_launch"], arrays["bucket_finish"])
    step_end = arrays["rank_end"].max(axis=1)
    step_start = np.concatenate(([arrays["start"]], step_end[:-1]))
    ready = np.array([[st["ready"] for st in r["steps"]] for r in per_rank]).transpose(1, 2, 0)  # (steps, buckets, n)
    probe = [r.get("probe_recv_s") for r in per_rank]
    return measured, diagnose.name_stragglers(step_start, ready, probe if any(x is not None for x in probe) else None,
                                              node_of)


def measure(scenario, backend: str, nprocs: int, warmup_steps: int = 2, timeout_s: float = 120.0,
            echo=print) -> Tuple[Dict, List[Dict]]:
    """Replay `scenario` on `nprocs` local ranks; return (commsim.analysis.validation.measured_summary,
    the stragglers the measurements name).

    Raises validate.launch.LaunchError if a rank dies or hangs, CalibrationError if the
    scenario cannot be replayed (a slow_link: one host's ranks share no link that can be shaped)."""
    from validate.launch import launch

    # no ring probe: every rank of one host talks over loopback, whose hops cannot differ
    plan = plan_for(scenario, None, warmup_steps, timeout_s, probe_bytes=0)
    echo(f"# replay {scenario.name}: {len(plan['bucket_bytes'])} buckets, {scenario.steps} steps "
         f"(+{warmup_steps} warm-up) on {nprocs} x {backend}")
    results = launch(rank_replay, nprocs, backend, timeout_s, args=(plan,))
    return findings(results, _node_of(scenario))


def _node_of(scenario) -> List[int]:
    g = scenario.cluster.gpus_per_node
    return [r // g for r in range(scenario.world_size)]


def _report(scenario, calibration, run) -> Dict:
    """Measure the scenario (and, with stragglers, its straggler-free baseline first) through
    `run(scenario, tag)` -> (summary, findings) and compare with the calibrated simulation."""
    from commsim.analysis.validation import compare, predicted_summary
    from commsim.lab import diagnose

    predicted = predicted_summary(scenario, calibration)  # first: refuse what cannot be predicted before running
    baseline = run(scenario.without_stragglers(), "baseline")[0] if scenario.stragglers else None
    measured, found = run(scenario, "scenario")
    own_comm = measured.get("comm_time_s")
    if baseline is not None:
        measured["comm_time_s"] = baseline.get("comm_time_s")  # predicted comm is the baseline's too
    report = compare(measured, predicted, baseline)
    node_of = _node_of(scenario)
    report["measured_scenario_comm_time_s"] = own_comm  # the comm time with the stragglers in
    report["stragglers_found"] = found
    report["stragglers_found_text"] = diagnose.describe(found, node_of=lambda r: f"{node_of[r]}")
    return report


def validate_scenario(scenario, calibration, backend: str, nprocs: int, warmup_steps: int = 2,
                      timeout_s: float = 120.0, echo=print) -> Dict:
    """Measure the scenario (and, with stragglers, its straggler-free baseline) and compare it
    with its calibrated simulation: the `commsim validate` report (without its header keys),
    with the stragglers the measurements name (``stragglers_found``, ``stragglers_found_text``)."""
    plan_for(scenario, None, warmup_steps, timeout_s)  # refuse before measuring anything
    return _report(scenario, calibration,
                   lambda sc, tag: measure(sc, backend, nprocs, warmup_steps, timeout_s, echo))


def lab_here(env=os.environ):
    """(commsim.lab.Lab, this process's lab node) when it runs inside a `commsim lab` node
    (``commsim lab run`` sets COMMSIM_LAB and COMMSIM_LAB_NODE) whose lab is up; else None."""
    from commsim.lab import Lab

    name, node = env.get("COMMSIM_LAB"), env.get("COMMSIM_LAB_NODE", "")
    if not name or not node.isdigit():
        return None
    try:
        lab = Lab.attach(name)
    except Exception:  # not up any more, or no state here: no link to shape
        return None
    return lab, int(node)


def validate_scenario_on_hosts(scenario, calibration, backend: str, job, warmup_steps: int = 2,
                               timeout_s: float = 120.0, echo=print, startup_s: float = 300.0) -> Optional[Dict]:
    """This host's part of `commsim validate` across hosts (`job`: a validate.multinode.HostJob):
    the report on the host of rank 0, None on the others.

    The baseline (with stragglers) and the scenario are two jobs, the second meeting at the
    endpoint's port + 1 (a fresh store: a host that finished the first job early must not join
    the first job's store, still open on rank 0). A slow_link on scenario node k is applied
    by the host that runs node k's ranks, when that host is a lab node (:func:`lab_here`): its
    link is shaped at factor x the lab's rate for the scenario's run and restored after; on
    other hosts it is refused before anything runs."""
    from dataclasses import replace as dc_replace

    from validate.multinode import launch_node

    here = lab_here()
    plan_for(scenario, None, warmup_steps, timeout_s, links="lab" if here else "refuse")  # refuse before running
    g = scenario.cluster.gpus_per_node
    my_nodes = sorted({r // g for r, *_ in job.local_ranks()})

    def run(sc, tag):
        plan = plan_for(sc, None, warmup_steps, timeout_s, links="lab" if here else "refuse")
        slow = {int(k): f for k, f in plan["slow_nodes"].items() if int(k) in my_nodes}
        this = dc_replace(job, master_port=job.master_port + (1 if tag == "scenario" and scenario.stragglers else 0))
        echo(f"# replay {sc.name} ({tag}): {sc.steps} steps (+{warmup_steps} warm-up), {this.describe()}"
             + (f", this host's link at {slow[my_nodes[0]]:g}x" if slow else ""))
        lab, lab_node = here if here else (None, None)
        try:
            if slow:
                lab.set_rate(lab_node, lab.spec.rate_bps * slow[my_nodes[0]])
            entries = launch_node(this, "validate.replay:rank_replay", backend, timeout_s, args=(plan,),
                                  startup_s=startup_s)
        finally:
            if slow:
                lab.set_rate(lab_node, None)
        if entries is None:
            return None, None
        return findings([e["result"] for e in sorted(entries, key=lambda e: e["rank"])], _node_of(sc))

    if not job.has_rank0:
        if scenario.stragglers:
            run(scenario.without_stragglers(), "baseline")
        run(scenario, "scenario")
        return None
    report = _report(scenario, calibration, run)
    return report
