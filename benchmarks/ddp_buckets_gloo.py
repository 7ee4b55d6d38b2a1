"""Small vs large DDP buckets on the gloo validator: does the model, calibrated out of sample, get the sign?

    python benchmarks/ddp_buckets_gloo.py [--rounds 12] [--steps 5] [--caps 1MB,25MB]
        [--fit-caps 2MB,4MB,10MB] [--parameters 5e6] [--width 256] [--batch-size 1] [--calibrations 3]
        [--gloo-threads N] [--json OUT.json] [--save-raw RAW.json | --from-raw RAW.json]

One torch job on 2 gloo ranks (validate/ddp_job.py, :func:`rank_ddp_rounds`): a real DDP model of
``--parameters`` fp32 parameters in layers ``--width`` wide (5e6 at 256: 20 MB of gradients in
76 layers of 256 KiB, 20 buckets of 1 MB against 2 at 25 MB; DDP never splits a tensor, so the
1024-wide layers of the validator's usual model, 4 MiB each, made a 1 MB cap give 6 buckets, not
20) wrapped once per bucket cap, both ranks' memory bandwidth measured by a large copy, then
``--rounds`` rounds of: an all-reduce sweep at the bucket sizes the caps make (in-place and
out-of-place), and per cap its compute (forward, backward under no_sync, optimizer) and
``--steps`` timed DDP steps of every cap, interleaved step by step in the order ``--caps`` then
``--fit-caps``, reversed every other step, so the two compared caps always run back to back
(tens of milliseconds apart) and a drift in the machine's load falls on both. ``--gloo-threads N``
runs DDP (and the pipelined sweep) on a gloo group of N worker threads
(:func:`validate.ddp_job.gloo_group`; default torch's, 2): ProcessGroupGloo runs up to that many
queued all-reduces at once, and the prediction simulates as many collective streams per rank
(``ddp.comm_streams`` = the group's threads, :mod:`commsim.sim.concurrent_streams`), sharing
``ddp.comm_capacity`` collectives' worth of bandwidth, measured from the sweep
(:func:`stream_capacity`; the per-size check of one all-reduce alone against a pipelined burst,
measured and modelled, is printed). Before the simulator had those streams, measured (torch 2.13, 2 ranks on 2 shared cores,
load 6-8): with one thread T(1MB) - T(25MB) = +33.8 ms [+28.0, +40.8] (46/48 pairs), the
calibrated collectives alone +43.7 ms, with the fitted costs +37.8 ms, per extra bucket +1.6 ms
measured against +2.5 ms from the collectives; with two, -0.9 ms [-13.1, +4.6] (undecided),
+0.07 ms per extra bucket: the per-bucket cost that a fit on the default group finds is the
serialised 1 MB all-reduce time that gloo's second thread hides, not host work of DDP's. The
profiler agrees: at 1 thread no two ``gloo:all_reduce`` spans overlap, at 2 most start before the
previous one ends. With the streams (8 rounds x 6 steps): one thread (load 6.8) +36.8 ms
[+24.2, +42.9] (45/48 pairs) against +48.3 predicted, the sign matches; two threads, four runs:
-12.0 ms [-14.1, -3.2] (decided; load 5-8) against +5.9 predicted (fixed part free), -2.4 and
+3.7 ms (undecided) against -4.1 and -14.2, +2.5 ms [+0.7, +4.3] (decided; load 3-4) against
+17.5 (all shared): where decided, the sign matches once in two. The prediction's sign follows
the fitted bucket_overhead (0 to 2.4 ms, often +- as much: the fit caps' step times scatter),
while the collectives alone say -14 to -17 ms; per extra bucket -0.48, -0.24, +0.14, +0.03 ms
measured, -0.63 to -0.71 ms from the collectives alone (one stream said +2.5). The measured
capacity of two threads was 1.44-1.95 (bursts of 18 MiB all-reduces 1.35-1.86x one's
throughput; c = 1, one shared link, would give 1.02x). Batch 1 keeps compute short, so that communication and the
per-bucket cost show.

With the per-step constant in the fit (8 rounds x 6 steps, load 1.4-3.6; fit without the
constant in brackets, same runs): two threads, measured +4.72 ms [+3.68, +6.61] (decided)
against -3.13 (bucket_overhead not determined: the constant alone, +6.8 ms, meets the fit caps;
[+22.27, h 2.2 ms, reduced chi2 12.1 against 2.9]); +2.75 ms [+0.88, +5.07] (decided) against
+8.18 (h 1.45 +- 0.62 ms, constant +7.2 ms; [+26.52]); +1.09 ms (undecided) against +4.35
([+42.29]); with a 512 KB fit cap added, +0.87 ms (undecided) against -14.18 ([+4.65]; reduced
chi2 66: the 512 KB steps are slower than any h the launch model has can make them). Where
decided the new sign matches once in two, the old twice, but at 5-10x the measured size and
only because its per-bucket cost is the fit caps' common offset. Over the bucket_overhead the
fit caps allow (:func:`~commsim.analysis.ddp_fit.overhead_profile`) the predicted difference
spans 0 in three of those four runs (-3.2 .. +8.1, -10.1 .. +22.7, -3.3 .. +6.9 ms): on two
threads the 2/4/10 MB caps do not determine the sign. One thread: +39.16 ms [+30.48, +45.48]
(48/48) against +39.08 (h not determined; +39.1 .. +53.4 over the profile, sign stable;
[+39.17]): the sign matches. Two threads on a 2-core AMD EPYC VM (8 rounds x 6 steps, load
0.1-2.1): +4.54 ms [+3.00, +8.31] (34/48, decided) against -0.14 pooled (-5.8 .. +16.0 across the
three calibrations; h 0 .. 2.5 ms over the profile: not determined), while the calibrated
collectives alone say +2.67 ms and the scenario's default costs +2.73, per extra bucket +0.34 ms
measured against +0.33 from the collectives: there the fit's per-step constant (+14 to +16 ms),
not the collectives, takes the sign away. Two more runs on such a VM (2026-12-02, idle before):
+4.62 ms [+1.88, +7.23] (38/48, decided) against +10.17 pooled (+0.31 .. +11.11, sign stable): the
sign matches; +7.52 ms [+1.87, +10.78] (34/48, decided) against -6.79 pooled (-7.34 .. +6.48), the
collectives alone -0.19 ms per extra bucket against +0.52 measured: it differs. Their sweeps time
one all-reduce alone 2.7x (1 MiB, the first run) and 2.4x (64 KiB, the second) slower than within
a pipelined burst, more than two threads can gain: the one-at-a-time calibration is unstable
there, and it moves the predicted sign.

``--save-raw`` keeps the measurement (every rank's rounds) and ``--from-raw`` predicts from
one again without running torch: another model, the same data.

Measurement: the pairs are d = T(small) - T(large) of the two caps' s-th steps in a round (run
back to back); the sign is decided by :func:`commsim.analysis.ddp_fit.decide_paired_sign`: the
median of all pairs, the exact sign test over them and a bootstrap interval of the median that
resamples whole rounds (a round's pairs can share a burst of load), both at 5%; otherwise the
check says the machine was too noisy to tell. Each round's median pair is printed too.

Model, out of sample (nothing fitted on the caps it predicts):

- calibration (:func:`prediction_calibration`): on one thread the sweep's rows, per size the time per all-reduce issued as DDP issues them
  (back to back, asynchronously; one at a time in place, as ``commsim calibrate`` measures, is
  shown beside it), out-of-place's
  excess, the copy it adds, is reported), the median over rounds; the rounds split into ``--calibrations``
  consecutive groups give that many separately measured calibrations, all rounds the pooled one;
  on k > 1 threads those rows ran k at a time, so the calibration is one all-reduce alone (in
  place, one at a time) and ``ddp.comm_capacity`` is the ratio of the two rows' bandwidth slopes;
- DDP's own costs: ``ddp.memory_bandwidth`` is the measured copy bandwidth, ``ddp.bucket_overhead``
  (and ``ddp.overlap_slowdown`` where determinable) fitted by
  :func:`commsim.analysis.ddp_fit.fit_ddp_costs` to the ``--fit-caps`` runs only, refitted under
  each calibration, jointly with a per-step constant common to the caps (what the prediction
  misses whatever the bucket count: the compute measured in separate blocks, host work per
  step). The constant is left out of the predicted difference (it would add the same to both
  caps); it only keeps that scatter out of the per-bucket cost. Where the fit caps cannot tell
  the two apart (every cap's step exposes the same buckets' launch cost, printed per cap as
  dT/d bucket_overhead), ``bucket_overhead`` keeps the scenario's value and the fit says so.
  The fit without the constant (the per-bucket cost absorbing the level, as this check did
  before) is printed beside it on the same runs;
- the predicted difference: the simulator at the two compared caps with one compute for both
  (the medians over those caps' blocks), the buckets DDP really built (``ddp.bucket_sizes``), the
  fitted costs and the calibration; the pooled
  calibration's is the prediction, the per-calibration ones say how much it moves. Also shown:
  the scenario's default (GPU) DDP costs, and no DDP costs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from commsim.analysis.ddp_fit import (DDPRun, decide_paired_sign, fit_ddp_costs, overhead_profile,  # noqa: E402
                                      predicted_step_time)
from commsim.calibration import fit as calib_fit  # noqa: E402
from commsim.cli.outputs import check_script_outputs  # noqa: E402
from commsim.calibration.records import Calibration, Provenance  # noqa: E402
from commsim.collectives.kernels import make_kernel  # noqa: E402
from commsim.sim.concurrent_streams import fixed_and_bandwidth, queued_finish_times  # noqa: E402
from commsim.sim.links import scenario_fabric  # noqa: E402
from commsim.scenario.loader import load_scenario  # noqa: E402
from commsim.sim.engine import simulate  # noqa: E402
from commsim.errors import EXIT_INPUT, InputError  # noqa: E402
from commsim.units import parse_size  # noqa: E402
from commsim.yamlio import read_text_file  # noqa: E402

SCENARIO = os.path.join(ROOT, "scenarios", "validate_gloo_2rank.yaml")
# what gloo's concurrent all-reduces share (ddp.comm_shared): all of each, since on a CPU the fixed
# part (the worker thread's hand-off, syscalls, copies) is work on the same cores, not a wait on a
# link; the bursts agree that the fixed part does not run free (their gain over one alone does not
# fall towards 1 with size, as it would then: over five runs 0.99-1.84x at 1 MiB, 1.35-1.86x at
# 18 MiB; if anything small all-reduces gain less, which no sharing rule here represents)
SHARED = "all"
LATENCY_SIZE = 64 << 10  # one small all-reduce in the sweep, so the calibration's latency is measured too
COPY_BYTES = 256 << 20  # far past any cache: the copy runs at memory bandwidth


def sign(x: float) -> int:
    return (x > 0) - (x < 0)


def load() -> str:
    """The machine's load averages (`uptime`), for the record: the check runs on a shared machine."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def with_costs(sc, compute: Dict[str, float], calibration, **costs):
    """`sc` with this compute (s), calibration and DDP costs, no stragglers, 4 steps."""
    return replace(sc, compute=replace(sc.compute, forward=compute["forward_s"], backward=compute["backward_s"],
                                       optimizer=compute["optimizer_s"]),
                   ddp=replace(sc.ddp, costs=replace(sc.ddp.costs, **costs)), calibration=calibration,
                   stragglers=(), steps=4)


