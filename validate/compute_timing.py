"""Forward/backward timing of a synthetic model with a given parameter count.

The model is a stack of square linear layers (width w, bias), as many as make up the
parameter count: a stand-in for "compute of a P-parameter model" whose cost scales like a
real MLP's (2 flops per parameter per sample forward, about twice that backward).
Timed per rank after warm-up; CUDA work is synchronized before every host clock read.
"""

from __future__ import annotations

import statistics
import time
from typing import Dict, List, Tuple

import torch
from torch import nn

MAX_WIDTH = 1024


def layer_shape(parameters: int) -> Tuple[int, int]:
    """(width, depth) of the stack: width min(1024, sqrt(P)), depth to reach about P."""
    if parameters < 2:
        raise ValueError(f"parameters must be >= 2, got {parameters}")
    width = max(1, min(MAX_WIDTH, int(parameters**0.5)))
    depth = max(1, round(parameters / (width * width + width)))
    return width, depth


def synthetic_model(parameters: int) -> nn.Sequential:
    """A stack of Linear(w, w) + ReLU with about `parameters` parameters."""
    width, depth = layer_shape(parameters)
    layers: List[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_forward_backward(model: nn.Module, batch_size: int, device: torch.device,
                          warmup: int = 2, iters: int = 5) -> Dict[str, float]:
    """Median forward and backward seconds of `model` on a random batch."""
    width = next(model.parameters()).shape[1]
    x = torch.randn(batch_size, width, device=device)
    fwd, bwd = [], []
    for i in range(warmup + iters):
        model.zero_grad(set_to_none=True)
        _sync(device)
        t0 = time.perf_counter()
        loss = model(x).square().mean()
        _sync(device)
        t1 = time.perf_counter()
        loss.backward()
        _sync(device)
        t2 = time.perf_counter()
        if i >= warmup:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    return {"forward_s": statistics.median(fwd), "backward_s": statistics.median(bwd)}


def rank_compute(ctx, parameters: int, batch_size: int, warmup: int, iters: int) -> dict:
    """validate.launch entry point: time the synthetic model on this rank."""
    torch.manual_seed(ctx.rank)
    device = torch.device(ctx.device)
    model = synthetic_model(parameters).to(device)
    ctx.progress()
    out = time_forward_backward(model, batch_size, device, warmup, iters)
    out["rank"] = ctx.rank
    out["parameters"] = sum(p.numel() for p in model.parameters())
    ctx.progress(out)
    return out
