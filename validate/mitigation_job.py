"""Real DDP with torch's communication hooks, against commsim's mitigation model: the per-rank job
(:func:`rank_mitigations`, the validate.launch entry point, and :func:`_run_case`, one case on
a rank; the cases: :mod:`validate.mitigation_cases`).

All cases run in one launch (one process group). Each case's hardware (forward,
backward under ``no_sync``, optimizer; the memory bandwidth of a cast, the rate of PowerSGD's
products, the cost of a small op: :class:`~validate.mitigation_sampler.HardwareSampler`) is sampled
in the time window of its own timed steps: the steps run in blocks (:func:`step_blocks`: one step,
or one period of post-local SGD's H), each block after one sample per step and a common start, and
the figures are the medians over the case's samples. On a shared machine the rates come in modes
(no-sync steps of ~12 or ~24 ms, in bursts of load), and samples taken before and after the steps
landed in the other mode than the steps now and then; within the steps' window a burst falls on
both. A slow case's samples sleep the slow rank's stall before their compute, as its steps do
before their forward: on cores the ranks share, a rank computes about twice as fast while the
other is stalled (no-sync compute ~23 ms side by side, ~11 ms in the slow cases' steps), and
samples taken side by side priced the slow cases' compute at the contended rate.

Once for the machine, never per case, the job measures DDP's own costs and the hooks' (the probes
of :mod:`validate.mitigation_probes` and :mod:`validate.mitigation_powersgd_probes`), their rounds
interleaved with the cases (:func:`slot_rounds`: a share before every case and after the last).

Evidence that a hook really ran, per case: fp16/bf16 leave every averaged gradient exactly
representable in the 16-bit wire dtype (a plain fp32 average almost never is); PowerSGD's P and Q
buffers (``state.p_memory_dict``, ``q_memory_dict``) hold the elements commsim's plan sends; post-local
SGD's parameters agree across ranks right after an averaging step and differ after a local one.

The rest of the validation, each in a module of its own:

- :mod:`validate.mitigation_cases`: the cases (:class:`~validate.mitigation_cases.Case`,
  :func:`~validate.mitigation_cases.default_cases`, bf16 support) and the shared constants;
- :mod:`validate.mitigation_sampler`: the per-case hardware samples (``HardwareSampler``);
- :mod:`validate.mitigation_probes`: the once-per-machine probes of DDP's costs, the 16-bit
  all-reduce, post-local SGD's subgroup call and flatten, and their ``*_from_ranks`` reducers;
- :mod:`validate.mitigation_powersgd_probes`: PowerSGD's (its chained all-reduces, a late rank's
  wake-up, its writes into new memory, its buffers' sizes);
- :mod:`validate.mitigation_hooks`: each case's hook registered, and its all-reduces stamped;
- :mod:`validate.mitigation_measured`: the launcher's reading of the ranks' records (measured
  step times, stamped phases, compute rows, DDP's costs);
- :mod:`validate.mitigation_prediction`: the launcher (scenario, plan,
  :func:`~validate.mitigation_prediction.run_cases`) and commsim's prediction of each case.
"""

from __future__ import annotations

import time
from typing import Dict, List, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from validate.compute_timing import synthetic_model
from validate.ddp_job import bucket_kwargs, ddp_bucket_sizes
from validate.mitigation_cases import Case
from validate.mitigation_hooks import StampedDict, StampedDist, register_case_hook, stamped_hook_module
from validate.mitigation_powersgd_probes import CHAIN_ROUNDS, ChainProbe, FreshWriteProbe, powersgd_buffers
from validate.mitigation_probes import (REDUCE_DTYPES, SUBGROUP_REPS, DDPCostProbe, FlattenProbe, ReduceDtypeProbe,
                                        SubgroupReduceProbe)
from validate.mitigation_sampler import HardwareSampler
from validate.replay import common_start


