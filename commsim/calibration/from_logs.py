"""A calibration from nccl-tests logs: parse each log, group its rows by link level, fit each level."""

from __future__ import annotations

import hashlib
from typing import Optional, Sequence, Tuple

from commsim.calibration.file import utc_now_iso
from commsim.calibration.errors import CalibrationError
from commsim.calibration.fit import fit_link
from commsim.calibration.records import LEVELS, Calibration, Measurement, Provenance, SourceFile
from commsim.calibration.nccl_log import check_allreduce, load_nccl_log


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def auto_level(hostnames: Sequence[str], nodes: Optional[int] = None) -> str:
    """One host: intra_node; several: inter_node (the ring crosses nodes); without host names,
    the node count of the file's own header if it states one; else flat."""
    if hostnames:
        return "intra_node" if len(hostnames) == 1 else "inter_node"
    if nodes:
        return "intra_node" if nodes == 1 else "inter_node"
    return "flat"


def calibration_from_nccl_logs(
    paths: Sequence[str], level: str = "auto", ranks: Optional[int] = None,
    in_place: bool = False, command: Optional[str] = None,
) -> Tuple[Calibration, list]:
    """Parse every log, group its measurements by link level, fit each level.

    Returns the calibration and the parsed logs (for reporting)."""
    if not paths:
        raise CalibrationError("no nccl-tests log given")
    by_level: dict = {}
    logs = []
    for path in paths:
        log = load_nccl_log(path, world_size=ranks)
        check_allreduce(log)
        lv = auto_level(log.hostnames, log.nodes) if level == "auto" else level
        by_level.setdefault(lv, []).extend(
            Measurement(size, t, log.world_size) for size, t in log.times(in_place=in_place)
        )
        logs.append((path, log, lv))
    if "flat" in by_level and len(by_level) > 1:
        raise CalibrationError(
            "some logs have no host information (level 'flat') and others do: pass --level for a consistent split"
        )
    levels = tuple(fit_link(lv, ms) for lv, ms in sorted(by_level.items(), key=lambda kv: LEVELS.index(kv[0])))
    versions = sorted({log.nccl_version for _, log, _ in logs if log.nccl_version})
    prov = Provenance(
        backend="nccl-tests",
        world_size=max(log.world_size for _, log, _ in logs),
        hostnames=tuple(sorted({h for _, log, _ in logs for h in log.hostnames})),
        nccl_version=",".join(versions) or None,
        date=utc_now_iso(),
        command=command,
        sources=tuple(SourceFile(str(p), _sha256(p), log.command) for p, log, _ in logs),
    )
    return Calibration(levels, prov), logs
