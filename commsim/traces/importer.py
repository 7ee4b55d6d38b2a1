"""``commsim import``: traces in, a scenario (and optionally a calibration) out.

The scenario is written as YAML with a comment header that says what it came from (files,
ranks, steps, what was matched how), what was inferred and how well the scenario, simulated,
reproduces the measured mean step time. Nothing is written unless everything succeeded.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence

import yaml

from commsim.traces.infer import Inferred, infer
from commsim.traces.load import Inputs, job_from, read_inputs
from commsim.traces.matching import Job
from commsim.traces.steps import Timeline, job_sources, timeline

DEFAULT_STEPS = 100


@dataclass
class Imported:
    """An import's results: the scenario text and spec, the calibration (if asked for), and
    the figures the header states."""

    text: str
    scenario: Any  # commsim.scenario.spec.Scenario
    calibration: Any  # commsim.calibration.Calibration or None
    calibration_text: Optional[str]
    inferred: Inferred
    timeline: Timeline
    job: Job
    simulated_step_time: float
    notes: List[str]

    @property
    def step_time_error(self) -> float:
        """Simulated mean step time / measured - 1."""
        return self.simulated_step_time / self.inferred.measured_step_time - 1.0


def _ms(x: float) -> str:
    return f"{x * 1e3:.6g} ms"


def _scenario_doc(inf: Inferred, name: str, steps: int, seed: int, batch_size: int) -> Dict[str, Any]:
    gpn = inf.world_size // inf.nodes
    link = {"bandwidth": f"{inf.bandwidth / 1e9:.6g} GB/s", "latency": f"{inf.alpha * 1e6:.6g} us"}
    doc: Dict[str, Any] = {
        "name": name,
        "description": f"imported from {inf.world_size} ranks' traces ({inf.steps} steps of {inf.buckets} buckets)",
        "seed": seed,
        "steps": steps,
        "cluster": {"nodes": inf.nodes, "gpus_per_node": gpn, "intra_node": dict(link), "inter_node": dict(link)},
        "model": {"parameters": inf.parameters, "grad_dtype": inf.grad_dtype},
        "compute": {"forward": _ms(inf.forward), "backward": _ms(inf.backward), "optimizer": _ms(inf.optimizer),
                    "batch_size": batch_size},
        # the job's own layout, as its DDP built it and issued it (ddp.bucket_cap does not apply);
        # DDP's own costs off: the measured spans already hold them (the copies in backward and in
        # the optimizer step, the slowdown under overlap, the host's launch delay in the issues)
        "ddp": {"bucket_sizes": list(inf.bucket_sizes), "bucket_ready": list(inf.bucket_ready), "overlap": True,
                "gradient_accumulation": 1, "bucket_overhead": 0, "overlap_slowdown": 0, "gradient_as_bucket_view": True},
        "collective": {"algorithm": "ring"},
    }
    stragglers: List[Dict[str, Any]] = []
    for r, factor in inf.slow:
        stragglers.append({"kind": "slow_rank", "ranks": [r], "factor": round(factor, 4)})
    for st in inf.stalls:
        entry = {"kind": "stall", "ranks": st["ranks"], "duration": _ms(st["duration"])}
        if "every" in st:
            entry["every"] = st["every"]
        else:
            entry["probability"] = round(min(st["probability"], 1.0), 4)
        stragglers.append(entry)
    if inf.jitter_cv > 0:
        stragglers.append({"kind": "jitter", "ranks": "all", "distribution": "lognormal",
                           "cv": round(inf.jitter_cv, 4)})
    if stragglers:
        doc["stragglers"] = stragglers
    return doc


def _sha(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:12]


def _header(inf: Inferred, tl: Timeline, job: Job, notes: List[str], sim_step: float,
            logs: Sequence[str]) -> List[str]:
    m = inf.measured_step_time
    lines = [
        "Imported by `commsim import` from these traces (sha256, first 12 hex digits):",
        *(f"  rank {t.rank}: {t.source} ({_sha(t.source)}, {t.format}, {t.backend or 'backend unknown'}"
          f"{', host ' + t.host if t.host else ''})" for t in job.traces),
        *(f"  nccl-tests log: {p} ({_sha(p)})" for p in logs),
        f"Collectives matched across ranks by {job.matched_by}; {tl.steps} complete steps used "
        f"(profiler steps {int(tl.step_numbers[0])}..{int(tl.step_numbers[-1])}).",
        f"Measured mean step time {_ms(m)} (last rank's end to last rank's end, {tl.steps - 1} intervals); "
        f"this scenario simulated: {_ms(sim_step)} ({(sim_step / m - 1) * 100:+.1f}%).",
        f"Compute (healthy ranks' means): forward {_ms(inf.forward)} (everything before the first autograd op), "
        f"backward {_ms(inf.backward)}, optimizer {_ms(inf.optimizer)}.",
        f"Buckets: {len(tl.bucket_bytes)} of {', '.join(str(int(b)) for b in tl.bucket_bytes[:8])}"
        f"{' ...' if len(tl.bucket_bytes) > 8 else ''} B ({tl.grad_dtype}); issued at "
        f"{', '.join(f'{x:.2f}' for x in inf.ready_fraction[:8])} of the backward "
        f"(ddp.bucket_sizes and ddp.bucket_ready; a uniform gradient rate would say "
        f"{', '.join(f'{x:.2f}' for x in inf.model_fraction[:8])}); as first_bucket + bucket_cap: "
        f"{inf.first_bucket} + {inf.bucket_cap} B.",
        f"Links: {inf.link_note}; inter_node copies the measured link (set it before a multi-node what-if).",
    ]
    if inf.slow:
        lines.append("Slow ranks: " + ", ".join(f"rank {r} x{f:.3f} compute" for r, f in inf.slow) + ".")
    for st in inf.stalls:
        how = f"every {st['every']} steps" if "every" in st else f"in {len(st['steps'])} of {tl.steps} steps"
        lines.append(f"Stall: ranks {st['ranks']} pause {_ms(st['duration'])} before the forward {how} "
                     f"(profiler steps {st['steps'][:6]}).")
    lines.append((f"Jitter: cv {inf.jitter_cv:.4f} (lognormal), fitted to the slowest rank per step "
                  f"({inf.slowest_ratio:.3f} x its mean compute); each rank's own spread is cv {inf.spread_cv:.4f}"
                  + (" (the ranks' noise is not independent here)" if abs(inf.spread_cv - inf.jitter_cv) > 0.25 * max(inf.jitter_cv, 1e-9) else "")
                  + ".") if inf.jitter_cv else "Jitter: below 1% (left out).")
    lines.append("batch_size is not in the traces: set compute.batch_size for throughput figures.")
    lines += notes
    return ["# " + line for line in lines]


def _simulated_step(scenario) -> float:
    from commsim.sim.engine import simulate

    return float(simulate(scenario).step_time.mean())


def import_traces(paths: Sequence[str], name: str = "imported", steps: int = DEFAULT_STEPS, seed: int = 0,
                  batch_size: int = 1, calibration_out: Optional[str] = None,
                  scenario_out: Optional[str] = None) -> Imported:
    """Read, match, reconstruct, infer, check by simulation; return the texts to write.

    `calibration_out`/`scenario_out` are only used to write the scenario's ``calibration:``
    path relative to where the scenario will be."""
    from commsim.scenario.loader import parse_scenario

    inputs: Inputs = read_inputs(paths)
    job = job_from(inputs)
    tl = timeline(job)
    inf = infer(tl, [t.host for t in job.traces], job_sources(job))
    notes = list(dict.fromkeys(inputs.notes + tl.notes + inf.notes + [n for t in job.traces for n in t.notes]))
    calibration = cal_text = None
    cal_ref = None
    if calibration_out:
        from commsim.traces.calibration_out import calibration_from_job

        calibration, cal_text = calibration_from_job(inf, job, inputs.nccl_logs)
        base = os.path.dirname(os.path.abspath(scenario_out)) if scenario_out else os.getcwd()
        cal_ref = os.path.relpath(os.path.abspath(calibration_out), base)
    doc = _scenario_doc(inf, name, steps, seed, batch_size)
    source = scenario_out or "<imported scenario>"
    scenario = parse_scenario(dict(doc), source)  # every value the writer made is checked like a file's
    sim_step = _simulated_step(scenario)
    if calibration is not None:
        doc["calibration"] = cal_ref
        scenario = replace(scenario, calibration=calibration)
    header = _header(inf, tl, job, notes, sim_step, inputs.nccl_logs)
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
    text = "\n".join(header) + "\n" + body
    return Imported(text, scenario, calibration, cal_text, inf, tl, job, sim_step, notes)
