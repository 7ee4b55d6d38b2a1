"""Every collective table of an nccl-tests log: all_reduce, all_gather, reduce_scatter.

Logs of real clusters often hold several tables, one ``# Collective test starting: X_perf``
section per collective. This module splits a log into those sections and reads each with
:func:`commsim.calibration.nccl_log.parse_nccl_log` under its own collective, so that every
row is checked with that collective's bus factor (nccl-tests doc/PERFORMANCE.md) and the world
size, device list and NCCL version are found as that parser finds them. It keeps the
collectives a physical calibration uses. A section sees the lines before the first section
too (a device list or NCCL INFO lines printed once at the top) and keeps the log's line
numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from commsim.calibration.nccl_log import (TRANSIENT_RATIO, NcclLog, NcclLogError, collective_of, parse_nccl_log,
                                          read_log_text)

__all__ = ["KIND_OF_PERF", "TRANSIENT_RATIO", "Table", "LogTables", "parse_tables", "load_tables"]

KIND_OF_PERF = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter"}

_START = re.compile(r"#\s*Collective test starting:\s*(\S+)")


@dataclass(frozen=True)
class Table:
    """One collective's rows: (size_bytes, time_us, busbw_GBps) of each row's steady figure
    (:meth:`commsim.calibration.nccl_log.NcclRow.steady`: out-of-place, in-place where
    out-of-place is unusable or more than :data:`TRANSIENT_RATIO` times slower)."""

    kind: str
    rows: Tuple[Tuple[int, float, float], ...]
    first_line: int


@dataclass(frozen=True)
class LogTables:
    source: str
    tables: Tuple[Table, ...]
    world_size: int
    nodes: Optional[int]       # distinct hosts of the device list; None if the log has none
    nccl_version: Optional[str]
    gpu_name: Optional[str] = None  # the device list's GPU model (e.g. "NVIDIA A100-SXM4-40GB")

    def table(self, kind: str) -> Optional[Table]:
        for t in self.tables:
            if t.kind == kind:
                return t
        return None


def _printed(x: float) -> float:
    """A value the parser scaled (us -> s, GB/s -> B/s) back to the digits the log printed."""
    return float(f"{x:.12g}")


def _sections(lines: List[str], kind_hint: Optional[str]) -> List[Tuple[Optional[str], int, int]]:
    """(collective or None, first line index, end index) per section. The lines before the
    first ``Collective test starting`` line are a section of `kind_hint` (None: what the log
    itself says, else all_reduce)."""
    starts = [(i, m.group(1)) for i, line in enumerate(lines) if (m := _START.search(line))]
    out = [(kind_hint, 0, starts[0][0] if starts else len(lines))]
    for k, (i, name) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        out.append((collective_of(name) or name, i, end))
    return out


def parse_tables(text: str, source: str = "<log>", world_size: Optional[int] = None,
                 kind_hint: Optional[str] = None) -> LogTables:
    """Split `text` into its collective tables; see the module docstring. `kind_hint` names the
    collective of a log without a ``Collective test starting`` line (else what its command
    line says, else all_reduce)."""
    lines = text.splitlines()
    sections = _sections(lines, kind_hint)
    head = sections[0][2]
    # what the top of the log says once for every section (device list, NCCL INFO lines), without its rows
    preamble = [line if line.lstrip().startswith("#") or "NCCL" in line else "" for line in lines[:head]]
    tables, logs, errors = [], [], []
    for kind, first, end in sections:
        if kind is not None and kind not in KIND_OF_PERF:
            continue
        # blank elsewhere, so that the parser's line numbers are the log's
        chunk = lines[:end] if first == 0 else preamble + [""] * (first - head) + lines[first:end]
        try:
            log = parse_nccl_log("\n".join(chunk), source, world_size=world_size, collective=kind)
        except NcclLogError as exc:
            errors.append(exc)
            continue
        if log.bus_kind not in KIND_OF_PERF:
            continue
        rows = []
        for r in log.rows:
            t = r.steady()
            if t is not None:
                rows.append((r.size_bytes, _printed(t.time_s * 1e6), _printed(t.busbw_Bps / 1e9)))
        if rows:
            tables.append(Table(log.bus_kind, tuple(rows), first + 1))
            logs.append(log)
    if not tables:
        if errors and not any("no nccl-tests data table" not in str(e) for e in errors):
            raise NcclLogError("no nccl-tests data table found", source)
        if errors:
            raise next(e for e in errors if "no nccl-tests data table" not in str(e))
        raise NcclLogError("no all_reduce/all_gather/reduce_scatter table found", source)
    return _log_tables(source, tables, logs)


def _log_tables(source: str, tables: List[Table], logs: List[NcclLog]) -> LogTables:
    first = logs[0]
    devices = [d for log in logs for d in log.devices]
    hosts = {d.host for d in devices}
    names = {d.name for d in devices}
    version = next((log.nccl_version for log in logs if log.nccl_version), None)
    return LogTables(source, tuple(tables), first.world_size, len(hosts) if hosts else None, version,
                     next(iter(names)) if len(names) == 1 else None)


def load_tables(path: str, world_size: Optional[int] = None, kind_hint: Optional[str] = None) -> LogTables:
    """Read (:func:`commsim.calibration.nccl_log.read_log_text`) and split a log file
    (NcclLogError if unreadable or without usable tables)."""
    text = read_log_text(path)
    return parse_tables(text, source=str(path), world_size=world_size, kind_hint=kind_hint)
