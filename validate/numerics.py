"""Numerics checks of data-parallel SGD on real process groups (docs/collectives.md). Each check returns a record with its measured error and
whether it passed:

1. ``sync_sgd_equals_big_batch``: n workers of sync SGD under DistributedDataParallel, each on
   its b samples, end with the same parameters as one worker on the n*b batch (up to fp32
   rounding), after several steps.
2. ``same_seed_same_result``: two runs with the same seed give bit-identical parameters, and
   every rank holds the same parameters.
3. ``fp16_sum_vs_avg``: all-reduce SUM then divide by n, against an average that scales
   first (NCCL's ncclAvg premultiplies by 1/n for floating point; gloo has no AVG, so it is
   done as divide-then-SUM), both in fp16, each compared with the fp64 mean. Ordinary
   gradients: both within fp16 rounding. Large gradients: SUM overflows fp16 (65504) first.
4. ``no_sync_accumulation``: m micro-batches with DDP's no_sync on all but the last, each loss
   divided by m, give the gradient of the mean loss over all n*m*b samples: DDP's average
   over ranks already divides by n, so dividing again ("scaled by world size twice") is
   off by exactly n, which the check also measures.
"""

from __future__ import annotations

import copy
from typing import Dict, List

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 5
LR = 0.1
PER_RANK_BATCH = 8
FEATURES = 16
FP32_TOL = 1e-5  # max relative parameter error "to rounding" after STEPS fp32 steps
FP16_EPS = 2.0**-10  # unit roundoff of fp16 (10 mantissa bits)


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.Tanh(), nn.Linear(32, 1))


def _data(seed: int, samples: int):
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(samples, FEATURES, generator=g)
    y = torch.randn(samples, 1, generator=g)
    return x, y


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30))


def _train_ddp(seed: int, steps: int) -> torch.Tensor:
    rank, n = dist.get_rank(), dist.get_world_size()
    model = DDP(_model(seed))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        x, y = _data(seed + 100 * step, n * PER_RANK_BATCH)
        mine = slice(rank * PER_RANK_BATCH, (rank + 1) * PER_RANK_BATCH)
        opt.zero_grad()
        nn.functional.mse_loss(model(x[mine]), y[mine]).backward()
        opt.step()
    return _flat(model.module)


