"""The launcher's side of the mitigation validation: the scenario of the cases (:func:`scenario_for`,
:func:`case_scenario`), the ranks' plan (:func:`plan_for`), the launch of
:func:`~validate.mitigation_job.rank_mitigations` and the comparison of every case with commsim's
prediction (:func:`run_cases`), and that prediction (:func:`predict`, :func:`remedy_text`,
:func:`with_built_buckets`).

Each case predicts with the buckets its DDP built (:func:`validate.ddp_job.ddp_bucket_sizes`
after the warm-up steps' rebuild, as ``ddp.bucket_sizes``: :func:`with_built_buckets`), not the
nominal layout of its first bucket and cap: DDP never splits a tensor, so the synthetic model's
4 MiB layers are a bucket each at a smaller cap. Each row reports both (``ddp_buckets``).

The prediction of a case (:func:`predict`) is commsim's: the scenario with the measured
compute, those DDP costs and the gloo calibration (``commsim calibrate --backend gloo``), through
the same hook model as ``commsim compare`` (:func:`commsim.mitigations.hooked.run_hooked`), the
remedy given the measured memory bandwidth, the rate of each of PowerSGD's three products at its
rank and shape (``mq_flops``, ``mtp_flops``, ``pqt_flops``; the PowerSGD rows also report
``equal_products_step_time_s``, the prediction with the three at their common rate), and the op
cost. No number is fitted per case.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import replace
from typing import Dict, Optional, Sequence

import numpy as np

from validate.compute_timing import layer_shape
from validate.mitigation_cases import MACHINE_ROUNDS, POWERSGD_ONE_BUCKET, POWERSGD_START, Case
from validate.mitigation_job import rank_mitigations
from validate.mitigation_measured import (compute_jitter_cv, compute_rows, ddp_costs_from_ranks, measured_step_time,
                                          measured_steps, products_overlap, step_phases)
from validate.mitigation_powersgd_probes import (FreshWriteProbe, chain_overhead_from_ranks, fresh_bw_from_ranks,
                                                 wake_figures, wake_overhead_from_ranks)
from validate.mitigation_probes import REDUCE_DTYPES, reduce_bytes_from_ranks, subgroup_overhead_from_ranks


SCENARIO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scenarios",
                        "validate_gloo_2rank.yaml")


def scenario_for(nprocs: int, parameters: float, bucket_cap: float, steps: int):
    """The validator's gloo scenario as `nprocs` one-rank nodes (so post-local SGD's subgroup is the
    rank itself; the links are replaced by the calibration), at `parameters` and `bucket_cap`."""
    from commsim.scenario.loader import load_scenario

    sc = load_scenario(SCENARIO, [f"cluster.nodes={nprocs}", "cluster.gpus_per_node=1",
                                  f"model.parameters={parameters:.0f}", f"ddp.bucket_cap={bucket_cap:.0f}",
                                  # one bucket (POWERSGD_ONE_BUCKET, DDPCostProbe): the first
                                  # is the cap too, and the job builds torch's buckets from both
                                  f"ddp.first_bucket={bucket_cap:.0f}"], steps)
    return replace(sc, name="mitigation_validation")


def case_scenario(scenario, case: Case, slow_stall: float, jitter_cv: float = 0.0):
    """The scenario of a case: with rank 1 stalled `slow_stall` seconds before every step's forward,
    and every rank's compute jittered by `jitter_cv` (the machine's,
    :func:`~validate.mitigation_measured.compute_jitter_cv`)."""
    from commsim.scenario.spec import Jitter, Stall

    stragglers = (Stall(ranks=(1,), duration=slow_stall, every=1),) if case.slow else ()
    if jitter_cv > 0:
        stragglers += (Jitter(cv=jitter_cv, distribution="gamma"),)
    return replace(scenario, stragglers=stragglers)


def plan_for(scenario, cases: Sequence[Case], slow_stall: float, warmup_steps: int, compute_iters: int,
             machine_rounds: int = MACHINE_ROUNDS) -> Dict:
    """The ranks' plan (see :func:`~validate.mitigation_job.rank_mitigations`); stalls from the simulator's
    own draws."""
    from commsim.sim.stragglers import perturbations

    if scenario.model.grad_dtype != "fp32" or scenario.ddp.gradient_accumulation != 1 or not scenario.ddp.overlap:
        raise ValueError("the mitigation job trains fp32, one micro-batch per step, with DDP's overlap")
    if POWERSGD_ONE_BUCKET and any(c.hook == "powersgd" for c in cases) and scenario.ddp.bucket_cap < scenario.model.grad_bytes:
        raise ValueError(f"powerSGD_hook on gloo needs one bucket (POWERSGD_ONE_BUCKET): a bucket cap of at least "
                         f"{scenario.model.grad_bytes:.0f} B, got {scenario.ddp.bucket_cap:.0f} B")
    if scenario.ddp.bucket_cap < scenario.model.grad_bytes:
        raise ValueError(f"the DDP cost measurement (DDPCostProbe) needs one bucket: a bucket cap of at least "
                         f"{scenario.model.grad_bytes:.0f} B, got {scenario.ddp.bucket_cap:.0f} B")
    return {"parameters": int(scenario.model.parameters), "batch_size": scenario.compute.batch_size,
            "first_bucket_bytes": float(scenario.ddp.first_bucket),
            "bucket_cap_bytes": float(scenario.ddp.bucket_cap), "gpus_per_node": scenario.cluster.gpus_per_node,
            "machine_rounds": machine_rounds,
            "steps": scenario.steps, "warmup_steps": max(warmup_steps, POWERSGD_START + 1),
            "compute_iters": compute_iters, "cases": [c.__dict__ for c in cases],
            "stall": [perturbations(case_scenario(scenario, c, slow_stall)).stall.tolist() for c in cases]}


def remedy_text(case: Case, hardware: Dict[str, float], width: int) -> Optional[str]:
    """The case's remedy in commsim's syntax, with the measured hardware rates (None: the baseline)."""
    # whole numbers and microseconds: the syntax's '+' (a combination) must not appear as in 2e+09
    rates = f"mem_bw={hardware['mem_bw']:.0f}B/s"
    if case.hook in ("fp16", "bf16"):
        # the backend's measured 16-bit all-reduce rate, when given (else commsim's bytes model)
        reduce = f":reduce_bytes={hardware['reduce_bytes']:.4f}" if "reduce_bytes" in hardware else ""
        return f"{case.hook}:{rates}{reduce}"
    if case.hook == "powersgd":
        # each product at its own measured rate where sampled (else the three at powersgd_flops)
        products = "".join(f":{k}_flops={hardware[f'{k}_flops']:.0f}" for k in ("mq", "mtp", "pqt")
                           if f"{k}_flops" in hardware)
        return (f"powersgd:r={case.r}:start=0:shapes=square:width={width}:{rates}:flops={hardware['powersgd_flops']:.0f}"
                f"{products}:kernel_overhead={hardware['kernel_overhead'] * 1e6:.4f}us"
                + (f":chain_overhead={hardware['chain_overhead'] * 1e6:.4f}us" if "chain_overhead" in hardware else "")
                + (f":wake_overhead={hardware['wake_overhead'] * 1e6:.4f}us" if "wake_overhead" in hardware else "")
                + (f":fresh_bw={hardware['fresh_bw']:.0f}B/s" if "fresh_bw" in hardware else ""))
    if case.hook == "localsgd":
        # the averager's flatten and divide at their measured rate (else at the cast's)
        bw = hardware.get("flatten_bw", hardware["mem_bw"])
        call = (f":subgroup_overhead={hardware['subgroup_overhead'] * 1e6:.4f}us"
                if "subgroup_overhead" in hardware else "")
        return f"localsgd:H={case.H}:mem_bw={bw:.0f}B/s{call}"
    return None


def with_built_buckets(scenario, sizes: Sequence[float]):
    """The scenario with the bucket layout a case's DDP built (``ddp.bucket_sizes``, bytes in
    all-reduce order; each bucket ready at its bytes' share of the backward, as the synthetic
    model's equal layers make it: ``bucket_ready`` unset), in place of the nominal first bucket
    and caps: DDP never splits a tensor. The sizes must total the model's gradient bytes within
    the scenario schema's tolerance for ``ddp.bucket_sizes``, else ValueError."""
    from commsim.scenario.schema_training import BUCKET_TOTAL_TOLERANCE

    total, grad = float(sum(sizes)), float(scenario.model.grad_bytes)
    if not sizes or abs(total - grad) > BUCKET_TOTAL_TOLERANCE * grad:
        raise ValueError(f"DDP built buckets {list(sizes)} ({total:.0f} B), not the model's {grad:.0f} gradient bytes")
    return replace(scenario, ddp=replace(scenario.ddp, bucket_sizes=tuple(float(b) for b in sizes), bucket_ready=None))