def step_time(sc) -> float:
    return float(simulate(sc).step_time[-1])


def calibration_from_rounds(rounds: Sequence[Dict], world_size: int, pipelined: bool = True) -> tuple:
    """(calibration, out-of-place excess) from these rounds' sweep rows: per size the time of one
    all-reduce (the median over its iterations: a hiccup of the shared machine moves it as little
    as it moves a median step time), then the median over the rounds. `pipelined`: as DDP issues
    them (validate.ddp_job.pipelined_all_reduce: back to back, asynchronously), else in place and
    one at a time (as ``commsim calibrate`` measures). DDP reduces each bucket in place, and the
    model charges the copy into the bucket separately (at ``memory_bandwidth``), so
    out-of-place, which adds that copy, is the check: the returned excess is, at the largest
    size, the median over rounds of (out-of-place - in-place) time, to compare with the copy."""
    per_size: Dict[int, List[float]] = {}
    excess: Dict[int, List[float]] = {}
    for rnd in rounds:
        for row in rnd["rows"]:
            a, b = row["in_place"]["time_median_s"], row["out_of_place"]["time_median_s"]
            per_size.setdefault(row["size_bytes"], []).append(row["pipelined_s"] if pipelined else a)
            excess.setdefault(row["size_bytes"], []).append(b - a)
    ms = [calib_fit.Measurement(size, statistics.median(v), world_size) for size, v in sorted(per_size.items())]
    link = calib_fit.fit_link("intra_node", ms)
    return Calibration((link,), Provenance(backend="gloo", world_size=world_size)), statistics.median(excess[max(excess)])