def _train_single(seed: int, steps: int, n: int) -> torch.Tensor:
    model = _model(seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        x, y = _data(seed + 100 * step, n * PER_RANK_BATCH)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return _flat(model)


def check_sync_sgd(seed: int) -> Dict:
    n = dist.get_world_size()
    ddp = _train_ddp(seed, STEPS)
    single = _train_single(seed, STEPS, n)
    err = _rel_err(ddp, single)
    errs = torch.tensor([err], dtype=torch.float64)
    dist.all_reduce(errs, op=dist.ReduceOp.MAX)
    err = float(errs.item())
    return {"check": "sync_sgd_equals_big_batch", "passed": err <= FP32_TOL,
            "error": err, "tolerance": FP32_TOL,
            "detail": f"{n} ranks x {PER_RANK_BATCH} samples vs 1 rank x {n * PER_RANK_BATCH}, {STEPS} SGD steps, max relative parameter difference"}


def check_same_seed(seed: int) -> Dict:
    a = _train_ddp(seed, STEPS)
    b = _train_ddp(seed, STEPS)
    rerun = float((a - b).abs().max())
    gathered = [torch.empty_like(a) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, a)
    across = max(float((g - a).abs().max()) for g in gathered)
    err = max(rerun, across)
    return {"check": "same_seed_same_result", "passed": err == 0.0, "error": err, "tolerance": 0.0,
            "detail": f"max |difference| between two seeded runs ({rerun:g}) and across ranks ({across:g})"}


def _fp16_mean_errors(values: torch.Tensor) -> Dict[str, float]:
    """values: this rank's fp64 gradient. Errors of fp16 SUM/n and fp16 AVG vs the fp64 mean."""
    n = dist.get_world_size()
    exact = values.clone()
    dist.all_reduce(exact)
    exact /= n
    s = values.half()
    dist.all_reduce(s)
    sum_then_div = s / n
    a = (values / n).half()  # scale first, as ncclAvg does for floating point
    dist.all_reduce(a)
    scale = exact.abs().max()
    out = {}
    for name, got in (("sum_then_divide", sum_then_div), ("average", a)):
        g = got.double()
        out[name] = float("inf") if not torch.isfinite(g).all() else float((g - exact).abs().max() / scale)
    return out


def check_fp16_sum_vs_avg(seed: int) -> Dict:
    n = dist.get_world_size()
    g = torch.Generator().manual_seed(seed + 7 + dist.get_rank())
    ordinary = _fp16_mean_errors(torch.randn(4096, generator=g, dtype=torch.float64))
    # gradients near 40000: the fp16 sum of n >= 2 of them passes 65504 and overflows
    large = _fp16_mean_errors(40000.0 + 1000.0 * torch.rand(4096, generator=g, dtype=torch.float64))
    # bound: n-1 fp16 additions plus the input and output roundings, relative to the mean
    tol = (n + 2) * FP16_EPS
    passed = ordinary["sum_then_divide"] <= tol and ordinary["average"] <= tol and large["average"] <= tol
    return {"check": "fp16_sum_vs_avg", "passed": passed,
            "error": max(ordinary["sum_then_divide"], ordinary["average"]), "tolerance": tol,
            "ordinary": ordinary, "large": large,
            "detail": ("fp16 SUM/n vs AVG against the fp64 mean: ordinary gradients "
                       f"{ordinary['sum_then_divide']:.2e} / {ordinary['average']:.2e}; "
                       f"gradients ~4e4: {large['sum_then_divide']:.2e} / {large['average']:.2e}"
                       + (" (SUM overflows fp16)" if large["sum_then_divide"] == float("inf") else ""))}


def check_no_sync_accumulation(seed: int, micro_batches: int = 4) -> Dict:
    rank, n, m = dist.get_rank(), dist.get_world_size(), micro_batches
    base = _model(seed)
    model = DDP(copy.deepcopy(base))
    x, y = _data(seed, n * m * PER_RANK_BATCH)
    xs = x.view(n, m, PER_RANK_BATCH, FEATURES)[rank]
    ys = y.view(n, m, PER_RANK_BATCH, 1)[rank]
    for k in range(m):
        loss = nn.functional.mse_loss(model(xs[k]), ys[k]) / m
        if k < m - 1:
            with model.no_sync():
                loss.backward()
        else:
            loss.backward()
    got = torch.cat([p.grad.reshape(-1) for p in model.module.parameters()])
    ref_model = copy.deepcopy(base)
    nn.functional.mse_loss(ref_model(x), y).backward()
    ref = torch.cat([p.grad.reshape(-1) for p in ref_model.parameters()])
    err = _rel_err(got, ref)
    twice = float(ref.norm() / (got / n).norm())  # dividing by world size again: off by n
    errs = torch.tensor([err], dtype=torch.float64)
    dist.all_reduce(errs, op=dist.ReduceOp.MAX)
    err = float(errs.item())
    return {"check": "no_sync_accumulation", "passed": err <= FP32_TOL, "error": err, "tolerance": FP32_TOL,
            "scaled_twice_ratio": twice,
            "detail": f"{m} micro-batches (no_sync on {m - 1}) vs the full-batch gradient; "
                      f"dividing by world size again would be off by x{twice:.3g}"}


CHECKS = (check_sync_sgd, check_same_seed, check_fp16_sum_vs_avg, check_no_sync_accumulation)


def rank_numerics(ctx, seed: int = 0) -> List[Dict]:
    """validate.launch entry point: run every check on this rank; all ranks return the records."""
    torch.use_deterministic_algorithms(True)
    out = []
    for check in CHECKS:
        ctx.progress()
        out.append(check(seed))
        ctx.progress(out[-1] if ctx.rank == 0 else None)
    return out


def format_result(r: Dict) -> str:
    status = "PASS" if r["passed"] else "FAIL"
    return f"{status}  {r['check']:<28s} error {r['error']:.3g} (tolerance {r['tolerance']:.3g}): {r['detail']}"
