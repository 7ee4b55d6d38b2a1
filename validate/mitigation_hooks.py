"""The cases' DDP communication hooks as the per-rank job (:func:`~validate.mitigation_job._run_case`)
runs them (torch only): each case's hook registered (:func:`register_case_hook`: fp16/bf16_compress_hook,
powerSGD_hook with its ``PowerSGDState``, post_localSGD_hook with its ``PostLocalSGDState`` and a
``PeriodicModelAverager``), each bucket's entry into it reported (:func:`_entered`), and the hook's
all-reduces stamped on every rank (:class:`StampedDist`, installed in place of the hook module's
``dist``: :func:`stamped_hook_module`; :class:`StampedDict` for powerSGD_hook's new error), what
:func:`~validate.mitigation_measured.step_phases` reads.
"""

from __future__ import annotations

import time
from typing import Dict, List

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from validate.mitigation_cases import POWERSGD_START, Case


def _entered(hook, on_entry):
    """`hook`, calling `on_entry()` first (None: `hook` itself)."""
    if on_entry is None:
        return hook

    def entered(state, bucket):
        on_entry()
        return hook(state, bucket)

    return entered


def register_case_hook(model: DDP, case: Case, gpus_per_node: int, on_entry=None):
    """Register the case's hook (calling `on_entry()` as each bucket enters it); returns (hook
    state, model averager or None)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, post_localSGD_hook, powerSGD_hook

    if case.hook == "fp16":
        model.register_comm_hook(None, _entered(default_hooks.fp16_compress_hook, on_entry))
    elif case.hook == "bf16":
        model.register_comm_hook(None, _entered(default_hooks.bf16_compress_hook, on_entry))
    elif case.hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=case.r,
                                            start_powerSGD_iter=POWERSGD_START)
        model.register_comm_hook(state, _entered(powerSGD_hook.powerSGD_hook, on_entry))
        return state, None
    elif case.hook == "localsgd":
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

        # the rank's node is its subgroup (torch's default, new_subgroups(), sizes it by CUDA devices)
        subgroup, _ = dist.new_subgroups(group_size=gpus_per_node)
        state = post_localSGD_hook.PostLocalSGDState(process_group=None, subgroup=subgroup, start_localSGD_iter=0)
        model.register_comm_hook(state, _entered(post_localSGD_hook.post_localSGD_hook, on_entry))
        return state, PeriodicModelAverager(period=case.H, warmup_steps=0)
    return None, None


class StampedDict(dict):
    """A dict that stamps (time.monotonic) `rec[key]` as an item is set: powerSGD_hook's
    ``state.error_dict[bucket_index] = input_tensor_cp - input_tensor``, right after the new error
    is computed."""

    def __init__(self, items, rec: Dict, key: str):
        super().__init__(items)
        self._rec, self._key = rec, key

    def __setitem__(self, k, v):
        self._rec[self._key] = time.monotonic()
        super().__setitem__(k, v)


class _StampedFuture:
    """A torch future that stamps (time.monotonic) its record when a rank's wait on it returns
    ("waited") and when a callback chained on it starts ("callback"); everything else is the
    future's own."""

    def __init__(self, fut, rec: Dict):
        self._fut, self._rec = fut, rec

    def __getattr__(self, name):
        return getattr(self._fut, name)

    def wait(self):
        out = self._fut.wait()
        self._rec["waited"] = time.monotonic()
        return out

    def then(self, fn):
        rec = self._rec

        def stamped(fut):
            rec["callback"] = time.monotonic()
            return fn(fut)

        return self._fut.then(stamped)


class _StampedWork:
    def __init__(self, work, rec: Dict):
        self._work, self._rec = work, rec

    def __getattr__(self, name):
        return getattr(self._work, name)

    def get_future(self):
        return _StampedFuture(self._work.get_future(), self._rec)


class StampedDist:
    """``torch.distributed`` as a hook's module sees it, with every ``all_reduce`` stamped: its
    launch, and (async) when the rank's wait on it returns or the callback chained on it starts,
    appended to :attr:`log` ({"launch", "waited"?, "callback"?}, time.monotonic: one clock for the
    local ranks). Installed in place of powerSGD_hook's ``dist`` for a case's timed steps
    (:func:`stamped_hook_module`): the hook's own phases seen on every rank, as it runs them."""

    def __init__(self, real):
        self._real = real
        self.log: List[Dict] = []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def all_reduce(self, *args, **kwargs):
        rec = {"launch": time.monotonic()}
        work = self._real.all_reduce(*args, **kwargs)
        self.log.append(rec)
        return _StampedWork(work, rec) if kwargs.get("async_op") else work


def stamped_hook_module(case: "Case"):
    """The torch module whose ``dist`` a case's hook calls (None: nothing to stamp)."""
    if case.hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        return powerSGD_hook
    if case.hook == "localsgd":
        from torch.distributed.algorithms.model_averaging import utils

        return utils
    return None
