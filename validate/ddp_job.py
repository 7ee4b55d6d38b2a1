"""A real DistributedDataParallel job (``commsim validate --mode ddp``).

Every rank trains the synthetic model of the scenario's parameter count
(:func:`validate.compute_timing.synthetic_model`) under torch DDP with the scenario's bucket
cap, at the scenario's batch size. First the compute is measured as it really runs (forward,
backward under ``no_sync`` so that no all-reduce runs, optimizer step; medians), then the
timed DDP steps. The prediction is the scenario with those measured durations, so what is
compared is how DDP's communication and its overlap with backward behave.

The buckets are the scenario's: its ``ddp.first_bucket`` and ``ddp.bucket_cap``
(:func:`bucket_kwargs`; torch given ``bucket_cap_mb`` alone would make its first bucket the
full cap).

Only stalls are injected here (a sleep before the forward, exactly the simulator's stall);
slowing a real rank's kernels by a factor is the replay mode's job.
"""

from __future__ import annotations

import statistics
import time
from typing import Dict

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from validate.compute_timing import synthetic_model
from validate.replay import common_start


MIB = 2**20


def bucket_kwargs(first_bucket: float, bucket_cap: float) -> Dict:
    """DistributedDataParallel's bucket arguments for a scenario's ``ddp.first_bucket`` and
    ``ddp.bucket_cap`` (bytes): ``bucket_cap_mb_list=[first, cap]`` (the last limit repeats for
    the remaining buckets), which torch >= 2.10 accepts, even when the first bucket equals the
    cap: given ``bucket_cap_mb`` alone, torch 2.13 on gloo kept one bucket of every gradient
    (measured: 5e6 parameters at a 1 MiB cap gave one 21 MB bucket), and given the cap its
    first bucket is that size too. A torch without the list takes ``bucket_cap_mb`` where the
    two agree."""
    import inspect

    if "bucket_cap_mb_list" not in inspect.signature(DDP.__init__).parameters:
        if first_bucket == bucket_cap:
            return {"bucket_cap_mb": bucket_cap / MIB}
        raise RuntimeError(f"this torch ({torch.__version__}) has no bucket_cap_mb_list: its DDP cannot make a "
                           f"first bucket of {first_bucket:.0f} B with a cap of {bucket_cap:.0f} B")
    return {"bucket_cap_mb_list": [first_bucket / MIB, bucket_cap / MIB]}


def compute_step(model: nn.Module, x, y, opt) -> Dict[str, float]:
    """One forward, backward under DDP's no_sync (no all-reduce, no hook) and optimizer step: seconds."""
    opt.zero_grad(set_to_none=True)
    t0 = time.monotonic()
    with model.no_sync():
        loss = nn.functional.mse_loss(model(x), y)
        t1 = time.monotonic()
        loss.backward()
    t2 = time.monotonic()
    opt.step()
    return {"forward_s": t1 - t0, "backward_s": t2 - t1, "optimizer_s": time.monotonic() - t2}


def _measure_compute(model: nn.Module, x, y, opt, iters: int) -> Dict[str, float]:
    steps = [compute_step(model, x, y, opt) for _ in range(iters)]
    return {key: statistics.median(s[key] for s in steps) for key in ("forward_s", "backward_s", "optimizer_s")}


