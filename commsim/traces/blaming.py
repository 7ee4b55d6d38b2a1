"""``commsim blame`` on traces: read, match, reconstruct the steps where the traces allow, blame."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from commsim.analysis.blame import blame
from commsim.traces.errors import TraceError
from commsim.traces.load import blame_input, job_from, read_inputs
from commsim.traces.matching import Job
from commsim.traces.steps import Timeline, timeline


@dataclass
class Blamed:
    report: Dict[str, Any]
    job: Job
    timeline: Optional[Timeline]
    notes: List[str]


def blame_traces(paths: Sequence[str]) -> Blamed:
    """The blame report of the job in `paths` (profiler traces or Flight Recorder dumps).

    With profiler steps the report has per-step critical paths; from dumps (or traces without
    steps) it is per collective and per rank only."""
    inputs = read_inputs(paths, allow_logs=False)
    job = job_from(inputs)
    notes = list(inputs.notes) + list(job.notes)
    tl = None
    if all(t.format == "kineto" for t in job.traces):
        try:
            tl = timeline(job)
        except TraceError as err:  # blame still works per collective
            notes.append(f"no per-step analysis: {err.message}")
    else:
        notes.append("Flight Recorder dumps have no steps: per collective and per rank only")
    report = blame(blame_input(job, tl))
    report["files"] = [t.source for t in job.traces]
    report["matched_by"] = job.matched_by
    report["notes"] = notes
    return Blamed(report, job, tl, notes)
