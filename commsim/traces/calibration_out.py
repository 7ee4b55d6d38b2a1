"""A calibration (commsim's own file format) from the all-reduces a job's traces timed.

Each bucket all-reduce of each step is one measurement: its size and its time as the simulator
counts it (:func:`commsim.traces.infer.service_times`), at the job's world size; nccl-tests logs
given with the traces add their rows. The link level is the one the ring crossed: one host,
``intra_node``; several, ``inter_node`` (:func:`commsim.calibration.from_logs.auto_level`).
The fit and the file are :mod:`commsim.calibration`'s.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from commsim.calibration import (
    Calibration, CalibrationError, Measurement, Provenance, SourceFile, fit_link, utc_now_iso,
)
from commsim.calibration.file import dump_calibration
from commsim.calibration.from_logs import auto_level
from commsim.calibration.nccl_log import check_allreduce, load_nccl_log
from commsim.traces.errors import TraceError
from commsim.traces.infer import Inferred
from commsim.traces.matching import Job


def calibration_from_job(inf: Inferred, job: Job, logs: Sequence[str] = (),
                         command: Optional[str] = None) -> Tuple[Calibration, str]:
    """(calibration, its YAML text) from the job's bucket all-reduces and any nccl-tests logs."""
    from commsim.calibration.from_logs import _sha256

    hosts = sorted({t.host for t in job.traces if t.host})
    level = auto_level(hosts) if hosts else "flat"
    measurements: List[Measurement] = [Measurement(int(size), t, job.world_size) for size, t in inf.comm_samples]
    sources = [SourceFile(t.source, _sha256(t.source), None) for t in job.traces]
    for path in logs:
        log = load_nccl_log(path)
        check_allreduce(log)
        measurements += [Measurement(size, t, log.world_size) for size, t in log.times()]
        sources.append(SourceFile(path, _sha256(path), log.command))
    sizes = sorted({m.size_bytes for m in measurements})
    if len(sizes) < 2:
        shown = f"{sizes[0]} B" if sizes else "none"
        raise TraceError(", ".join(job.sources[:2]), None,
                         f"--calibration-out: the traces' all-reduces all have one size ({shown}): a calibration "
                         "fits a latency and a bandwidth and needs two sizes or more (add an nccl-tests log of this "
                         "machine to the inputs)")
    try:
        link = fit_link(level, measurements)
    except CalibrationError as err:
        raise TraceError(", ".join(job.sources[:2]), None, f"--calibration-out: {err}") from None
    backends = sorted({t.backend for t in job.traces if t.backend})
    cal = Calibration(
        (link,),
        Provenance(backend="trace:" + ",".join(backends) if backends else "trace", world_size=job.world_size,
                   hostnames=tuple(hosts), date=utc_now_iso(), command=command, sources=tuple(sources)),
    )
    return cal, dump_calibration(cal)