def stream_capacity(rounds: Sequence[Dict], streams: int) -> float:
    """``ddp.comm_capacity`` of a group of `streams` worker threads, from the sweep: a pipelined
    burst of equal all-reduces on k threads runs them k at a time, each group ending together at
    F + k W / min(k, c) (:mod:`commsim.sim.concurrent_streams`), F/k + W / min(k, c) per
    all-reduce, against F + W alone (in place, one at a time): the bandwidth terms' slopes in
    size give c = slope alone / slope of the bursts (least squares over the sweep's sizes, of
    the medians over rounds), kept in [1, k]. One thread: 1 (nothing is shared)."""
    import numpy as np

    if streams <= 1:
        return 1.0
    sizes = sorted({row["size_bytes"] for rnd in rounds for row in rnd["rows"]})
    alone = [statistics.median(row["in_place"]["time_median_s"] for rnd in rounds for row in rnd["rows"]
                               if row["size_bytes"] == s) for s in sizes]
    burst = [statistics.median(row["pipelined_s"] for rnd in rounds for row in rnd["rows"] if row["size_bytes"] == s)
             for s in sizes]
    slope_alone = float(np.polyfit(sizes, alone, 1)[0])
    slope_burst = float(np.polyfit(sizes, burst, 1)[0])
    if slope_burst <= 0:
        return float(streams)
    return float(min(max(slope_alone / slope_burst, 1.0), streams))


def prediction_calibration(rounds: Sequence[Dict], world_size: int, streams: int) -> tuple:
    """(calibration, out-of-place excess, ``ddp.comm_capacity``) the prediction uses for a group
    of `streams` worker threads. One thread: the pipelined rows (all-reduces issued as DDP issues
    them, one at a time on the one thread), capacity 1. More: the pipelined rows ran k at a
    time, a mix of one all-reduce's cost and the sharing, so the calibration is one all-reduce
    alone (in place, one at a time) and the sharing is :func:`stream_capacity`'s."""
    if streams <= 1:
        return calibration_from_rounds(rounds, world_size) + (1.0,)
    return calibration_from_rounds(rounds, world_size, pipelined=False) + (stream_capacity(rounds, streams),)