def rank_ddp(ctx, plan: Dict) -> Dict:
    """validate.launch entry point. plan: parameters, batch_size, first_bucket_bytes, bucket_cap_bytes, steps,
    warmup_steps, compute_iters, stall (steps x n)."""
    torch.manual_seed(0)
    module = synthetic_model(plan["parameters"])
    width = module[0].in_features
    model = DDP(module, **bucket_kwargs(plan["first_bucket_bytes"], plan["bucket_cap_bytes"]))
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    g = torch.Generator().manual_seed(1 + ctx.rank)
    x = torch.randn(plan["batch_size"], width, generator=g)
    y = torch.randn(plan["batch_size"], width, generator=g)
    ctx.progress()
    compute = _measure_compute(model, x, y, opt, plan["compute_iters"])
    ctx.progress(compute if ctx.rank == 0 else None)

    def step(stall: float) -> float:
        if stall:
            time.sleep(stall)
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()  # returns once DDP's all-reduces are done
        opt.step()
        return time.monotonic()

    for _ in range(plan["warmup_steps"]):
        ctx.progress()
        step(0.0)
    ctx.progress()
    start = common_start(ctx.device)
    ends = []
    for s in range(plan["steps"]):
        ctx.progress()
        ends.append(step(plan["stall"][s][ctx.rank]))
    ctx.progress()
    dist.barrier()
    return {"rank": ctx.rank, "start": start, "ends": ends, "compute": compute,
            "parameters": sum(p.numel() for p in module.parameters()),
            # the buckets DDP built (it never splits a tensor: a layer larger than the cap is a
            # bucket of its own), which the prediction must use rather than the nominal layout
            "bucket_sizes": ddp_bucket_sizes(model),
            # how many of its all-reduces the group runs at once (gloo: its worker threads; one
            # stream otherwise), which the prediction's ddp.comm_streams must be
            "comm_streams": gloo_threads() if dist.get_backend() == "gloo" else 1}


def _plan(scenario, warmup_steps: int, compute_iters: int = 5) -> Dict:
    from commsim.calibration import CalibrationError
    from commsim.scenario.spec import Stall
    from commsim.sim.stragglers import perturbations
    from commsim.analysis.validation import refuse_sharding

    refuse_sharding(scenario)
    if not scenario.ddp.overlap:
        # torch DDP always launches a bucket's all-reduce as soon as it is ready
        raise CalibrationError("--mode ddp always overlaps communication with backward (torch DDP does); "
                               "use --mode replay for ddp.overlap false", key="ddp.overlap")
    bad = sorted({type(s).__name__ for s in scenario.stragglers if not isinstance(s, Stall)})
    if bad:
        raise CalibrationError(f"--mode ddp injects only stalls, not {', '.join(bad)}; use --mode replay for those",
                               key="stragglers")
    if scenario.model.grad_dtype != "fp32":
        raise CalibrationError(f"--mode ddp trains in fp32, the scenario says {scenario.model.grad_dtype}",
                               key="model.grad_dtype")
    if scenario.ddp.gradient_accumulation != 1:
        raise CalibrationError(f"--mode ddp runs one micro-batch per step, the scenario says "
                               f"{scenario.ddp.gradient_accumulation}", key="ddp.gradient_accumulation")
    return {"parameters": int(scenario.model.parameters), "batch_size": scenario.compute.batch_size,
            "first_bucket_bytes": float(scenario.ddp.first_bucket),
            "bucket_cap_bytes": float(scenario.ddp.bucket_cap), "steps": scenario.steps,
            "warmup_steps": warmup_steps, "compute_iters": compute_iters,
            "stall": perturbations(scenario).stall.tolist()}


def measure(scenario, backend: str, nprocs: int, warmup_steps: int, timeout_s: float, echo=print):
    """Run the DDP job; return (measured_summary, per-rank results)."""
    import numpy as np

    from commsim.analysis.validation import measured_summary
    from validate.launch import launch

    plan = _plan(scenario, warmup_steps)
    echo(f"# ddp {scenario.name}: {plan['parameters']:.3g} parameters, bucket cap {plan['bucket_cap_bytes']:.3g} B, "
         f"{scenario.steps} steps (+{warmup_steps} warm-up) on {nprocs} x {backend}")
    results = launch(rank_ddp, nprocs, backend, timeout_s, args=(plan,))
    rank_end = np.array([r["ends"] for r in results]).T  # (steps, n)
    return measured_summary(results[0]["start"], rank_end), results


def step_times(results) -> list:
    """Per-step durations (s) of a run: from the previous step's end on its last rank (the
    common start first) to this step's, as :func:`commsim.analysis.validation.measured_summary`."""
    import numpy as np

    step_end = np.array([r["ends"] for r in results]).max(axis=0)
    return np.diff(np.concatenate(([results[0]["start"]], step_end))).tolist()


