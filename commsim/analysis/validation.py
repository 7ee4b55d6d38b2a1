"""Predicted vs measured: the simulator under a calibration, and the comparison report.

Pure (numpy, no torch): :mod:`validate.replay` measures, this module predicts and compares.

- :func:`simulate_calibrated` runs the engine with the scenario's calibration replaced: every
  ring hop is timed from it (:func:`commsim.calibration.model.measured_level_constants`) instead of the
  scenario's nominal links.
- :func:`measured_summary` turns per-step, per-rank timestamps of a real run into the same
  statistics as ``commsim run`` (step time from the previous step's end to this one's, etc.).
- :func:`compare` puts both side by side with signed errors in %.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from dataclasses import replace

from commsim.calibration import Calibration, CalibrationError
from commsim.sim.engine import RunResult, simulate
from commsim.analysis.report import percentiles, summarize
from commsim.scenario.spec import Jitter, Scenario, SlowRank, Stall
from commsim.sim.stragglers import perturbations

REPLAYABLE = (SlowRank, Jitter, Stall)
# A replay holds every bucket of the gradient in memory on every local rank.
MAX_REPLAY_GRAD_BYTES = 2 * 1024**3


def simulate_calibrated(scenario: Scenario, calibration: Calibration) -> RunResult:
    """Run the scenario with calibrated link costs (the engine prices every ring hop from it)."""
    return simulate(replace(scenario, calibration=calibration))


def predicted_summary(scenario: Scenario, calibration: Calibration) -> Dict[str, Any]:
    """The `commsim run` summary of the scenario under the calibration (and its baseline)."""
    return summarize(replace(scenario, calibration=calibration))


def measured_summary(start: np.ndarray, rank_end: np.ndarray, bucket_launch: Optional[np.ndarray] = None,
                     bucket_finish: Optional[np.ndarray] = None) -> Dict[str, Any]:
    """Statistics of a real run from host-clock timestamps (seconds, one clock for all ranks).

    start: when the timed steps began (after a barrier); rank_end: (steps, n) when each rank
    finished its optimizer; bucket_launch / bucket_finish: (steps, buckets, n) when each rank
    launched / finished each bucket's all-reduce. Definitions as in commsim.analysis.report: a step
    lasts from the previous step's end (its last rank) to its own; a bucket's communication
    time is from its launch on the last rank to launch to its last finish; comm_time_s is the
    mean over steps of their sum per step."""
    step_end = rank_end.max(axis=1)
    step_start = np.concatenate(([start], step_end[:-1]))
    out: Dict[str, Any] = {"step_time_s": percentiles(step_end - step_start), "steps": int(len(step_end))}
    if bucket_launch is not None and bucket_finish is not None and bucket_launch.size:
        per_step = (bucket_finish.max(axis=2) - bucket_launch.max(axis=2)).sum(axis=1)
        out["comm_time_s"] = float(np.mean(per_step))
    return out


def refuse_sharding(scenario: Scenario) -> None:
    """CalibrationError unless ``ddp.sharding`` is none: the real jobs (replay and DDP)
    all-reduce every bucket; ZeRO-2/FSDP's reduce-scatter and all-gathers are not replayed, so
    a comparison with their prediction would compare different jobs."""
    if scenario.ddp.sharding != "none":
        raise CalibrationError(
            f"{scenario.ddp.sharding} is not replayed (the real job all-reduces every bucket); "
            "validate with ddp.sharding=none", key="ddp.sharding"
        )


def replay_plan(scenario: Scenario, warmup_steps: int, timeout_s: float) -> Dict[str, Any]:
    """What every rank of a replay does (JSON-able; see validate.replay.rank_replay).

    Raises CalibrationError (one line) for what cannot be replayed on real ranks: a sharded
    job (the replay all-reduces every bucket), throttling and slow links (no way to slow a
    real clock or link on purpose here), or gradients too big to hold."""
    refuse_sharding(scenario)
    bad = sorted({type(s).__name__ for s in scenario.stragglers if not isinstance(s, REPLAYABLE)})
    if bad:
        raise CalibrationError(
            f"stragglers of kind {', '.join(bad)} cannot be injected into a real run "
            "(replay supports slow_rank, jitter and stall); remove them with --set", key="stragglers"
        )
    if scenario.model.grad_bytes > MAX_REPLAY_GRAD_BYTES:
        raise CalibrationError(
            f"{scenario.model.grad_bytes:.3g} bytes of gradients per rank is more than "
            f"a replay holds ({MAX_REPLAY_GRAD_BYTES:.3g}); use a smaller model.parameters", key="model.parameters"
        )
    buckets = np.asarray(scenario.gradient_buckets(), dtype=float)
    pert = perturbations(scenario)
    c = scenario.compute
    return {
        "steps": scenario.steps,
        "warmup_steps": warmup_steps,
        "forward_s": c.forward,
        "backward_s": c.backward,
        "optimizer_s": c.optimizer,
        "gradient_accumulation": scenario.ddp.gradient_accumulation,
        "overlap": scenario.ddp.overlap,
        "bucket_bytes": [float(b) for b in buckets],
        "ready_fraction": list(scenario.bucket_ready_points()),
        "factor": pert.factor.tolist(),
        "stall": pert.stall.tolist(),
        "timeout_s": timeout_s,
    }


def _err(pred: Optional[float], meas: Optional[float]) -> Optional[float]:
    """Signed error of the prediction in % of the measurement (None when undefined)."""
    if pred is None or meas is None or meas == 0:
        return None
    return (pred - meas) / meas * 100.0


def compare(measured: Dict[str, Any], predicted: Dict[str, Any],
            measured_baseline: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Measured vs predicted step time (mean, p95), communication time and straggler cost."""
    meas_cost = None
    if measured_baseline is not None:
        meas_cost = measured["step_time_s"]["mean"] - measured_baseline["step_time_s"]["mean"]
    has_stragglers = measured_baseline is not None
    m = {
        "step_time_s": {k: measured["step_time_s"][k] for k in ("mean", "p50", "p95", "max")},
        "comm_time_s": measured.get("comm_time_s"),
        "baseline_step_time_s": measured_baseline["step_time_s"]["mean"] if measured_baseline else None,
        "straggler_cost_s": meas_cost,
    }
    p = {
        "step_time_s": {k: predicted["step_time_s"][k] for k in ("mean", "p50", "p95", "max")},
        "comm_time_s": predicted["comm_time_s"],
        "baseline_step_time_s": predicted["baseline_step_time_s"],
        "straggler_cost_s": predicted["straggler_cost_s"] if has_stragglers else None,
    }
    return {
        "measured": m,
        "predicted": p,
        "error_pct": {
            "step_time_mean": _err(p["step_time_s"]["mean"], m["step_time_s"]["mean"]),
            "step_time_p95": _err(p["step_time_s"]["p95"], m["step_time_s"]["p95"]),
            "comm_time": _err(p["comm_time_s"], m["comm_time_s"]),
            "straggler_cost": _err(p["straggler_cost_s"], m["straggler_cost_s"]),
        },
    }


def format_comparison(report: Dict[str, Any]) -> str:
    """The comparison as an aligned text table."""
    m, p, e = report["measured"], report["predicted"], report["error_pct"]

    def ms(x):
        return "-" if x is None else f"{x * 1e3:10.2f} ms"

    def pct(x):
        return "-" if x is None else f"{x:+7.1f} %"

    rows = [
        ("step time mean", m["step_time_s"]["mean"], p["step_time_s"]["mean"], e["step_time_mean"]),
        ("step time p95", m["step_time_s"]["p95"], p["step_time_s"]["p95"], e["step_time_p95"]),
        ("communication", m["comm_time_s"], p["comm_time_s"], e["comm_time"]),
        ("straggler cost", m["straggler_cost_s"], p["straggler_cost_s"], e["straggler_cost"]),
    ]
    lines = [f"{'':16s} {'measured':>13s} {'predicted':>13s} {'error':>9s}"]
    for name, a, b, c in rows:
        lines.append(f"{name:16s} {ms(a):>13s} {ms(b):>13s} {pct(c):>9s}")
    return "\n".join(lines)
