"""The model against the lab: calibrate on 2 nodes and predict more; replay the stragglers.

Two experiments, each one job in a running :class:`commsim.lab.Lab` (start-up paid once):

:func:`scaling_check`
    per-level sweeps (validate.collectives_multi) of a job of N nodes x k ranks: 2 ranks on
    node 0 (intra_node), 1 rank on each of nodes 0 and 1 (inter_node), and the layouts to
    predict (e.g. 4 and 8 nodes x 1 and 2 ranks). The two 2-node tables are written in
    nccl-tests' format and fitted by ``commsim calibrate --from-nccl-tests``'s own code
    (commsim.calibration.from_logs, in-place columns); the simulator's ring under that
    calibration (commsim.lab.check) predicts every other layout, compared with its measured busbw.

:func:`straggler_check`
    a calibration sweep on two nodes, then one replay (validate.replay) per scenario:
    the straggler-free one first (every other case's measured baseline), then each with its
    straggler injected for real (a slow node's link shaped by the lab). Each is compared with
    the simulation under the calibration (commsim.analysis.validation.compare) and its
    straggler named from the measurements (commsim.lab.diagnose).

Both keep everything measured under `out_dir` (the run's records, the nccl-tests tables, a
JSON report), also when a rank fails (validate.launch.LaunchError carries the partial records).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from commsim.atomic import atomic_write_text
from commsim.lab import check, diagnose
from commsim.scenario.spec import Scenario
from validate import collectives_multi as cm
from validate.collectives_multi import LEVELS, calibrate_levels, write_tables
from validate.replay import findings, plan_for
from validate.multinode import launch_on

CAL_ITERS = 5


def _json(path: Path, doc) -> None:
    atomic_write_text(path, json.dumps(doc, indent=1, default=float) + "\n")


def scaling_check(lab, nodes: int, ranks_per_node, predict: Sequence[Tuple[int, int]], sizes: Sequence[int],
                  out_dir, collectives: Sequence[str] = ("all_reduce",), warmup: int = 1, iters: int = 3,
                  timeout_s: float = 120.0, statistic: str = "median", echo=print) -> Dict:
    """Calibrate on 2 nodes, predict the `predict` layouts ((nodes, ranks per node) each) of a
    job of `nodes` nodes with `ranks_per_node` ranks (one count, or one per node: 2 on the
    first four and 1 on the next four covers 4 x 2 and 8 x 1 with 12 ranks, not 16).

    `statistic` is the per-size time both sides use, the calibration's tables and the measured
    busbw: the iterations' median by default (on a machine shared with other work one
    iteration in a few is stretched by a rank waiting for a core: the typical time is the
    median; the mean follows the stragglers), or their mean (nccl-tests' convention); the
    comparison with the other statistic is kept in the report as "summary_other".

    Returns {"calibration", "compared", "summary"} and writes tables and report.json to out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts = [ranks_per_node] * nodes if isinstance(ranks_per_node, int) else list(ranks_per_node)
    # the 2-node sweeps are cheap: from 4 KiB (the small sizes pin the per-step latency alpha
    # down), with more iterations than the layouts they predict
    cal_sizes = [4096 * 2 ** k for k in range(max(1, (max(sizes) // 4096).bit_length()))]
    extra = {"sizes": cal_sizes, "iters": max(iters, CAL_ITERS)}
    # loopback moves bytes so fast that its per-step latency dominates up to several MiB: the
    # intra-node sweep goes on to 32 MiB (cheap there), so that its fit determines a bandwidth
    # (the calibration refuses a level whose sizes cannot) even on a loaded machine
    intra_sizes = sorted(set(cal_sizes) | {8 << 20, 16 << 20, 32 << 20})
    layouts = [dict(cm.layout("intra", 1, 2, counts), **dict(extra, sizes=intra_sizes)),
               dict(cm.layout("inter", 2, 1, counts), **extra)]
    for k, j in predict:
        layouts.append(cm.layout(f"{k}x{j}", k, j, counts))
    plan = cm.plan(layouts, sizes, collectives, warmup, iters)
    echo(f"# lab {lab.spec.name}: {sum(counts)} ranks on {nodes} nodes ({counts}), layouts "
         f"{', '.join(lay['name'] for lay in layouts)}, sizes {sizes[0]}..{sizes[-1]} B, {iters} iterations")
    results = launch_on(lab, "validate.collectives_multi:rank_levels", nodes, counts, timeout_s=timeout_s,
                        args=(plan,), result_dir=str(out / "run"))
    measured = results[0]["result"]["layouts"]
    note = f"lab links {lab.spec.rate_bps / 1e6:g} Mbit/s"
    other = "mean" if statistic == "median" else "median"
    found = {}
    for stat, folder in ((statistic, out), (other, out / other)):
        paths = write_tables(measured, folder, warmup, iters, note=note, statistic=stat)
        cal = calibrate_levels(paths, backend="gloo")
        rows = [cm.with_statistic(r, stat) for lay in measured if lay["name"] not in LEVELS for r in lay["rows"]]
        compared = check.compare(cal, rows)
        found[stat] = (cal, compared, check.summarize(compared))
    cal, compared, summary = found[statistic]
    _json(out / "report.json", {"lab": lab.spec.to_json(), "statistic": statistic, "layouts": measured,
                                "compared": compared, "summary": summary, "summary_other": found[other][2]})
    return {"calibration": cal, "layouts": measured, "compared": compared, "summary": summary,
            "summary_other": found[other][2]}


def replay_findings(per_rank: Sequence[Dict], node_of: Optional[Sequence[int]] = None) -> Tuple[Dict, List[Dict]]:
    """The measured summary (commsim.analysis.validation.measured_summary) of one replay's
    per-rank results (validate.replay.rank_replay, by scenario rank) and the stragglers its
    measurements name: validate.replay.findings."""
    return findings(per_rank, node_of)


def _by_rank(results: Sequence[Dict], task: Optional[int] = None) -> List[Dict]:
    """The replay results of the members (scenario rank order) from what rank 0 gathered."""
    picked = [e["result"] if task is None else e["result"][task] for e in results]
    return sorted((r for r in picked if r is not None), key=lambda r: r["rank"])


def validate_in_lab(lab, sc: Scenario, warmup_steps: int = 1, timeout_s: float = 120.0, out_dir=None,
                    echo=print) -> Dict:
    """`commsim lab validate`: replay `sc` on lab nodes 0..nodes-1 (gpus_per_node ranks each),
    its slow links shaped for real, and, when it has stragglers, its straggler-free baseline
    (every link at the lab's rate) first; compare with the simulation under the scenario's
    calibration and name the stragglers the measurements show. Returns the report (without header)."""
    from commsim.analysis.validation import compare, predicted_summary

    if sc.calibration is None:
        raise ValueError(f"scenario {sc.name!r} has no calibration to predict with")
    nodes, g = sc.cluster.nodes, sc.cluster.gpus_per_node
    if nodes > lab.spec.nodes:
        raise ValueError(f"scenario {sc.name!r} needs {nodes} nodes, lab {lab.spec.name} has {lab.spec.nodes}")
    ranks = list(range(sc.world_size))
    node_of = [r // g for r in ranks]
    out = Path(out_dir) if out_dir else None

    def replay(scn: Scenario, tag: str):
        plan = plan_for(scn, ranks, warmup_steps, timeout_s, links="lab")
        slow = {int(k): f for k, f in plan["slow_nodes"].items()}
        echo(f"# replay {scn.name} ({tag}): {scn.steps} steps (+{warmup_steps} warm-up) on {nodes} lab nodes x {g}"
             + (f", slow links: {', '.join(f'node {k} at {f:g}x' for k, f in sorted(slow.items()))}" if slow else ""))
        try:
            for k in range(nodes):
                lab.set_rate(k, lab.spec.rate_bps * slow[k] if k in slow else None)
            results = launch_on(lab, "validate.replay:rank_replay", nodes, g, timeout_s=timeout_s, args=(plan,),
                                result_dir=str(out / tag) if out else None)
        finally:
            for k in slow:
                lab.set_rate(k, None)
        return replay_findings(_by_rank(results), node_of)

    baseline = replay(sc.without_stragglers(), "baseline")[0] if sc.stragglers else None
    measured, found = replay(sc, "scenario")
    own_comm = measured.get("comm_time_s")
    if baseline is not None:  # the predicted comm_time_s is the baseline's, as in validate.replay
        measured["comm_time_s"] = baseline.get("comm_time_s")
    report = compare(measured, predicted_summary(sc, sc.calibration), baseline)
    report["measured_scenario_comm_time_s"] = own_comm
    report["stragglers_found"] = found
    report["stragglers_found_text"] = diagnose.describe(found, node_of=lambda r: lab.node_name(node_of[r]))
    return report


def straggler_check(lab, cases: Sequence[Tuple[str, Scenario, Sequence[int]]], cal_sizes: Sequence[int], out_dir,
                    warmup_steps: int = 1, iters: int = 3, timeout_s: float = 120.0, echo=print) -> Dict:
    """Replay each case (name, scenario, lab nodes it runs on, one rank per node) and compare.

    The first case must be straggler-free: it is the measured baseline of the others. A
    scenario's ``slow_link`` on node k is applied by shaping lab node nodes[k] at factor x the
    lab's rate for the run (its rate is restored afterwards); that lab node must serve no other
    case. Returns {"calibration", "cases", "slowed_bps": {lab node: rate during the run}}."""
    from commsim.analysis.validation import compare, predicted_summary

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if cases[0][1].stragglers:
        raise ValueError(f"the first case ({cases[0][0]}) is the baseline: it must have no stragglers")
    plans, slowed = [], {}
    for name, sc, node_ids in cases:
        if sc.cluster.gpus_per_node != 1 or sc.world_size != len(node_ids):
            raise ValueError(f"case {name}: one rank per node on {len(node_ids)} nodes, the scenario has "
                             f"{sc.cluster.nodes} x {sc.cluster.gpus_per_node}")
        plan = plan_for(sc, list(node_ids), warmup_steps, timeout_s, links="lab")
        plans.append(plan)
        for k, factor in plan["slow_nodes"].items():
            slowed[int(node_ids[int(k)])] = (name, factor)
    for name, _, node_ids in cases:
        for k in node_ids:
            if k in slowed and slowed[k][0] != name:
                raise ValueError(f"lab node {k} is slowed for case {slowed[k][0]} and also serves case {name}")
    cal_layout = cm.layout("inter", [0, 1], 1, 1)
    tasks = [["validate.collectives_multi:rank_levels", [cm.plan([cal_layout], cal_sizes, ("all_reduce",), 1, iters)]]]
    tasks += [["validate.replay:rank_replay", [plan]] for plan in plans]
    echo(f"# lab {lab.spec.name}: calibration on nodes 0-1, then {len(cases)} replays: "
         + ", ".join(f"{name} on nodes {list(ids)}" for name, _, ids in cases))
    try:
        for k in range(lab.spec.nodes):
            lab.set_rate(k, lab.spec.rate_bps * slowed[k][1] if k in slowed else None)
        results = launch_on(lab, "validate.multinode_rank:rank_sequence", lab.spec.nodes, 1, timeout_s=timeout_s,
                            args=(tasks,), result_dir=str(out / "run"))
    finally:
        for k in slowed:
            lab.set_rate(k, None)
    measured_levels = results[0]["result"][0]["layouts"]
    paths = write_tables(measured_levels, out, 1, iters)
    cal = calibrate_levels(paths, backend="gloo")
    report, baseline = [], None
    for i, (name, sc, node_ids) in enumerate(cases):
        measured, found = replay_findings(_by_rank(results, i + 1))
        own_comm = measured.get("comm_time_s")
        if baseline is None:
            baseline = dict(measured)
        else:  # the predicted comm_time_s is the baseline's, as in validate.replay
            measured["comm_time_s"] = baseline.get("comm_time_s")
        cmp = compare(measured, predicted_summary(sc, cal), baseline if sc.stragglers else None)
        entry = {"case": name, "nodes": list(node_ids), "stragglers": [type(s).__name__ for s in sc.stragglers],
                 "comparison": cmp, "measured_scenario_comm_time_s": own_comm, "found": found,
                 "found_text": diagnose.describe(found, node_of=lambda r, ids=node_ids: lab.node_name(ids[r]))}
        report.append(entry)
    rates = {k: lab.spec.rate_bps * f for k, (_, f) in sorted(slowed.items())}
    _json(out / "report.json", {"lab": lab.spec.to_json(), "cases": report, "slowed_bps": rates,
                                "calibration_layout": measured_levels})
    return {"calibration": cal, "cases": report, "slowed_bps": rates}


def lab_scenario(nodes: int = 4, parameters: float = 1e6, forward: float = 0.1, backward: float = 0.3,
                 optimizer: float = 0.02, bucket_cap: float = 1 << 20, first_bucket: float = 256 << 10,
                 steps: int = 5, seed: int = 0, name: str = "lab") -> Scenario:
    """A scenario sized for the lab: `nodes` x 1 rank, fp32 gradients, compute comparable
    with the time the gradient takes on a 100 Mbit/s ring (link numbers are placeholders: a
    calibration replaces them)."""
    from commsim.scenario.spec import DDP, Cluster, Compute, Link, Model

    return Scenario(name=name, cluster=Cluster(nodes, 1, Link(1e9, 1e-4), Link(12.5e6, 1e-3)),
                    model=Model(int(parameters), "fp32"), compute=Compute(forward, backward, optimizer, 8),
                    ddp=DDP(bucket_cap=bucket_cap, first_bucket=first_bucket, overlap=True), steps=steps, seed=seed)


def with_stragglers(sc: Scenario, name: str, *stragglers) -> Scenario:
    return replace(sc, name=name, stragglers=tuple(stragglers))