def validate_scenario(scenario, calibration, backend: str, nprocs: int, warmup_steps: int = 2,
                      timeout_s: float = 120.0, echo=print) -> Dict:
    """Real DDP vs the calibrated simulation of the scenario with the measured compute. The
    report's ``ddp_fit_input`` is what ``commsim calibrate --ddp-fit`` fits DDP's costs from."""
    from dataclasses import replace

    from commsim.analysis.ddp_fit import fit_record
    from commsim.analysis.validation import compare, predicted_summary

    measured, results = measure(scenario, backend, nprocs, warmup_steps, timeout_s, echo)
    comp = {k: statistics.median(r["compute"][k] for r in results) for k in ("forward_s", "backward_s", "optimizer_s")}
    fed = replace(
        scenario,
        compute=replace(scenario.compute, forward=comp["forward_s"], backward=comp["backward_s"], optimizer=comp["optimizer_s"]),
        model=replace(scenario.model, parameters=results[0]["parameters"]),
    )
    built = [float(b) for b in results[0].get("bucket_sizes") or []]
    if built and abs(sum(built) - fed.model.grad_bytes) <= 1e-6 * fed.model.grad_bytes:
        # the layout DDP built, each bucket ready at its bytes' share (equal layers: a uniform rate)
        fed = replace(fed, ddp=replace(fed.ddp, bucket_sizes=tuple(built), bucket_ready=None))
    streams = int(results[0].get("comm_streams") or 1)
    if streams > 1 and fed.ddp.comm_streams == 1:
        # the gloo group ran up to its worker threads' all-reduces at once: so does the prediction
        # (the bandwidth they share is the scenario's ddp.comm_capacity, 1 unless it says more)
        fed = replace(fed, ddp=replace(fed.ddp, comm_streams=streams))
    baseline = None
    if scenario.stragglers:
        baseline, _ = measure(scenario.without_stragglers(), backend, nprocs, warmup_steps, timeout_s, echo)
    report = compare(measured, predicted_summary(fed, calibration), baseline)
    report["measured"]["compute_s"] = comp
    report["ddp_fit_input"] = fit_record(fed, calibration, step_times(results))
    report["ddp_buckets"] = {"built_bytes": built, "predicted_with": [float(b) for b in fed.gradient_buckets()],
                             "nominal_count": len(scenario.gradient_buckets())}
    report["ddp_streams"] = {"measured": streams, "predicted_with": fed.ddp.comm_streams,
                             "comm_capacity": fed.ddp.comm_capacity}
    return report


# --- paired, interleaved runs at several bucket caps in one job -------------------------------