def step_blocks(steps: int, case: Case) -> List[int]:
    """How a case's `steps` timed steps run between common starts (:func:`_run_case`): one at a
    time, each after one :class:`~validate.mitigation_sampler.HardwareSampler` sample per rank, so the case's
    rates come from the steps' own time window; post-local SGD's in runs of H (a period: its local steps do
    not wait for each other, and a common start before each would make them), after H samples."""
    block = case.H if case.hook == "localsgd" else 1
    if steps % block:
        raise ValueError(f"{case.name}: {steps} timed steps are not whole periods of H={block}")
    return [block] * (steps // block)


def slot_rounds(total: int, slots: int) -> List[int]:
    """How many of `total` rounds of the once-per-machine measurements run in each of `slots`
    slots (before every case and after the last): as even as whole rounds allow, the remainder
    spread over the slots (floor((k + 1) total / slots) - floor(k total / slots))."""
    return [(k + 1) * total // slots - k * total // slots for k in range(slots)]


def _representable(model: nn.Module, dtype) -> bool:
    return all(torch.equal(p.grad, p.grad.to(dtype).float()) for p in model.parameters())


def _run_case(ctx, module: nn.Module, x, y, case: Case, plan: Dict, stall: Sequence[float]) -> Dict:
    torch.manual_seed(0)
    # gradients as views into the buckets: DDP then copies no gradient into or out of its bucket
    # buffers, a cost commsim's hook model does not carry
    model = DDP(module, gradient_as_bucket_view=True,
                **bucket_kwargs(plan["first_bucket_bytes"], plan["bucket_cap_bytes"]))
    r = case.r if case.hook == "powersgd" else 0
    sampler = HardwareSampler(model, x, y, module[0].in_features, plan["bucket_cap_bytes"], plan["compute_iters"], r)
    for _ in range(plan["compute_iters"]):  # unkept: the pages', the allocator's and the caches' first touch
        sampler.sample()
    sampler.reset()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    evidence: Dict = {}

    averaged: List[bool] = []  # per timed step: did the averager average after it
    checksum: List[float] = []  # per timed step: a few parameters, to see the ranks (dis)agree
    # per timed step, this rank's time.monotonic stamps (step_phases reads them): "go" (after the
    # stall), "ready" (the last gradient accumulated: the bucket ready, arrival at the first
    # sync), "hook" (the comm hook entered), "backward" (backward returned: the hook's future
    # done), "optimizer", "end" (after the averager), "reduces" (the hook's all-reduces, StampedDist)
    stamps: List[Dict] = []
    cur: Dict = {}

    def grad_ready(_param) -> None:
        cur["ready"] = time.monotonic()

    def hook_entered() -> None:
        cur.setdefault("hook", time.monotonic())

    state, averager = register_case_hook(model, case, plan["gpus_per_node"], hook_entered)
    handles = [prm.register_post_accumulate_grad_hook(grad_ready) for prm in module.parameters()]
    hooked_module = stamped_hook_module(case)
    stamped = StampedDist(dist) if hooked_module is not None else None

    def step(pause: float) -> float:
        cur.clear()
        if pause:
            time.sleep(pause)
        cur["go"] = time.monotonic()
        if stamped is not None:
            del stamped.log[:]
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()  # returns once DDP's hook futures are done
        cur["backward"] = time.monotonic()
        opt.step()
        cur["optimizer"] = time.monotonic()
        if averager is not None:
            averaged.append(averager.step % case.H == 0)  # it averages when its count is a multiple of H
            averager.average_parameters(model.parameters())
        end = time.monotonic()
        cur["end"] = end
        if stamped is not None:
            cur["reduces"] = [dict(r) for r in stamped.log]
        stamps.append(dict(cur))
        return end

    for _ in range(plan["warmup_steps"]):
        ctx.progress()
        step(0.0)
    # the buckets DDP built (after the first step's rebuild; it never splits a tensor, so at a cap
    # below a layer's bytes they are not the nominal layout): the case's prediction uses them
    built = ddp_bucket_sizes(model)
    del averaged[:]
    # the timed steps in blocks (step_blocks), each after as many hardware samples as it has
    # steps and a common start: the case's compute and rates come from the steps' own time window
    # (on a shared machine no-sync steps of ~12 or ~24 ms, in bursts: samples taken before and
    # after the steps landed in the other mode than the steps now and then)
    del stamps[:]
    if stamped is not None:
        hooked_module.dist = stamped
    if case.hook == "powersgd":  # the new error's assignment, decompress's last pass, stamped
        state.error_dict = StampedDict(state.error_dict, cur, "error_set")
    blocks = []
    s = 0
    for n in step_blocks(plan["steps"], case):
        ctx.progress()
        for k in range(n):  # each with the stall of the step it prices (a slow rank's compute alone, as in it)
            sampler.sample(stall[s + k])
        start, ends = common_start(), []
        for _ in range(n):
            ends.append(step(stall[s]))
            s += 1
            if averager is not None:
                checksum.append(float(module[0].weight.detach().view(-1)[:64].double().sum()))
        blocks.append({"start": start, "ends": ends})
    if stamped is not None:
        hooked_module.dist = dist
    for h in handles:
        h.remove()
    ctx.progress()
    if case.hook in ("fp16", "bf16", "none"):
        evidence["grads_in_fp16"] = _representable(module, torch.float16)
        evidence["grads_in_bf16"] = _representable(module, torch.bfloat16)
    elif case.hook == "powersgd":
        evidence["p_elements"] = sum(t.numel() for t in state.p_memory_dict.values())
        evidence["q_elements"] = sum(t.numel() for t in state.q_memory_dict.values())
        evidence["iter"] = state.iter
    elif case.hook == "localsgd":
        evidence["averaged"] = averaged
        evidence["checksum"] = checksum
    dist.barrier()
    return {"blocks": blocks, "evidence": evidence, "hardware": sampler.result(), "bucket_sizes": built,
            "stamps": stamps,
            "compute_samples": {k: list(sampler.samples[k]) for k in ("forward_s", "backward_s", "optimizer_s")},
            "products_windows": [list(w) for w in sampler.windows]}


def rank_mitigations(ctx, plan: Dict) -> Dict:
    """validate.launch entry point. plan: parameters, batch_size, first_bucket_bytes, bucket_cap_bytes,
    gpus_per_node, steps, warmup_steps, compute_iters, machine_rounds (the rounds of the
    once-per-machine measurements in all, :class:`~validate.mitigation_probes.DDPCostProbe` and the others,
    spread over the cases by :func:`slot_rounds`), cases (Case fields as dicts), stall (cases x steps x n)."""
    torch.manual_seed(0)
    module = synthetic_model(plan["parameters"])
    width = module[0].in_features
    g = torch.Generator().manual_seed(1 + ctx.rank)
    x = torch.randn(plan["batch_size"], width, generator=g)
    y = torch.randn(plan["batch_size"], width, generator=g)
    ctx.progress()
    # the once-per-machine measurements, each on buffers or a model of its own: DDP's own costs;
    # the backend's 16-bit all-reduce against fp32's (for every fp16/bf16 case); powerSGD_hook's
    # chained all-reduces against sequential ones (at every PowerSGD case's sizes); post-local
    # SGD's flatten and divide (for every post-local SGD case)
    probes: Dict[str, object] = {"ddp_costs": DDPCostProbe(ctx, synthetic_model(plan["parameters"]), x, y, plan)}
    dtypes = sorted({c["hook"] for c in plan["cases"] if c["hook"] in REDUCE_DTYPES})
    if dtypes:
        probes["reduce_dtypes"] = ReduceDtypeProbe(sum(p.numel() for p in module.parameters()), dtypes)
    ranks = sorted({c["r"] for c in plan["cases"] if c["hook"] == "powersgd"})
    if ranks:
        probes["chain"] = ChainProbe([powersgd_buffers(module, r) for r in ranks], CHAIN_ROUNDS, ctx.rank,
                                     ctx.world_size)
        probes["fresh"] = FreshWriteProbe(synthetic_model(plan["parameters"]), x, y,
                                          sum(p.numel() for p in module.parameters()), ctx.rank, ctx.world_size)
    if any(c["hook"] == "localsgd" for c in plan["cases"]):
        probes["flatten"] = FlattenProbe(synthetic_model(plan["parameters"]), ctx.world_size)
        probes["subgroup"] = SubgroupReduceProbe(sum(p.numel() for p in module.parameters()),
                                                 plan["gpus_per_node"], SUBGROUP_REPS)
    # their rounds interleaved with the cases: a share before every case and after the last
    slots = slot_rounds(plan["machine_rounds"], len(plan["cases"]) + 1)

    def machine_rounds(k: int) -> None:
        for _ in range(k):
            ctx.progress()
            for probe in probes.values():
                probe.round()

    cases = []
    for i, fields in enumerate(plan["cases"]):
        machine_rounds(slots[i])
        case = Case(**fields)
        stall = [row[ctx.rank] for row in plan["stall"][i]]
        module = synthetic_model(plan["parameters"])  # a fresh model per case, the same on every rank
        out = _run_case(ctx, module, x, y, case, plan, stall)
        ctx.progress({"case": i, "hardware": out["hardware"]} if ctx.rank == 0 else None)
        cases.append(out)
    machine_rounds(slots[-1])
    figures = {name: probe.result() for name, probe in probes.items()}
    ddp_costs = figures["ddp_costs"]
    reduce_dtypes, chain, flatten, subgroup, fresh = (figures.get(k) for k in ("reduce_dtypes", "chain", "flatten",
                                                                                "subgroup", "fresh"))
    return {"rank": ctx.rank, "cases": cases, "width": width, "ddp_costs": ddp_costs, "reduce_dtypes": reduce_dtypes,
            "chain": chain, "flatten": flatten, "subgroup": subgroup, "fresh": fresh,
            "parameters": sum(p.numel() for p in module.parameters())}