def concurrency_check(rounds: Sequence[Dict], sc, calibration, streams: int, pipeline_bytes: int,
                      capacity: float = 1.0, shared: str = "bandwidth") -> List[Dict]:
    """Per sweep size: one all-reduce alone (in place, one at a time) and the pipelined burst's
    time per all-reduce, measured (medians over rounds) and as the simulator's sharing rule
    prices them from `calibration` (:func:`commsim.sim.concurrent_streams.fixed_and_bandwidth`'s
    F and W; the burst of ``pipeline_bytes`` queued on `streams` slots,
    :func:`~commsim.sim.concurrent_streams.queued_finish_times`, shared with `capacity`). Their
    ratio is the throughput the group's threads gain; the capacity is one number fitted to the
    slopes (:func:`stream_capacity`), so how the gain moves with size tests the sharing rule."""
    fabric = scenario_fabric(replace(sc, calibration=calibration))
    out = []
    sizes = sorted({row["size_bytes"] for rnd in rounds for row in rnd["rows"]})
    for size in sizes:
        alone = statistics.median(row["in_place"]["time_median_s"] for rnd in rounds for row in rnd["rows"]
                                  if row["size_bytes"] == size)
        burst = statistics.median(row["pipelined_s"] for rnd in rounds for row in rnd["rows"] if row["size_bytes"] == size)
        fixed, work = fixed_and_bandwidth(make_kernel("ring", fabric, float(size)), fabric, "ring", "alpha-beta")
        if shared == "all":  # (ddp.comm_shared: nothing runs free)
            fixed, work = 0.0, fixed + work
        count = max(2, -(-pipeline_bytes // max(size, 1)))  # as validate.ddp_job.pipelined_all_reduce issues them
        model_burst = float(queued_finish_times([0.0] * count, [fixed] * count, [work] * count, streams,
                                                capacity).max()) / count
        out.append({"size_bytes": size, "alone_s": alone, "burst_s": burst, "gain": alone / burst,
                    "model_fixed_s": fixed, "model_bandwidth_s": work, "model_alone_s": fixed + work,
                    "model_burst_s": model_burst, "model_gain": (fixed + work) / model_burst})
    return out


def per_bucket_slope(buckets: Sequence[int], times: Sequence[float]) -> float:
    """Seconds a step gains per extra bucket: the least-squares slope of step time on bucket
    count across the caps. Measured, it is what DDP plus gloo really pay per bucket; from the
    simulator without DDP costs, what the calibrated collectives alone charge: where the two
    agree, a fitted ``ddp.bucket_overhead`` stands for nothing DDP adds."""
    import numpy as np

    return float(np.polyfit(np.asarray(buckets, dtype=float), np.asarray(times, dtype=float), 1)[0])


def _median_err(values: Sequence[float]) -> tuple:
    med = statistics.median(values)
    err = 1.2533 * statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else abs(med)
    return med, err


def run_check(caps: Sequence[str], fit_caps: Sequence[str], rounds: int, steps: int, parameters: float,
              batch_size: int, calibrations: int = 3, width: Optional[int] = 256, warmup_steps: int = 1, compute_iters: int = 3,
              cal_iters: int = 10, timeout_s: float = 300.0, gloo_threads: Optional[int] = None, echo=print) -> Dict:
    """Measure, fit out of sample and predict; the returned dict holds every figure the script prints."""
    return analyse(measure(caps, fit_caps, rounds, steps, parameters, batch_size, width, warmup_steps, compute_iters,
                           cal_iters, timeout_s, gloo_threads, echo), calibrations)


def _job_scenarios(caps: Sequence[str], fit_caps: Sequence[str], parameters: float, batch_size: int, steps: int):
    """The compared caps (small, large), every cap in the job's order, each cap's scenario and
    nominal buckets, and the all-reduce sizes the calibration sweep times (the caps' buckets)."""
    small, large = caps[0], caps[-1]
    order = [small, large] + [c for c in fit_caps if c not in (small, large)]
    scen = {cap: load_scenario(SCENARIO, [f"ddp.bucket_cap={cap}", f"model.parameters={parameters:g}",
                                          f"compute.batch_size={batch_size}"], steps=steps, force=True)
            for cap in order}
    buckets = {cap: scen[cap].gradient_buckets() for cap in order}
    sizes = sorted({LATENCY_SIZE} | {max(4, int(b) // 4 * 4) for cap in order for b in buckets[cap]})
    return small, large, order, scen, buckets, sizes


def measure(caps: Sequence[str], fit_caps: Sequence[str], rounds: int, steps: int, parameters: float,
            batch_size: int, width: Optional[int] = 256, warmup_steps: int = 1, compute_iters: int = 3,
            cal_iters: int = 10, timeout_s: float = 300.0, gloo_threads: Optional[int] = None, echo=print) -> Dict:
    """Run the torch job (both ranks' rounds) and return the raw record :func:`analyse` reads."""
    from validate import ddp_job
    from validate.launch import launch

    small, large, order, scen, buckets, sizes = _job_scenarios(caps, fit_caps, parameters, batch_size, steps)
    plan = {"parameters": int(parameters), "batch_size": batch_size,
            "first_bucket_bytes": float(scen[small].ddp.first_bucket),
            "caps": [float(scen[c].ddp.bucket_cap) for c in order], "rounds": rounds, "steps": steps,
            "warmup_steps": warmup_steps, "compute_iters": compute_iters, "cal_sizes": sizes,
            "cal_iters": cal_iters, "copy_bytes": COPY_BYTES, "pipeline_bytes": int(4 * parameters),
            "width": width, "gloo_threads": gloo_threads}
    load_before = load()
    echo(f"# load before: {load_before}")
    t0 = time.monotonic()
    results = launch(ddp_job.rank_ddp_rounds, 2, "gloo", timeout_s, args=(plan,))
    wall = time.monotonic() - t0
    load_after = load()
    return {"caps": list(caps), "fit_caps": list(fit_caps), "rounds": rounds, "steps": steps, "parameters": parameters,
            "batch_size": batch_size, "width": width, "plan": plan, "results": results, "load_before": load_before,
            "load_after": load_after, "wall_s": wall}


def analyse(raw: Dict, calibrations: int = 3) -> Dict:
    """Fit out of sample and predict from one measurement (:func:`run_check`'s ``raw`` record,
    which ``--save-raw`` writes and ``--from-raw`` reads back: the same measurement can be
    re-predicted by another model without rerunning torch)."""
    caps, fit_caps, rounds, steps = raw["caps"], raw["fit_caps"], raw["rounds"], raw["steps"]
    parameters, batch_size, width, plan = raw["parameters"], raw["batch_size"], raw["width"], raw["plan"]
    results, load_before, load_after, wall = raw["results"], raw["load_before"], raw["load_after"], raw["wall_s"]
    small, large, order, scen, buckets, sizes = _job_scenarios(caps, fit_caps, parameters, batch_size, steps)
    n = len(results)
    nparams = results[0]["parameters"]
    # the buckets DDP really built (it never splits a tensor): the model is given these, not the cap's
    real = {cap: tuple(float(b) for b in results[0]["rounds"][-1]["blocks"][i]["bucket_sizes"])
            for i, cap in enumerate(order)}
    for cap in order:
        if real[cap]:
            scen[cap] = replace(scen[cap], ddp=replace(scen[cap].ddp, bucket_sizes=real[cap]),
                                model=replace(scen[cap].model, parameters=nparams))
    # the simulator runs as many of a rank's all-reduces at once as the group has worker threads
    threads = int(results[0]["gloo_threads"])
    for cap in order:
        scen[cap] = replace(scen[cap], ddp=replace(scen[cap].ddp, comm_streams=threads, comm_shared=SHARED))
    bandwidth = statistics.median(r["copy_bandwidth_Bps"] for r in results)
    # per (round, cap): median step time (each step from the previous one's end on its last rank)
    med: Dict[tuple, float] = {}
    durations_by: Dict[str, List[List[float]]] = {cap: [] for cap in order}
    comp: Dict[tuple, Dict[str, float]] = {}
    for k in range(rounds):
        blocks = [[r["rounds"][k]["blocks"][i] for r in results] for i in range(len(order))]
        # the steps of all caps form one chain in time: each lasts from the previous end (any cap) on its last rank
        chain = sorted((max(b["ends"][s] for b in blocks[i]), i) for i in range(len(order)) for s in range(steps))
        durations: List[List[float]] = [[] for _ in order]
        prev = blocks[0][0]["start"]
        for end, i in chain:
            durations[i].append(end - prev)
            prev = end
        for i, cap in enumerate(order):
            med[(k, cap)] = statistics.median(durations[i])
            durations_by[cap].append(durations[i])
            comp[(k, cap)] = {key: statistics.median(b["compute"][key] for b in blocks[i])
                              for key in ("forward_s", "backward_s", "optimizer_s")}
    # the pairs: step s of the small cap and step s of the large one, next to each other in time
    pairs = [(k, a - b) for k in range(rounds)
             for a, b in zip(durations_by[small][k], durations_by[large][k])]
    diffs = [statistics.median(x for kk, x in pairs if kk == k) for k in range(rounds)]
    decision = decide_paired_sign([x for _, x in pairs], rounds=[k for k, _ in pairs])

    def compute_of(cs):
        return {key: statistics.median(comp[(k, c)][key] for k in range(rounds) for c in cs)
                for key in ("forward_s", "backward_s", "optimizer_s")}

    cal_rounds = [r["rounds"] for r in results][0]  # rank 0's rows are the max over ranks already
    groups = [cal_rounds[j * rounds // calibrations:(j + 1) * rounds // calibrations] for j in range(calibrations)]
    cals = {"pooled": prediction_calibration(cal_rounds, n, threads)}
    for j, grp in enumerate(groups):
        cals[f"calibration {j + 1}"] = prediction_calibration(grp, n, threads)
    cals["pooled, one at a time"] = calibration_from_rounds(cal_rounds, n, pipelined=False) + (cals["pooled"][2],)
    base_scen = scen
    compared = compute_of([small, large])
    models = {}
    for tag, (cal, disagree, capacity) in cals.items():
        scen = {cap: replace(base_scen[cap], ddp=replace(base_scen[cap].ddp, comm_capacity=capacity)) for cap in order}
        fit_runs = []
        for cap in order[2:]:
            sc = replace(with_costs(scen[cap], compute_of([cap]), cal, memory_bandwidth=bandwidth),
                         model=replace(scen[cap].model, parameters=nparams), steps=steps)
            t, err = _median_err([med[(k, cap)] for k in range(rounds)])
            fit_runs.append(DDPRun(sc, t, err, f"cap {cap}"))
        def predicted(f, h=None):
            # the fitted per-step constant is left out: it would add the same to both caps
            out = {}
            for cap in (small, large):
                base = replace(scen[cap], model=replace(scen[cap].model, parameters=nparams))
                out[cap] = step_time(with_costs(base, compared, cal, memory_bandwidth=bandwidth,
                                                bucket_overhead=f.bucket_overhead if h is None else h,
                                                overlap_slowdown=f.overlap_slowdown))
            return out

        fit = fit_ddp_costs(fit_runs)
        pred = predicted(fit)
        # the fit without a per-step constant, on the same runs: what this check predicted before
        old = fit_ddp_costs(fit_runs, per_step=False)
        pred_old = predicted(old)
        # what the fit caps leave open: the predicted difference over the bucket_overhead values
        # they allow (the profile interval, ~1 s.e.), sampled at 5 points
        h_lo, h_hi = overhead_profile(fit_runs, fit)
        spread = [(lambda p: p[small] - p[large])(predicted(fit, h)) for h in
                  sorted({h_lo, h_hi, fit.bucket_overhead, *(h_lo + (h_hi - h_lo) * q for q in (0.25, 0.5, 0.75))})]
        # dT/dh per fit cap at the fitted h: how many buckets' costs each step exposes (h and the
        # per-step constant are told apart only where these differ between the caps)
        dh = 1e-3 * max(fit.bucket_overhead, 1e-4)
        exposed = {r.source: (predicted_step_time(r, fit.bucket_overhead + dh, fit.overlap_slowdown)
                              - predicted_step_time(r, fit.bucket_overhead, fit.overlap_slowdown)) / dh for r in fit_runs}
        entry = {"exposed_buckets": exposed, "bucket_overhead_s": fit.bucket_overhead, "bucket_overhead_stderr_s": fit.bucket_overhead_stderr,
                 "overlap_slowdown": fit.overlap_slowdown, "overlap_slowdown_stderr": fit.overlap_slowdown_stderr,
                 "bucket_overhead_profile_s": [h_lo, h_hi],
                 "predicted_diff_over_profile_s": [min(spread), max(spread)],
                 "per_step_offset_s": fit.per_step_offset, "per_step_offset_stderr_s": fit.per_step_offset_stderr,
                 "fit_notes": list(fit.notes), "fit_reduced_chi2": fit.reduced_chi2,
                 "without_per_step": {"bucket_overhead_s": old.bucket_overhead,
                                      "bucket_overhead_stderr_s": old.bucket_overhead_stderr,
                                      "overlap_slowdown": old.overlap_slowdown, "fit_reduced_chi2": old.reduced_chi2,
                                      "predicted_diff_s": pred_old[small] - pred_old[large]},
                 "fit_runs": {r.source: {"measured_s": m, "fitted_s": p}
                              for r, m, p in zip(fit_runs, fit.measured_s, fit.predicted_s)},
                 "out_of_place_excess_s": disagree,
                 "predicted_s": pred, "predicted_diff_s": pred[small] - pred[large], "comm_capacity": capacity}
        if tag == "pooled":
            # shared_core: the fitted per-bucket cost, compute at half rate while an all-reduce is in
            # flight: a rank's one compute thread and its gloo worker sharing a core (the CPU's
            # counterpart of NCCL's kernels taking SMs), a bound, not a fitted value
            for other, costs in (("scenario_defaults", {}),
                                 ("no_costs", {"bucket_overhead": 0.0, "overlap_slowdown": 0.0,
                                               "gradient_as_bucket_view": True}),
                                 ("shared_core", {"memory_bandwidth": bandwidth, "bucket_overhead": fit.bucket_overhead,
                                                  "overlap_slowdown": 1.0})):
                p = {cap: step_time(with_costs(replace(scen[cap], model=replace(scen[cap].model, parameters=nparams)),
                                               compared, cal, **costs)) for cap in (small, large)}
                entry[f"predicted_diff_{other}_s"] = p[small] - p[large]
            # the other sharing rule: the fixed part free, only the bandwidth part shared
            free = {cap: replace(scen[cap], ddp=replace(scen[cap].ddp, comm_shared="bandwidth")) for cap in (small, large)}
            p = {cap: step_time(with_costs(replace(free[cap], model=replace(free[cap].model, parameters=nparams)),
                                           compared, cal, memory_bandwidth=bandwidth, bucket_overhead=fit.bucket_overhead,
                                           overlap_slowdown=fit.overlap_slowdown)) for cap in (small, large)}
            entry["predicted_diff_fixed_part_free_s"] = p[small] - p[large]
        models[tag] = entry
    pred_d = models["pooled"]["predicted_diff_s"]
    pooled_cal, pooled_capacity = cals["pooled"][0], cals["pooled"][2]
    scen = {cap: replace(base_scen[cap], ddp=replace(base_scen[cap].ddp, comm_capacity=pooled_capacity)) for cap in order}
    counts = [len(scen[c].gradient_buckets()) for c in order]
    measured_caps = [statistics.median(med[(k, c)] for k in range(rounds)) for c in order]
    no_cost_caps = [step_time(with_costs(replace(scen[c], model=replace(scen[c].model, parameters=nparams)), compared,
                                         pooled_cal, bucket_overhead=0.0, overlap_slowdown=0.0,
                                         gradient_as_bucket_view=True)) for c in order]
    per_cal = [models[f"calibration {j + 1}"]["predicted_diff_s"] for j in range(calibrations)]
    concurrency = concurrency_check(cal_rounds, scen[small], pooled_cal, threads, plan["pipeline_bytes"], pooled_capacity,
                                    SHARED if threads > 1 else "bandwidth")
    return {"caps": [small, large], "fit_caps": order[2:], "gloo_threads": results[0]["gloo_threads"], "rounds": rounds, "steps": steps, "parameters": nparams,
            "batch_size": batch_size, "width": width, "buckets_nominal": {c: len(buckets[c]) for c in order},
            "buckets": {c: len(scen[c].gradient_buckets()) for c in order},
            "bucket_sizes_bytes": {c: list(real[c]) for c in order},
            "calibration_sizes_bytes": sizes, "copy_bandwidth_Bps": bandwidth,
            "step_time_s": {c: [med[(k, c)] for k in range(rounds)] for c in order},
            "step_durations_s": durations_by,
            "compute_s": compared, "measured_diff_s": diffs,
            "decision": {"median_s": decision.median, "interval_s": list(decision.interval),
                         "agreeing": decision.agreeing, "nonzero": decision.nonzero, "p_value": decision.p_value,
                         "decided": decision.decided, "sign": decision.sign},
            "measured_large_s": statistics.median(med[(k, large)] for k in range(rounds)),
            "per_bucket_s": {"measured": per_bucket_slope(counts, measured_caps),
                             "predicted_no_costs": per_bucket_slope(counts, no_cost_caps)},
            "by_cap": {c: {"buckets": n, "measured_s": m, "predicted_no_costs_s": p}
                       for c, n, m, p in zip(order, counts, measured_caps, no_cost_caps)},
            "models": models, "predicted_diff_s": pred_d, "concurrency": concurrency,
            "comm_streams": threads, "comm_capacity": {tag: c[2] for tag, c in cals.items()},
            "predicted_diff_range_s": [min(per_cal), max(per_cal)],
            "predicted_sign_stable": len({sign(x) for x in per_cal + [pred_d]}) == 1,
            # over the bucket_overhead values the fit caps allow (pooled calibration): one sign, or not determined
            "predicted_sign_determined": len({sign(x) for x in models["pooled"]["predicted_diff_over_profile_s"]}) == 1
                                         and sign(models["pooled"]["predicted_diff_over_profile_s"][0]) != 0,
            "sign_matches": (sign(pred_d) == decision.sign) if decision.decided else None,
            "load_before": load_before, "load_after": load_after, "wall_s": wall}


# the keys of a --save-raw measurement (measure's record) that analyse reads
RAW_KEYS = ("caps", "fit_caps", "rounds", "steps", "parameters", "batch_size", "width", "plan", "results",
            "load_before", "load_after", "wall_s")


def read_raw(path: str, calibrations: int) -> tuple:
    """(raw, analyse(raw)) of a measurement ``--save-raw`` wrote; InputError naming the file
    (and key) where it is missing, not JSON, or not such a measurement (a truncated or other file)."""
    text = read_text_file(path, "a --save-raw measurement")
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise InputError(path, None, f"not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise InputError(path, None, f"expected a --save-raw measurement (a mapping), got {type(raw).__name__}")
    for key in RAW_KEYS:
        if key not in raw:
            raise InputError(path, key, "missing (expected a measurement --save-raw wrote)")
    caps = raw["caps"]
    if not (isinstance(caps, list) and len(caps) == 2 and all(isinstance(c, str) for c in caps)):
        raise InputError(path, "caps", f"expected the two compared caps, got {caps!r:.60}")
    for i, cap in enumerate(caps):
        try:
            parse_size(cap)
        except ValueError as exc:
            raise InputError(path, f"caps[{i}]", str(exc)) from None
    try:
        return raw, analyse(raw, calibrations)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:  # its rounds are not measure's
        raise InputError(path, None, f"not a --save-raw measurement ({type(exc).__name__}: {exc})") from None


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12, help="measurement rounds (each: an all-reduce sweep, then every cap's steps interleaved)")
    ap.add_argument("--steps", type=int, default=5, help="DDP steps of every cap per round")
    ap.add_argument("--caps", default="1MB,25MB", help="the two bucket caps compared, smallest first")
    ap.add_argument("--fit-caps", default="2MB,4MB,10MB", help="caps DDP's costs are fitted on (not the compared ones)")
    ap.add_argument("--parameters", type=float, default=5e6, help="fp32 parameters of the DDP model")
    ap.add_argument("--batch-size", type=int, default=1, help="samples per rank and step")
    ap.add_argument("--width", type=int, default=256,
                    help="layer width (4 width^2 bytes per weight: DDP puts a larger one alone in a bucket); 0: 1024-wide layers")
    ap.add_argument("--calibrations", type=int, default=3, help="separately measured calibrations (round groups)")
    ap.add_argument("--gloo-threads", type=int, default=None,
                    help="worker threads of DDP's gloo group (default: torch's, 2); 1 runs one all-reduce at a time")
    ap.add_argument("--json", default=None, help="also write every figure here")
    ap.add_argument("--save-raw", default=None, metavar="RAW.json",
                    help="also write the measurement itself (every rank's rounds), for --from-raw")
    ap.add_argument("--from-raw", default=None, metavar="RAW.json",
                    help="predict from a measurement --save-raw wrote instead of running torch (its caps and sizes)")
    args = ap.parse_args(argv)
    caps = sorted((c.strip() for c in args.caps.split(",")), key=parse_size)
    fit_caps = [c.strip() for c in args.fit_caps.split(",")]
    if len(caps) != 2 or {parse_size(c) for c in caps} & {parse_size(c) for c in fit_caps}:
        ap.error("--caps: two caps, none of them among --fit-caps (the prediction is out of sample)")
    if args.gloo_threads is not None and args.gloo_threads < 1:
        ap.error(f"--gloo-threads: at least 1, got {args.gloo_threads}")
    check_script_outputs(ap, {"--json": args.json, "--save-raw": args.save_raw})  # before the run, not after it
    from commsim.atomic import atomic_write_text

    if args.from_raw:
        try:
            raw, out = read_raw(args.from_raw, args.calibrations)
        except InputError as exc:
            print(f"ddp_buckets_gloo.py: error: {exc}", file=sys.stderr)
            return EXIT_INPUT
        caps = raw["caps"]
    else:
        raw = measure(caps, fit_caps, args.rounds, args.steps, args.parameters, args.batch_size, args.width or None,
                      gloo_threads=args.gloo_threads)
        if args.save_raw:
            atomic_write_text(args.save_raw, json.dumps(raw, sort_keys=True) + "\n")
        out = analyse(raw, args.calibrations)
    small, large = caps
    ms = lambda x: f"{x * 1e3:+.2f} ms"  # noqa: E731
    dec = out["decision"]
    print(f"# {out['parameters']:.3g} parameters, buckets as DDP built them {out['buckets']} (the caps alone: {out['buckets_nominal']}), {out['rounds']} rounds x {out['steps']} steps, "
          f"{out['wall_s']:.0f} s; gloo threads {out['gloo_threads']}; copy bandwidth {out['copy_bandwidth_Bps'] / 1e9:.2f} GB/s")
    print(f"# load after: {out['load_after']}")
    print(f"measured  T({small}) - T({large}): median {ms(dec['median_s'])} "
          f"({dec['median_s'] / out['measured_large_s'] * 100:+.1f}% of T({large})), 95% interval "
          f"[{ms(dec['interval_s'][0])}, {ms(dec['interval_s'][1])}], {dec['agreeing']}/{dec['nonzero']} "
          f"pairs share its sign (sign test p = {dec['p_value']:.3g}); per round: [{', '.join(ms(d) for d in out['measured_diff_s'])}]")
    for tag, m in out["models"].items():
        fit = (f"bucket_overhead {m['bucket_overhead_s'] * 1e6:.0f} "
               + ("us (not determined, the scenario's)" if m["bucket_overhead_stderr_s"] is None
                  else f"+- {m['bucket_overhead_stderr_s'] * 1e6:.0f} us") + ", "
               f"overlap_slowdown {m['overlap_slowdown']:.3g}"
               + ("" if m["overlap_slowdown_stderr"] is None else f" +- {m['overlap_slowdown_stderr']:.2g}"))
        fit += ("; per-step constant " + ("not fitted" if m["per_step_offset_stderr_s"] is None else
                                          f"{ms(m['per_step_offset_s'])} +- {m['per_step_offset_stderr_s'] * 1e3:.2f} ms")
                + ("" if m["fit_reduced_chi2"] is None else f"; reduced chi2 {m['fit_reduced_chi2']:.3g}"))
        wo = m["without_per_step"]
        print(f"  without the per-step constant: predicted {ms(wo['predicted_diff_s'])} (bucket_overhead "
              f"{wo['bucket_overhead_s'] * 1e6:.0f} +- {wo['bucket_overhead_stderr_s'] * 1e6:.0f} us, overlap_slowdown "
              f"{wo['overlap_slowdown']:.3g}" + ("" if wo["fit_reduced_chi2"] is None else
                                                 f", reduced chi2 {wo['fit_reduced_chi2']:.3g}") + ")")
        lo_d, hi_d = m["predicted_diff_over_profile_s"]
        print(f"  bucket_overhead the fit caps allow (profile, ~1 s.e.): {m['bucket_overhead_profile_s'][0] * 1e6:.0f} .. "
              f"{m['bucket_overhead_profile_s'][1] * 1e6:.0f} us; over it the predicted difference runs {ms(lo_d)} .. "
              f"{ms(hi_d)} (sign {'stable' if sign(lo_d) == sign(hi_d) != 0 else 'NOT determined by the fit caps'})")
        print("  buckets whose cost a step exposes (dT/d bucket_overhead) at the fitted costs: "
              + ", ".join(f"{src} {v:.2f}" for src, v in m["exposed_buckets"].items()))
        for note in m["fit_notes"]:
            print(f"  fit note: {note}")
        print(f"predicted ({tag}) {ms(m['predicted_diff_s'])}  [fit on {', '.join(out['fit_caps'])}: {fit}; "
              f"out-of-place adds {m['out_of_place_excess_s'] * 1e3:.2f} ms at {max(out['calibration_sizes_bytes']) / 2**20:.1f} MiB, "
              f"a copy at the measured bandwidth {2 * max(out['calibration_sizes_bytes']) / out['copy_bandwidth_Bps'] * 1e3:.2f} ms]")
    pooled = out["models"]["pooled"]
    print(f"predicted with the scenario's default DDP costs {ms(pooled['predicted_diff_scenario_defaults_s'])}, "
          f"without DDP costs {ms(pooled['predicted_diff_no_costs_s'])}, with compute at half rate while an "
          f"all-reduce runs (overlap_slowdown 1) {ms(pooled['predicted_diff_shared_core_s'])}")
    per = out["per_bucket_s"]
    print(f"per extra bucket (slope over all caps): measured {per['measured'] * 1e3:+.2f} ms, "
          f"the calibrated collectives alone (no DDP costs) {per['predicted_no_costs'] * 1e3:+.2f} ms")
    print(f"simulated with ddp.comm_streams {out['comm_streams']} (the group's threads), ddp.comm_shared {SHARED}, "
          "ddp.comm_capacity " + ", ".join(f"{c:.3g} ({tag})" for tag, c in out["comm_capacity"].items())
          + f"; with only the bandwidth part shared the pooled prediction is "
          f"{ms(pooled['predicted_diff_fixed_part_free_s'])}")
    print(f"all-reduce alone (one at a time) vs per all-reduce of a pipelined burst on {out['gloo_threads']} thread(s), "
          f"measured and by the model's sharing rule from the pooled calibration:")
    for row in out["concurrency"]:
        print(f"  {row['size_bytes'] / 2**20:8.3f} MiB: measured {row['alone_s'] * 1e3:.3f} / {row['burst_s'] * 1e3:.3f} ms "
              f"= {row['gain']:.2f}x; model {row['model_alone_s'] * 1e3:.3f} / {row['model_burst_s'] * 1e3:.3f} ms "
              f"= {row['model_gain']:.2f}x (fixed {row['model_fixed_s'] * 1e3:.3f} ms + bandwidth {row['model_bandwidth_s'] * 1e3:.3f} ms)")
    lo, hi = out["predicted_diff_range_s"]
    print(f"predicted difference across the calibrations: {ms(lo)} .. {ms(hi)} "
          f"(sign {'stable' if out['predicted_sign_stable'] else 'NOT stable'})")
    if not out["predicted_sign_determined"]:
        print("the fit caps do not determine the predicted sign (it changes over the bucket_overhead they allow)")
    if dec["decided"]:
        print(f"sign {'matches' if out['sign_matches'] else 'DIFFERS'}: measured {dec['sign']:+d}, "
              f"predicted {sign(out['predicted_diff_s']):+d}")
    else:
        print("sign not decided: the sign test or the interval does not exclude no effect")
    if args.json:
        atomic_write_text(args.json, json.dumps(out, sort_keys=True, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
