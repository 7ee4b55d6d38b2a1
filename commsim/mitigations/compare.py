"""Every remedy against the baseline: the rows of ``commsim compare``.

Each row runs its remedy twice, on the scenario and on its straggler-free baseline
(:meth:`commsim.scenario.spec.Scenario.without_stragglers`), and reports with the definitions of
:mod:`commsim.analysis.report`:

- ``step_time_s``: mean and p95 of the step time (asynchronous SGD: of a worker's iteration,
  compute + push + pull);
- ``throughput_samples_per_s``: samples whose gradients are applied per second (backup workers:
  n of the n + b; asynchronous SGD: every gradient);
- ``bytes_per_step``: payload each rank all-reduces (or pushes and pulls) per step;
- ``exposed_comm_s``: straggler-free step time minus a healthy rank's compute
  (:func:`commsim.analysis.report.compute_time`; a hook's own work counts as exposed);
- ``straggler_cost_s``: mean step time minus the straggler-free one;
- ``speedup``: the baseline's mean step time over this row's (throughput ratio for backup and
  async, whose samples per step differ);
- ``gpus``: GPUs the remedy uses (n + b with backup workers);
- ``details``: the remedy's own figures (dropped gradients, staleness, chosen bucket cap, ...).
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np

from commsim.analysis.report import compute_time, summarize
from commsim.mitigations.async_ps import estimated_seconds, run_async, staleness_summary
from commsim.mitigations.backup import run_backup
from commsim.mitigations.buckets import tune_buckets, with_bucket_cap
from commsim.mitigations.compression import CompressionHook, PowerSGDHook, smallest_dimension
from commsim.mitigations.hooked import plain_bytes, run_hooked
from commsim.mitigations.localsgd import LocalSGDHook, whole_periods
from commsim.mitigations.spec import (AsyncPS, Backup, Buckets, Compression, LocalSGD, Mitigation,
                                      MitigationError, PowerSGD, check_against)
from commsim.scenario import budget
from commsim.scenario.budget import MAX_SECONDS
from commsim.scenario.schema import MAX_RANK_STEPS
from commsim.scenario.spec import Scenario
from commsim.sim.engine import simulate

HOOKED = (Compression, PowerSGD, LocalSGD)


def check_mitigations(scenario: Scenario, mitigations: Sequence[Mitigation], source: str,
                      force: bool = False) -> None:
    """Refuse, before running anything, a remedy this scenario cannot take (one MitigationError);
    also one whose simulation would take longer than the loader's limit on a scenario's run
    (:data:`commsim.scenario.budget.MAX_SECONDS`), unless `force`."""
    for m in mitigations:
        ps = m.get(AsyncPS)
        if ps is not None and not force:
            seconds = estimated_seconds(scenario, ps)
            # async:servers=1e9 would otherwise build two billion SimPy resources and be killed
            # for its memory minutes later
            if seconds > MAX_SECONDS:
                raise MitigationError(
                    source, "async.servers",
                    f"expected a run within the {MAX_SECONDS:.0f} s limit, got servers={ps.servers:,}: about "
                    f"{seconds:,.0f} s ({scenario.steps:,} steps x {scenario.world_size:,} workers x "
                    f"{ps.servers:,} servers, twice); use fewer servers or steps, or pass --force to run it anyway")
        local = m.get(LocalSGD)
        if local is not None:
            _check_periods(scenario, local, source, force)
        psgd = m.get(PowerSGD)
        check_against(m, scenario.world_size, source,
                      smallest_dimension(scenario, psgd) if psgd is not None else None)
        if psgd is not None and smallest_dimension(scenario, psgd) is None:
            raise MitigationError(source, "powersgd.width", f"expected a width whose square fits in the "
                                  f"{scenario.model.parameters} parameters (a matrix to compress), got {psgd.width}")
        if any(m.get(k) is not None for k in HOOKED) and scenario.ddp.sharding != "none":
            raise MitigationError(source, m.label, f"expected ddp.sharding none for a DDP communication hook "
                                  f"(torch registers comm hooks on DDP only), got {scenario.ddp.sharding}")


def _check_periods(scenario: Scenario, local: LocalSGD, source: str, force: bool) -> None:
    """Post-local SGD runs whole periods of H steps (:func:`whole_periods`): an H far above the
    scenario's steps makes the run that many steps long (localsgd:H=1e9 on 4 ranks asked numpy
    for 30 GiB of per-rank records). Refused at ``localsgd.H`` past the loader's limit on steps x
    world size whatever --force says, and past the run's budget
    (:func:`commsim.scenario.budget.check`) unless `force`, as the scenario's own steps are."""
    extended = whole_periods(scenario, local.H)
    if extended.steps == scenario.steps:
        return
    given = (f"got H={local.H:,}: the run is extended to whole periods, {extended.steps:,} steps "
             f"x {scenario.world_size:,} ranks")
    if extended.steps * scenario.world_size > MAX_RANK_STEPS:
        raise MitigationError(source, "localsgd.H", f"expected a period whose whole periods keep steps x world "
                              f"size up to {MAX_RANK_STEPS} (per-rank, per-step records), {given}")
    if not force:
        try:
            budget.check(extended, source)
        except budget.BudgetError as err:
            # the estimate without the loader's advice ("lower steps"): here H is what stretched the run
            need = err.message.rsplit("; ", 1)[0]
            raise MitigationError(source, "localsgd.H", f"expected a period whose whole periods fit the run's "
                                  f"budget, {given}; {need}; use a smaller H, or pass --force to run it anyway") from None