PREDICTED_STEPS = 10  # the prediction runs this many times the case's steps: a jittered mean that settles


def predict(scenario, case: Case, hardware: Dict[str, float], width: int, parameters: int,
            slow_stall: float, jitter_cv: float = 0.0, rows=None) -> Dict[str, float]:
    """commsim's mean step time of the case (and the bytes it all-reduces per step), the scenario
    fed the measured compute, the real parameter count and the case's slow rank. The ranks'
    spread: with `rows` ((samples, ranks) compute factors,
    :func:`~validate.mitigation_measured.compute_rows`), each simulated step's per-rank compute factor is one
    measured row drawn with the scenario's seed (commsim.mitigations.sampled); without, a gamma jitter of
    `jitter_cv`."""
    from commsim.mitigations.compare import hooked_row
    from commsim.mitigations.hooked import PlainHook, plain_bytes, run_hooked
    from commsim.mitigations.localsgd import whole_periods
    from commsim.mitigations.sampled import sampled_perturbations
    from commsim.mitigations.spec import LocalSGD, parse_mitigations
    from commsim.sim.engine import simulate

    comp = scenario.compute
    fed = replace(case_scenario(scenario, case, slow_stall, 0.0 if rows is not None else jitter_cv),
                  steps=PREDICTED_STEPS * scenario.steps,
                  compute=replace(comp, forward=hardware["forward_s"], backward=hardware["backward_s"],
                                  optimizer=hardware["optimizer_s"]),
                  model=replace(scenario.model, parameters=parameters))
    text = remedy_text(case, hardware, width)
    remedy = parse_mitigations(text)[0] if text is not None else None
    if rows is not None:
        from commsim.mitigations.compare import hook_for

        local = remedy.get(LocalSGD) if remedy is not None else None
        if local is not None:
            fed = whole_periods(fed, local.H)
        run = run_hooked(fed, hook_for(fed, remedy) if remedy is not None else PlainHook(),
                         sampled_perturbations(fed, rows))
        out = {"step_time_s": float(run.step_time.mean()), "bytes_per_step": float(run.reduced_bytes.mean())}
    elif remedy is None:
        return {"step_time_s": float(simulate(fed).step_time.mean()), "bytes_per_step": plain_bytes(fed)}
    else:
        row = hooked_row(fed, remedy)
        out = {"step_time_s": row["step_time_s"]["mean"], "bytes_per_step": row["bytes_per_step"]}
    if remedy is None:
        return out
    if case.hook == "powersgd":
        from commsim.mitigations.compression import powersgd_plan_for
        from commsim.mitigations.spec import PowerSGD

        plan = powersgd_plan_for(fed, parse_mitigations(text)[0].get(PowerSGD))
        out.update({"p_elements": plan.p_elements, "q_elements": plan.q_elements})
    return out


