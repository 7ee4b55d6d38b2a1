"""Local SGD / post-local SGD (Lin et al. 2020, "Don't Use Large Mini-Batches, Use Local SGD"):
torch's ``post_localSGD_hook.PostLocalSGDState`` with ``PeriodicModelAverager``.

After ``start_localSGD_iter`` (``warmup``) steps of plain DDP, ``post_localSGD_hook`` all-reduces each
bucket only within the rank's subgroup, which by default (``subgroup=None``:
``dist.new_subgroups()``) is its node; one GPU per node then communicates nothing per step.
``PeriodicModelAverager(period=H).average_parameters`` all-reduces every parameter over the whole
job (one flattened buffer of the parameters' dtype, here the scenario's gradient dtype) after
the optimizer of every H-th step; the next step waits for it. Before that all-reduce,
``model_averaging.utils.average_parameters`` flattens the parameters (``torch.cat``: read e bytes
and write e per element) and divides the buffer by the world size in place (read e, write e),
4 e bytes per element moved at the remedy's memory bandwidth (``mem_bw``; on a CPU the cat's
buffer is new memory, its pages faulted in as it is written: the validator measures the rate as
``average_parameters`` runs, validate.mitigation_probes.measure_flatten_rate); after it the
parameters become views of the buffer (``p.data = flat[...].view_as(p)``): no copy back.
Every post-local step's bucket all-reduce, a one-rank subgroup's included (where it sends
nothing), is still a call through the backend (``default_hooks._allreduce_fut``: an async
``all_reduce`` on the subgroup and a callback DDP waits on): ``subgroup_overhead`` seconds per
bucket after it (commsim.mitigations.spec; a Work stage at the rank's compute factor).

A :class:`commsim.mitigations.hooked.run_hooked` hook. The figures are those after the warm-up
(the warm-up steps are plain DDP, at the baseline's step time); the run is extended to a whole
number of periods so that the mean step time carries its share of averaging (extra steps draw
the next values of the same random streams).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from commsim.mitigations.hooked import PlainHook, Reduce, Stage, Work
from commsim.mitigations.spec import LocalSGD
from commsim.scenario.spec import Scenario


class LocalSGDHook(PlainHook):
    """Intra-node bucket all-reduces, a global parameter average every H steps."""

    def __init__(self, scenario: Scenario, remedy: LocalSGD):
        self.H = remedy.H
        self.param_bytes = float(scenario.model.grad_bytes)
        # torch.cat of the parameters, then flat /= world size: 4 x the bytes moved (module docstring)
        self.flatten = Work(4.0 * self.param_bytes / remedy.mem_bw)
        self.subgroup_call = remedy.subgroup_overhead

    def stages(self, step: int, bucket: int, size: float) -> Sequence[Stage]:
        # the subgroup all-reduce's call through the backend, issued even where it sends nothing
        return (Reduce(size, "node"), Work(self.subgroup_call)) if self.subgroup_call else (Reduce(size, "node"),)

    def after_step(self, step: int) -> Sequence[Stage]:
        return (self.flatten, Reduce(self.param_bytes)) if (step + 1) % self.H == 0 else ()


def whole_periods(scenario: Scenario, H: int) -> Scenario:
    """The scenario with its steps rounded up to a multiple of H."""
    steps = -(-scenario.steps // H) * H
    return scenario if steps == scenario.steps else replace(scenario, steps=steps)