def _stats(step: np.ndarray) -> Dict[str, float]:
    return {"mean": float(step.mean()), "p95": float(np.percentile(step, 95))}


def _samples(sc: Scenario, workers: int) -> int:
    return workers * sc.compute.batch_size * sc.ddp.gradient_accumulation


def _row(label, sc, step, free_mean, bytes_per_step, gpus, samples, details, compute) -> Dict[str, Any]:
    mean = float(step.mean())
    return {"mitigation": label, "world_size": sc.world_size, "gpus": gpus, "step_time_s": _stats(step),
            "throughput_samples_per_s": samples / mean if mean > 0 else 0.0,
            "bytes_per_step": float(bytes_per_step), "exposed_comm_s": float(free_mean - compute),
            "straggler_cost_s": float(mean - free_mean), "details": details}


def baseline_row(sc: Scenario) -> Dict[str, Any]:
    """The scenario as it is (the engine and :func:`commsim.analysis.report.summarize`)."""
    result, free = simulate(sc), simulate(sc.without_stragglers())
    s = summarize(sc, result, free)
    return _row("baseline", sc, result.step_time, s["baseline_step_time_s"], plain_bytes(sc), sc.world_size,
                _samples(sc, sc.world_size), {"buckets": s["buckets"]}, compute_time(sc))


def hook_for(sc: Scenario, m: Mitigation):
    """The :func:`commsim.mitigations.hooked.run_hooked` hook of a hooked remedy (PowerSGD,
    optionally wrapped in fp16/bf16; fp16/bf16; post-local SGD)."""
    psgd, comp, local = m.get(PowerSGD), m.get(Compression), m.get(LocalSGD)
    if psgd is not None:
        return PowerSGDHook(sc, psgd, comp)
    if comp is not None:
        return CompressionHook(sc, comp)
    return LocalSGDHook(sc, local)


def hooked_row(sc: Scenario, m: Mitigation) -> Dict[str, Any]:
    local = m.get(LocalSGD)
    if local is not None:
        sc = whole_periods(sc, local.H)
    run, free = run_hooked(sc, hook_for(sc, m)), run_hooked(sc.without_stragglers(), hook_for(sc, m))
    details: Dict[str, Any] = {}
    hook = hook_for(sc, m)
    if isinstance(hook, PowerSGDHook):
        psgd = m.get(PowerSGD)
        details.update({"rank": psgd.r, "shapes": psgd.shapes, "compressed_matrices": hook.plan.matrices,
                        "compression_ratio": hook.compression_ratio(), "warmup_steps": psgd.start,
                        "warmup_step_time_s": "baseline's (plain all-reduce)"})
    elif isinstance(hook, CompressionHook):
        details.update({"wire_dtype": m.get(Compression).dtype, "mem_bw": m.get(Compression).mem_bw})
    else:
        details.update({"H": local.H, "warmup_steps": local.warmup,
                        "world_bytes_per_step": float(run.world_bytes.mean()),
                        "node_bytes_per_step": float(run.reduced_bytes.mean() - run.world_bytes.mean())})
    return _row(m.label, sc, run.step_time, float(free.step_time.mean()), run.reduced_bytes.mean(),
                sc.world_size, _samples(sc, sc.world_size), details, compute_time(sc))