def run_cases(scenario, calibration, cases: Sequence[Case], nprocs: int, slow_stall: float,
              warmup_steps: int = 3, compute_iters: int = 5, timeout_s: float = 300.0, echo=print,
              machine_rounds: int = MACHINE_ROUNDS, ddp_costs=None) -> Dict:
    """Run every case on `nprocs` local gloo ranks and compare with commsim's prediction.

    DDP's own costs are those the job measures once for the machine
    (:class:`~validate.mitigation_probes.DDPCostProbe`), unless `ddp_costs` (a
    :class:`commsim.scenario.spec.DDPCosts`, say from ``commsim calibrate --ddp-fit``) is given; either way
    the same for every case.

    Returns {"width", "parameters", "slow_stall_s", "ddp_costs" (the costs every prediction used,
    and what the job measured: per rank, with the all-reduce it timed and the calibration's time for
    it), "reduce_dtypes" ({"measured": per rank, :class:`~validate.mitigation_probes.ReduceDtypeProbe`;
    "reduce_bytes": {dtype: the remedy's reduce_bytes}}), "cases": [{case, remedy, slow_rank, measured_s,
    predicted_s, error, evidence (per rank), predicted, hardware}], "median_abs_error"}. Raises
    validate.launch.LaunchError if a rank dies or hangs."""
    from commsim.collectives.kernels import algorithm_for, make_kernel
    from commsim.sim.links import scenario_fabric
    from validate.launch import launch

    if scenario.world_size != nprocs:
        raise ValueError(f"the scenario has {scenario.world_size} ranks, --nprocs is {nprocs}")
    plan = plan_for(scenario, cases, slow_stall, warmup_steps, compute_iters, machine_rounds)
    width, _ = layer_shape(plan["parameters"])
    echo(f"# mitigations on {nprocs} x gloo: {plan['parameters']:.3g} parameters (width {width}), "
         f"bucket cap {plan['bucket_cap_bytes']:.3g} B, {len(cases)} cases x {scenario.steps} steps")
    results = launch(rank_mitigations, nprocs, "gloo", timeout_s, args=(plan,))
    parameters = results[0]["parameters"]
    measured_costs = [r["ddp_costs"] for r in results]
    costs = ddp_costs if ddp_costs is not None else ddp_costs_from_ranks(measured_costs)
    sc = replace(scenario, calibration=calibration, ddp=replace(scenario.ddp, costs=costs),
                 model=replace(scenario.model, parameters=parameters))
    grad_bytes = float(sc.model.grad_bytes)
    calibrated = make_kernel(algorithm_for("all_reduce", sc.collective.algorithm), scenario_fabric(sc), grad_bytes,
                             sc.collective.model).uniform_time()
    jitter = compute_jitter_cv(measured_costs)
    costs_report = {"used": costs.__dict__.copy(), "measured": measured_costs, "jitter_cv": jitter,
                    "allreduce_measured_s": statistics.median(r["allreduce_s"] for r in measured_costs),
                    "allreduce_calibrated_s": float(calibrated)}
    reduce_dtypes = [r["reduce_dtypes"] for r in results]
    reduce_bytes = ({d: reduce_bytes_from_ranks(reduce_dtypes, d) for d in REDUCE_DTYPES if f"{d}_s" in reduce_dtypes[0]}
                    if reduce_dtypes[0] else {})
    reduce_report = {"measured": reduce_dtypes, "reduce_bytes": reduce_bytes}
    chains = [r["chain"] for r in results]
    chain = chain_overhead_from_ranks(chains) if chains[0] else None
    wake = wake_overhead_from_ranks(chains) if chains[0] else None
    chain_report = {"measured": chains, "chain_overhead": chain, "wake_overhead": wake,
                    "wake": wake_figures(chains) if chains[0] else None}
    flattens = [r["flatten"] for r in results]
    flatten_bw = statistics.median(f["bytes_per_s"] for f in flattens) if flattens[0] else None
    flatten_report = {"measured": flattens, "bytes_per_s": flatten_bw}
    subgroups = [r["subgroup"] for r in results]
    subgroup = subgroup_overhead_from_ranks(subgroups) if subgroups[0] else None
    subgroup_report = {"measured": subgroups, "subgroup_overhead": subgroup}
    freshes = [r["fresh"] for r in results]
    fresh_bw = {m: fresh_bw_from_ranks(freshes, m) for m in FreshWriteProbe.MODES} if freshes[0] else None
    fresh_report = {"measured": freshes, "fresh_bw": fresh_bw}
    rows = []
    base = sc
    for i, case in enumerate(cases):
        per_rank = [r["cases"][i] for r in results]
        hardware = {k: statistics.median(c["hardware"][k] for c in per_rank) for k in per_rank[0]["hardware"]}
        factors, compute_means = compute_rows([c["compute_samples"] for c in per_rank])
        hardware.update(compute_means)
        built = [c["bucket_sizes"] for c in per_rank]
        if any(b != built[0] for b in built):
            raise ValueError(f"case {case.name}: the ranks' DDP built different buckets: {built}")
        sc = with_built_buckets(base, built[0])  # the case's prediction: the buckets its DDP built
        blocks = [c["blocks"] for c in per_rank]
        measured = measured_step_time(blocks)
        if case.hook in reduce_bytes:  # measured once for the machine, the same in every case
            bytes_model = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)  # without the rate
            hardware = dict(hardware, reduce_bytes=reduce_bytes[case.hook])
            pred = dict(predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors),
                        bytes_model_step_time_s=bytes_model["step_time_s"])
        elif case.hook == "localsgd" and flatten_bw is not None:  # measured once for the machine too
            copy_rate = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)
            hardware = dict(hardware, flatten_bw=flatten_bw)
            uncalled = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)
            if subgroup is not None:  # the local steps' subgroup calls, measured once for the machine too
                hardware = dict(hardware, subgroup_overhead=subgroup)
            pred = dict(predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors),
                        cast_rate_step_time_s=copy_rate["step_time_s"],
                        no_subgroup_call_step_time_s=uncalled["step_time_s"])
        elif case.hook == "powersgd" and chain is not None:  # measured once for the machine too
            unchained = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)
            equal = {k: v for k, v in hardware.items() if k not in ("mq_flops", "mtp_flops", "pqt_flops")}
            hardware = dict(hardware, chain_overhead=chain)
            equal_products = predict(sc, case, dict(equal, chain_overhead=chain), width, parameters, slow_stall,
                                     jitter, factors)
            unwoken = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)
            if wake:  # the blocked rank's wake-up, measured once for the machine too, where the probe shows one
                hardware = dict(hardware, wake_overhead=wake)
            mapped = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)
            if fresh_bw is not None:  # the clone and the new error into new memory, once for the machine too
                hardware = dict(hardware, fresh_bw=fresh_bw["alone" if case.slow else "aligned"])
            pred = dict(predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors),
                        mapped_writes_step_time_s=mapped["step_time_s"],
                        unchained_step_time_s=unchained["step_time_s"],
                        equal_products_step_time_s=equal_products["step_time_s"],
                        unwoken_step_time_s=unwoken["step_time_s"])
        else:
            pred = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)
        # for comparison, the former parametric spread: a gamma jitter of the machine's cv about the ranks' mean
        pred["jitter_model_step_time_s"] = predict(sc, case, hardware, width, parameters, slow_stall, jitter)["step_time_s"]
        rows.append({"case": case.name, "remedy": remedy_text(case, hardware, width) or "baseline",
                     "slow_rank": case.slow, "measured_s": measured, "predicted_s": pred["step_time_s"],
                     "error": (pred["step_time_s"] - measured) / measured,
                     "measured_steps_s": measured_steps(blocks),
                     "evidence": [c["evidence"] for c in per_rank], "predicted": pred, "hardware": hardware,
                     "compute_samples_s": [c["compute_samples"] for c in per_rank],
                     "products_overlap": products_overlap([c["products_windows"] for c in per_rank]),
                     "phases": step_phases([c["stamps"] for c in per_rank]),
                     "stamps": [c["stamps"] for c in per_rank], "compute_rows": factors.tolist(),
                     "ddp_buckets": {"built_bytes": built[0], "predicted_with": list(sc.gradient_buckets()),
                                     "nominal_bytes": list(base.gradient_buckets())}})
    return {"width": width, "parameters": parameters, "slow_stall_s": slow_stall, "ddp_costs": costs_report,
            "reduce_dtypes": reduce_report, "chain": chain_report, "subgroup": subgroup_report,
            "flatten": flatten_report, "fresh": fresh_report, "cases": rows, "median_abs_error": float(np.median([abs(r["error"]) for r in rows]))}
