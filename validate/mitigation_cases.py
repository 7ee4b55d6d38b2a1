"""The cases of the mitigation validation, and the constants the ranks and the launcher share:
:class:`Case`, :func:`default_cases` (the benchmark's), :func:`bf16_hook_supported` (whether
this torch build runs the bf16 case). :mod:`validate.mitigation_job` runs the cases on the ranks,
:mod:`validate.mitigation_prediction` launches them and compares them with commsim's prediction.

Each case trains the synthetic model of :mod:`validate.compute_timing` (square ``Linear(w, w)``
layers: exactly commsim's ``shapes: square`` PowerSGD shape model at ``width: w``) under
``DistributedDataParallel`` on gloo, with one of

- no hook (the baseline), ``default_hooks.fp16_compress_hook``, ``default_hooks.bf16_compress_hook``;
- ``powerSGD_hook.powerSGD_hook`` with ``PowerSGDState(matrix_approximation_rank=r,
  start_powerSGD_iter=start)`` (the warm-up steps run before the timed ones);
- post-local SGD: ``post_localSGD_hook`` with ``PostLocalSGDState(subgroup=<the rank's node>)``
  and ``PeriodicModelAverager(period=H).average_parameters`` after every optimizer step;

with or without an injected slow rank (a stall before the forward, the simulator's ``stall``
straggler).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List

import torch


# the rounds of the once-per-machine measurements in all (DDP's costs, the 16-bit all-reduce,
# PowerSGD's chain, the averager's flatten), spread over the cases: 4 before each of the
# benchmark's 10 cases and after the last
MACHINE_ROUNDS = 44
POWERSGD_START = 2  # torch asserts start_powerSGD_iter > 1 with error feedback / warm start
# powerSGD_hook waits on its P and Q all-reduces inside the callbacks of the previous one; on gloo
# those callbacks run on the process group's worker threads, and with two buckets in flight the
# ranks enqueue their P all-reduces in different orders and hang (torch 2.13, CPU). One bucket
# (a bucket cap of at least the gradient's bytes) has one chain of callbacks and runs.
POWERSGD_ONE_BUCKET = True
HOOKS = ("none", "fp16", "bf16", "powersgd", "localsgd")


@dataclass(frozen=True)
class Case:
    """One validation case: a hook (with its rank r or period H) and whether rank 1 is slow."""

    hook: str
    r: int = 0
    H: int = 0
    slow: bool = False

    @property
    def label(self) -> str:
        """The remedy in commsim's ``--mitigations`` syntax ('baseline' without a hook)."""
        name = {"none": "baseline", "powersgd": f"powersgd:r={self.r}", "localsgd": f"localsgd:H={self.H}"}
        return name.get(self.hook, self.hook)

    @property
    def name(self) -> str:
        return self.label + (" +slow rank" if self.slow else "")


def bf16_hook_supported() -> bool:
    """Whether this torch build runs bf16_compress_hook: it refuses unless CUDA 11+ with NCCL
    2.10+ (or XPU with XCCL) is available (a TypeError from inside the hook), so never on a
    CPU-only gloo job."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if not hasattr(default_hooks, "bf16_compress_hook"):
        return False
    try:
        return bool(torch.cuda.is_available() and torch.cuda.nccl.version() >= (2, 10))
    except (AttributeError, RuntimeError, TypeError):
        return False


def default_cases(bf16: bool = False) -> List[Case]:
    """The benchmark's cases: every hook without and with a slow rank (10, or 12 with bf16)."""
    hooks = [Case("none"), Case("fp16")] + ([Case("bf16")] if bf16 else []) + [
        Case("powersgd", r=1), Case("powersgd", r=4), Case("localsgd", H=4)]
    return hooks + [replace(c, slow=True) for c in hooks]