def copy_bandwidth(nbytes: int = 256 * MIB, iters: int = 5) -> float:
    """This rank's memory bandwidth (bytes/s) as DDP's gradient copies see it: the median time
    of copying a tensor of `nbytes` (far past the caches), counted as commsim.sim.ddp_costs
    charges a copy: read + write, 2 bytes moved per byte copied."""
    src = torch.ones(max(nbytes // 4, 1), dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch: page faults are not bandwidth
    times = []
    for _ in range(iters):
        t0 = time.monotonic()
        dst.copy_(src)
        times.append(time.monotonic() - t0)
    return 2.0 * src.numel() * 4 / statistics.median(times)


def gloo_group(threads: int, name: str = "") -> "dist.ProcessGroup":
    """A gloo process group over every rank whose backend runs `threads` worker threads:
    ProcessGroupGloo serves its queue of collectives with that many threads (torch's default is
    2), so that many all-reduces issued asynchronously, as DDP issues its buckets, are in flight
    at once. Built by hand: ``dist.new_group(backend="gloo", pg_options=...)`` ignores the
    options for gloo (torch 2.13 constructs ProcessGroupGloo with the timeout alone)."""
    from torch.distributed import distributed_c10d as c10d

    if threads < 1:
        raise ValueError(f"gloo threads must be >= 1, got {threads}")
    name = name or f"gloo_threads_{threads}"
    store = c10d.PrefixStore(f"{name}/", c10d._get_default_store())
    rank, size = dist.get_rank(), dist.get_world_size()
    opts = dist.ProcessGroupGloo._Options()
    opts._threads = threads
    opts._devices = [dist.ProcessGroupGloo.create_default_device()]
    opts._timeout = dist.group.WORLD._get_backend(torch.device("cpu")).options._timeout
    backend = dist.ProcessGroupGloo(store, rank, size, opts)
    group = c10d.ProcessGroup(store, rank, size)
    group._register_backend(torch.device("cpu"), c10d.ProcessGroup.BackendType.GLOO, backend)
    group._set_default_backend(c10d.ProcessGroup.BackendType.GLOO)
    group._set_group_name(name)
    return group


def gloo_threads(group=None) -> int:
    """The worker threads of a gloo group's backend (default: the job's own group)."""
    group = group if group is not None else dist.group.WORLD
    return int(group._get_backend(torch.device("cpu")).options._threads)


def pipelined_all_reduce(size: int, total_bytes: int, iters: int, progress=None, group=None) -> float:
    """Seconds per all-reduce of `size` bytes when they are issued as DDP issues its buckets:
    back to back, asynchronously (``async_op=True``), on distinct buffers, ``total_bytes`` worth
    (2 at least), then all waited for; the median over `iters` bursts of burst time / count.
    gloo works on queued all-reduces while the next is issued, so this is less than one
    all-reduce timed alone (on a 2-core machine 1 MiB: about 1.5 ms against 2.2 ms). On `group`
    (default the job's): DDP's, whose worker threads (:func:`gloo_group`) set how many run at once."""
    count = max(2, -(-total_bytes // max(size, 1)))
    bufs = [torch.ones(max(size // 4, 1), dtype=torch.float32) for _ in range(count)]
    works = [dist.all_reduce(b, async_op=True, group=group) for b in bufs]  # warm-up burst
    for w in works:
        w.wait()
    times = []
    for _ in range(iters):
        if progress:
            progress()
        dist.barrier()
        t0 = time.monotonic()
        works = [dist.all_reduce(b, async_op=True, group=group) for b in bufs]
        for w in works:
            w.wait()
        times.append((time.monotonic() - t0) / count)
    return statistics.median(times)


def narrow_model(parameters: int, width: int) -> nn.Sequential:
    """A stack of Linear(width, width) + ReLU with about `parameters` parameters. DDP never
    splits a tensor across buckets, so a bucket cap below one weight's size (4 width^2 bytes;
    :func:`validate.compute_timing.synthetic_model`'s layers are 1024 wide, 4 MiB) gives one
    bucket per layer, not buckets of the cap: a narrow stack lets a 1 MiB cap make 1 MiB buckets."""
    depth = max(1, round(parameters / (width * width + width)))
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)


def ddp_bucket_sizes(model: DDP) -> list:
    """The bucket sizes (bytes) DDP's reducer holds now, in its bucket order (the order it
    all-reduces them: bucket 0 holds the last layers' gradients, ready first). After the first
    step's rebuild these are the buckets every later step reduces; where this torch does not
    expose them, the sizes DDP logged at construction (the logging data's ``bucket_sizes``)."""
    try:
        return [int(t.numel() * t.element_size()) for t in model.reducer._get_zeros_like_grad_buckets()]
    except (AttributeError, RuntimeError):
        pass
    # else the layout DDP logged when it built its buckets
    text = str(model._get_ddp_logging_data().get("bucket_sizes", ""))
    return [int(v) for v in text.replace(",", " ").split()]


def _ddp_step(model, opt, x, y) -> float:
    """One DDP training step; returns its end (monotonic seconds)."""
    opt.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(x), y).backward()  # returns once DDP's all-reduces are done
    opt.step()
    return time.monotonic()


def rank_ddp_rounds(ctx, plan: Dict) -> Dict:
    """validate.launch entry point: one DDP model per bucket cap (same weights), and per round
    an all-reduce sweep at ``cal_sizes`` (in-place and out-of-place, as the calibration measures
    it, and :func:`pipelined_all_reduce` as DDP issues them), each cap's compute (under ``no_sync``), then ``steps`` timed steps of every cap in
    turn, interleaved step by step: the caps in ``plan["caps"]``'s order, reversed every other
    step, so that caps next to each other in the list run tens of milliseconds apart and a drift
    in the machine's load falls on all of them alike. A step's time runs from the previous
    step's end (of whichever cap) on its last rank to its own.
    Both ranks first measure :func:`copy_bandwidth` at once (DDP's copies run on both).

    plan: parameters, batch_size, first_bucket_bytes, caps (bytes), rounds, steps, warmup_steps,
    compute_iters, cal_sizes, cal_iters, pipeline_bytes, copy_bytes, width (optional: the
    layers' width, :func:`narrow_model`), gloo_threads (optional: DDP's process group and the
    pipelined sweep run on a :func:`gloo_group` of that many worker threads; else on the job's
    group, torch's default). Returns the group's threads and per round the calibration rows and, per cap
    index, {start (of the round's timed steps), ends (of this cap's steps), compute, bucket_sizes
    (as DDP built them)}."""
    from validate.collective_bench import bench_size

    caps = plan["caps"]
    group = gloo_group(plan["gloo_threads"]) if plan.get("gloo_threads") else None
    models = []
    for cap in caps:
        torch.manual_seed(0)
        width = plan.get("width")
        module = narrow_model(plan["parameters"], width) if width else synthetic_model(plan["parameters"])
        # the list form even when the first bucket equals the cap: given bucket_cap_mb alone this
        # torch builds its initial buckets otherwise (one bucket of everything, before the rebuild)
        ddp = DDP(module, process_group=group, bucket_cap_mb_list=[plan["first_bucket_bytes"] / MIB, cap / MIB])
        models.append((ddp, torch.optim.SGD(ddp.parameters(), lr=1e-6)))
    width = module[0].in_features
    g = torch.Generator().manual_seed(1 + ctx.rank)
    x = torch.randn(plan["batch_size"], width, generator=g)
    y = torch.randn(plan["batch_size"], width, generator=g)
    ctx.progress()
    dist.barrier()
    bandwidth = copy_bandwidth(plan["copy_bytes"])
    rounds = []
    for k in range(plan["rounds"]):
        ctx.progress()
        rows = [bench_size(s, 1, plan["cal_iters"], False, torch.device(ctx.device), progress=ctx.progress)
                for s in plan["cal_sizes"]]
        for row in rows:
            row["pipelined_s"] = pipelined_all_reduce(row["size_bytes"], plan["pipeline_bytes"], plan["cal_iters"],
                                                      ctx.progress, group)
        compute = []
        for model, opt in models:
            ctx.progress()
            compute.append(_measure_compute(model, x, y, opt, plan["compute_iters"]))
        for model, opt in models:
            for _ in range(plan["warmup_steps"]):
                ctx.progress()
                _ddp_step(model, opt, x, y)
        ctx.progress()
        start = common_start(ctx.device)
        ends: list = [[] for _ in caps]  # by cap index (lists: the results travel as JSON)
        for s in range(plan["steps"]):
            # step by step, the caps' order reversed every other step: neighbours in time
            order = range(len(caps)) if (k + s) % 2 == 0 else reversed(range(len(caps)))
            for i in order:
                ctx.progress()
                ends[i].append(_ddp_step(*models[i], x, y))
        blocks = [{"start": start, "ends": ends[i], "compute": compute[i], "bucket_sizes": ddp_bucket_sizes(models[i][0])}
                  for i in range(len(caps))]
        rounds.append({"rows": rows, "blocks": blocks})
    ctx.progress()
    dist.barrier()
    return {"rank": ctx.rank, "parameters": sum(p.numel() for p in module.parameters()),
            "copy_bandwidth_Bps": bandwidth, "gloo_threads": gloo_threads(group), "rounds": rounds}