def backup_row(sc: Scenario, m: Mitigation) -> Dict[str, Any]:
    b = m.get(Backup).b
    run, free, plain = run_backup(sc, b), run_backup(sc.without_stragglers(), b), run_backup(sc, 0)
    frac = run.dropped_fraction
    top = sorted(range(len(frac)), key=lambda r: (-frac[r], r))[:5]
    details = {"b": b, "workers": run.workers, "aggregation_s": run.aggregation_s,
               "without_backups_step_time_s": float(plain.step_time.mean()),
               "time_saved_s": float(plain.step_time.mean() - run.step_time.mean()),
               "dropped_fraction_mean": float(frac.mean()),
               "dropped_fraction_top": [{"rank": int(r), "fraction": float(frac[r])} for r in top]}
    return _row(m.label, sc, run.step_time, float(free.step_time.mean()), plain_bytes(sc), run.workers,
                _samples(sc, sc.world_size), details, compute_time(sc))


def async_row(sc: Scenario, m: Mitigation) -> Dict[str, Any]:
    remedy = m.get(AsyncPS)
    run, free = run_async(sc, remedy), run_async(sc.without_stragglers(), remedy)
    samples_per_gradient = sc.compute.batch_size * sc.ddp.gradient_accumulation
    row = _row(m.label, sc, run.iteration_s, float(free.iteration_s.mean()), 2.0 * sc.model.grad_bytes,
               sc.world_size, 0, {"servers": remedy.servers, "gradients_per_s": run.gradients_per_s,
                                  "link_capacity_gradients_per_s": run.link_capacity,
                                  "staleness": staleness_summary(run)},
               sc.ddp.gradient_accumulation * (sc.compute.forward + sc.compute.backward))
    row["throughput_samples_per_s"] = run.gradients_per_s * samples_per_gradient
    return row


def buckets_row(sc: Scenario, m: Mitigation) -> Dict[str, Any]:
    tuning = tune_buckets(sc)
    tuned = with_bucket_cap(sc, tuning.bucket_cap)
    result, free = simulate(tuned), simulate(tuned.without_stragglers())
    s = summarize(tuned, result, free)
    details = {"bucket_cap": tuning.bucket_cap, "buckets": s["buckets"],
               "curve": [{"bucket_cap": c, "step_time_s": t} for c, t in tuning.curve]}
    return _row(m.label, sc, result.step_time, s["baseline_step_time_s"], plain_bytes(sc), sc.world_size,
                _samples(sc, sc.world_size), details, compute_time(sc))


def mitigation_row(sc: Scenario, m: Mitigation) -> Dict[str, Any]:
    """One remedy's row (module docstring)."""
    if m.get(Backup) is not None:
        return backup_row(sc, m)
    if m.get(AsyncPS) is not None:
        return async_row(sc, m)
    if m.get(Buckets) is not None:
        return buckets_row(sc, m)
    return hooked_row(sc, m)


def compare(scenarios: Sequence[Scenario], mitigations: Sequence[Mitigation], on_row=None) -> List[Dict[str, Any]]:
    """Rows for every scenario (one per node count): the baseline, then each mitigation."""
    rows = []
    for sc in scenarios:
        base = baseline_row(sc)
        block = [base] + [mitigation_row(sc, m) for m in mitigations]
        for r in block:
            r["speedup"] = r["throughput_samples_per_s"] / base["throughput_samples_per_s"]
            if on_row is not None:
                on_row(r)
        rows.extend(block)
    return rows
