"""Parse real nccl-tests output (``all_reduce_perf`` and friends) into rows.

Real logs are messy: shell prompts and banners, ``NCCL INFO`` / ``NCCL WARN`` lines, device
lists, launcher prefixes (``0: `` from srun -l, ``[1,0]<stdout>:`` from mpirun
--tag-output), the out-of-place and in-place column groups, ``N/A`` cells, lines cut off
mid-way, the ``# Avg bus bandwidth`` footer. This module keeps every complete data row and
says, in :attr:`NcclLog.notes`, which lines it could not use and why.

The world size comes from, in order: the caller; the device list (``#  Rank  7 ...``); the
``nranks N`` of NCCL INFO lines; a ``# NRANKS: N`` line of the file's own header (the
provenance headers in tests/data/nccl-tests/); and last, the busbw/algbw ratio of the rows,
which for all-reduce is 2(n-1)/n (nccl-tests doc/PERFORMANCE.md). When a stated world size
contradicts that ratio the log is rejected.

Pure module: no numpy needed, no torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from commsim.calibration.errors import CalibrationError
from commsim.calibration.records import allreduce_factor

# nccl-tests counts GB/s as 1e9 bytes/s (src/common.cu: 1.0E9)
GB = 1.0e9


class NcclLogError(CalibrationError):
    """An nccl-tests log cannot be used (one-line message naming the file)."""


@dataclass(frozen=True)
class Timing:
    """One column group (out-of-place or in-place) of a row; None where the cell was N/A."""

    time_s: Optional[float]
    algbw_Bps: Optional[float]
    busbw_Bps: Optional[float]
    wrong: Optional[str]

    @property
    def complete(self) -> bool:
        return None not in (self.time_s, self.algbw_Bps, self.busbw_Bps) and self.time_s > 0


@dataclass(frozen=True)
class NcclRow:
    """A data row: size (bytes), element count, type, reduction op, root (None in old logs
    without that column), and the out-of-place / in-place timings (None if absent)."""

    line: int
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: Optional[int]
    out_of_place: Optional[Timing]
    in_place: Optional[Timing]


@dataclass(frozen=True)
class Device:
    rank: int
    host: str
    device: int
    bus_id: str
    name: str


@dataclass(frozen=True)
class NcclLog:
    """Everything usable in one log."""

    source: str
    rows: Tuple[NcclRow, ...]
    world_size: int
    world_size_from: str
    collective: Optional[str]
    command: Optional[str]
    hostnames: Tuple[str, ...]
    devices: Tuple[Device, ...]
    nccl_version: Optional[str]
    nccl_tests_version: Optional[str]
    avg_busbw_GBps: Optional[float]
    nodes: Optional[int]  # from a "# NRANKS: 16 (2 nodes x 8 GPUs)" / "(single node)" header; None if unsaid
    notes: Tuple[Tuple[int, str], ...]  # (line number, what was skipped or suspicious, and why)

    def times(self, in_place: bool = False) -> List[Tuple[int, float]]:
        """(size_bytes, time_s) per row, from the chosen column group, falling back to the
        other group when the chosen one is N/A or missing; rows with neither are left out."""
        out = []
        for r in self.rows:
            first, second = (r.in_place, r.out_of_place) if in_place else (r.out_of_place, r.in_place)
            for t in (first, second):
                if t is not None and t.complete:
                    out.append((r.size_bytes, t.time_s))
                    break
        return out


# --- line patterns ----------------------------------------------------------------------------

# launcher prefixes: "0: " (srun -l), "[1,0]<stdout>: " (Open MPI --tag-output), "[0] " (some wrappers)
_PREFIX = re.compile(r"^\s*(?:\d+:\s|\[\d+,\d+\]<std(?:out|err)>:\s?|\[\d+\]\s)")
_DEVICE = re.compile(
    r"^#\s*Rank\s+(\d+)\b.*?\bon\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_NRANKS = re.compile(r"\bnranks\s+(\d+)\b")
_INFO_HOST = re.compile(r"^\s*([A-Za-z0-9][\w.\-]*):\d+:\d+\s+\[\d+\]\s+NCCL\s+(?:INFO|WARN)")
_NCCL_VERSION = re.compile(r"NCCL version\s+(\d+\.\d+\.\d+)")
_TESTS_VERSION = re.compile(r"#\s*nccl-tests version\s+(\S+)(?:.*nccl-library=(\d+))?")
_FILE_NRANKS = re.compile(r"^#\s*NRANKS:\s*(\d+)(.*)$")
_FILE_NODES = re.compile(r"\((?:(\d+)\s+nodes?\b|(single node))", re.IGNORECASE)
_COLLECTIVE = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_PERF_CMD = re.compile(r"(\S*?(\w+_perf)(?:_mpi)?\b.*)$")
_HEADER = re.compile(r"^#\s*size\s+count\s+type\s+redop\s+(root\s+)?time\b", re.IGNORECASE)
_INT = re.compile(r"^-?\d+$")
_NUM = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _nccl_version_from_code(code: str) -> str:
    """NCCL_VERSION_CODE -> "x.y.z": major*10000+minor*100+patch since 2.9, major*1000+... before."""
    c = int(code)
    if c >= 20900:
        return f"{c // 10000}.{c // 100 % 100}.{c % 100}"
    return f"{c // 1000}.{c // 100 % 10}.{c % 100}"


def _cell(tok: str) -> Optional[float]:
    if tok.upper() == "N/A":
        return None
    if not _NUM.match(tok):
        raise ValueError(tok)
    value = float(tok)
    if not math.isfinite(value):  # 1e400 overflows to inf: no measurement, like any junk cell
        raise ValueError(tok)
    return value


def _timing(toks: List[str]) -> Optional[Timing]:
    """time(us) algbw busbw wrong -> Timing; None when fewer than 3 cells (cut-off line)."""
    if len(toks) < 3:
        return None
    time_us, alg, bus = (_cell(t) for t in toks[:3])
    wrong = toks[3] if len(toks) > 3 else None
    return Timing(
        None if time_us is None else time_us * 1e-6,
        None if alg is None else alg * GB,
        None if bus is None else bus * GB,
        wrong,
    )


def _split_row(toks: List[str], has_root: Optional[bool]):
    """Split a data row's tokens after "size count type redop"; returns (root, rest) or None."""
    rest = toks[4:]
    if has_root is None:  # no header seen: a full row has 9 (root) or 8 (no root) cells
        if len(rest) in (9, 5):
            has_root = True
        elif len(rest) in (8, 4):
            has_root = False
        else:
            return None
    if has_root:
        if not rest or not _INT.match(rest[0]):
            return None
        return int(rest[0]), rest[1:]
    return None, rest


def parse_nccl_log(text: str, source: str = "<log>", world_size: Optional[int] = None) -> NcclLog:
    """Parse nccl-tests output. Raises NcclLogError when there is no data table, when the
    world size cannot be found or contradicts the rows, or when the rows are not all-reduce
    shaped (see module docstring)."""
    rows: List[NcclRow] = []
    skipped: List[Tuple[int, str]] = []  # becomes NcclLog.notes
    devices: List[Device] = []
    hosts: List[str] = []
    nranks_info: Optional[int] = None
    file_nranks: Optional[int] = None
    file_nodes: Optional[int] = None
    collective = command = nccl_version = tests_version = None
    avg = None
    has_root: Optional[bool] = None

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _PREFIX.sub("", raw, count=1).rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        m = _FILE_NRANKS.match(stripped)
        if m and file_nranks is None:
            file_nranks = int(m.group(1))
            if (nm := _FILE_NODES.search(m.group(2))):
                file_nodes = int(nm.group(1)) if nm.group(1) else 1
            continue
        if stripped.startswith("#"):
            if (m := _DEVICE.match(stripped)):
                devices.append(Device(int(m.group(1)), m.group(2), int(m.group(3)), m.group(4), m.group(5)))
            elif (m := _HEADER.match(stripped)):
                has_root = bool(m.group(1))
            elif (m := _TESTS_VERSION.match(stripped)):
                tests_version = m.group(1)
                if m.group(2):
                    nccl_version = nccl_version or _nccl_version_from_code(m.group(2))
            elif (m := _COLLECTIVE.match(stripped)):
                collective = m.group(1)
            elif (m := _AVG.match(stripped)):
                try:
                    avg = float(m.group(1))
                except ValueError:
                    skipped.append((lineno, "unreadable average bus bandwidth"))
            continue
        if "NCCL" in stripped and ("INFO" in stripped or "WARN" in stripped):
            if (m := _INFO_HOST.match(stripped)):
                hosts.append(m.group(1))
            if (m := _NRANKS.search(stripped)):
                nranks_info = max(nranks_info or 0, int(m.group(1)))
            if (m := _NCCL_VERSION.search(stripped)):
                nccl_version = m.group(1)
            continue
        toks = stripped.split()
        if len(toks) >= 2 and _INT.match(toks[0]) and _INT.match(toks[1]):
            row = _parse_row(lineno, toks, has_root, skipped)
            if row is not None:
                rows.append(row)
                if has_root is None:  # the first complete row fixes the layout for cut-off rows
                    has_root = row.root is not None
            continue
        if command is None and (m := _PERF_CMD.search(stripped)) and "_perf" in stripped:
            command = _strip_prompt(stripped)
            collective = collective or m.group(2)

    if not rows:
        raise NcclLogError(f"{source}: no nccl-tests data table found (expected rows like '   8   2  float  sum  -1  12.3  0.00  0.00  0 ...')")

    n, n_from = _world_size(source, rows, devices, nranks_info, file_nranks, world_size)
    rows = _drop_inconsistent(rows, n, skipped)
    if not rows:
        raise NcclLogError(f"{source}: no data row has algbw = size/time and busbw = algbw*2(n-1)/n for n={n}")
    host_list = sorted({d.host for d in devices} | set(hosts))
    return NcclLog(
        source=source,
        rows=tuple(rows),
        world_size=n,
        world_size_from=n_from,
        collective=collective,
        command=command,
        hostnames=tuple(host_list),
        devices=tuple(devices),
        nccl_version=nccl_version,
        nccl_tests_version=tests_version,
        avg_busbw_GBps=avg,
        nodes=file_nodes,
        notes=tuple(sorted(skipped)),
    )


def _strip_prompt(line: str) -> str:
    """Drop a shell prompt ("user@host:~/dir# ", "$ ") in front of a command."""
    m = re.match(r"^(?:\S+@\S+?[#$]\s*|[$#>]\s+)(.*)$", line)
    return (m.group(1) if m else line).strip()


def _parse_row(lineno: int, toks: List[str], has_root: Optional[bool], skipped) -> Optional[NcclRow]:
    if len(toks) < 4:
        skipped.append((lineno, "cut-off data row (fewer than 4 columns)"))
        return None
    split = _split_row(toks, has_root)
    if split is None:
        skipped.append((lineno, f"data row with {len(toks)} columns: cannot tell its layout"))
        return None
    root, rest = split
    try:
        oop = _timing(rest[:4])
        ip = _timing(rest[4:8])
    except ValueError as exc:
        skipped.append((lineno, f"data row with a non-numeric cell {exc.args[0]!r}"))
        return None
    if oop is None:
        skipped.append((lineno, "cut-off data row (no complete out-of-place columns)"))
        return None
    if ip is None and rest[4:]:
        skipped.append((lineno, "in-place columns cut off"))
    size = int(toks[0])
    if size <= 0:
        skipped.append((lineno, "data row with size 0"))
        return None
    return NcclRow(lineno, size, int(toks[1]), toks[2], toks[3], root, oop, ip)


def _consistent(size: int, t: Optional[Timing], n: int) -> bool:
    """The printed algbw and busbw agree with size/time and 2(n-1)/n to print rounding
    (0.005 GB/s from 2 decimals, and 1% for the rounding of the time column). A line cut in
    the middle of a number fails this, which is how such cut-off cells are caught."""
    if t is None or not t.complete:
        return False
    alg = size / t.time_s
    bus = alg * allreduce_factor(n)
    return abs(alg - t.algbw_Bps) <= 0.006 * GB + 0.01 * alg and abs(bus - t.busbw_Bps) <= 0.006 * GB + 0.01 * bus


def _drop_inconsistent(rows: List[NcclRow], n: int, notes) -> List[NcclRow]:
    """Replace inconsistent column groups by None; drop rows left with none."""
    out = []
    for r in rows:
        oop = r.out_of_place if _consistent(r.size_bytes, r.out_of_place, n) else None
        ip = r.in_place if _consistent(r.size_bytes, r.in_place, n) else None
        for name, before, after in (("out-of-place", r.out_of_place, oop), ("in-place", r.in_place, ip)):
            if before is not None and before.complete and after is None:
                notes.append((r.line, f"{name} columns dropped: algbw/busbw do not match size/time for n={n} (cut-off or corrupted)"))
            elif before is not None and not before.complete:
                notes.append((r.line, f"{name} columns have N/A cells"))
        w = (oop or ip)
        if oop is None and ip is None:
            notes.append((r.line, "data row dropped: no usable column group"))
            continue
        if w is not None and w.wrong not in (None, "0", "N/A") and _INT.match(w.wrong or ""):
            notes.append((r.line, f"{w.wrong} wrong elements reported (correctness check failed)"))
        out.append(NcclRow(r.line, r.size_bytes, r.count, r.dtype, r.redop, r.root, oop, ip))
    return out


def _discriminating(rows) -> List[NcclRow]:
    """Rows with algbw >= 1 GB/s: there 2-decimal rounding leaves busbw/algbw precise enough
    to tell world sizes apart."""
    return [
        r for r in rows
        if r.out_of_place is not None and r.out_of_place.complete and r.out_of_place.algbw_Bps >= 1.0 * GB
    ]


def _ratio_world_size(rows) -> Optional[int]:
    """n from the median busbw/algbw = 2(n-1)/n; None without discriminating rows."""
    ratios = sorted(r.out_of_place.busbw_Bps / r.out_of_place.algbw_Bps for r in _discriminating(rows))
    if not ratios:
        return None
    ratio = ratios[len(ratios) // 2]
    if not 0.9 < ratio < 2.0:
        return None
    return max(2, round(2.0 / (2.0 - ratio)))


def _world_size(source, rows, devices, nranks_info, file_nranks, given) -> Tuple[int, str]:
    ratio_n = _ratio_world_size(rows)
    if given is not None:
        n, where = given, "given"
    elif devices:
        n, where = max(d.rank for d in devices) + 1, "device list"
    elif nranks_info:
        n, where = nranks_info, "NCCL INFO nranks"
    elif file_nranks:
        n, where = file_nranks, "file header NRANKS"
    elif ratio_n is not None:
        n, where = ratio_n, "busbw/algbw ratio"
    else:
        raise NcclLogError(f"{source}: cannot determine the world size (no device list, no nranks, no NRANKS header); pass it explicitly")
    if n < 2:
        raise NcclLogError(f"{source}: world size {n} (from {where}): an all-reduce needs >= 2 ranks")
    if ratio_n is not None and ratio_n != n:
        disc = _discriminating(rows)
        fits_ratio = sum(_consistent(r.size_bytes, r.out_of_place, ratio_n) for r in disc)
        fits_n = sum(_consistent(r.size_bytes, r.out_of_place, n) for r in disc)
        if fits_ratio > len(disc) / 2 and fits_n < len(disc) / 2:
            raise NcclLogError(
                f"{source}: world size {n} (from {where}) contradicts the rows: busbw/algbw implies {ratio_n} ranks"
            )
    return n, where


def load_nccl_log(path: str, world_size: Optional[int] = None) -> NcclLog:
    """Read and parse a log file (NcclLogError if unreadable or unusable)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        raise NcclLogError(f"{path}: cannot read log: {exc.strerror or exc}") from None
    return parse_nccl_log(text, source=str(path), world_size=world_size)


def check_allreduce(log: NcclLog) -> None:
    """Raise NcclLogError unless `log` is all-reduce output (busbw factor 2(n-1)/n applies)."""
    if log.collective and "all_reduce" not in log.collective:
        raise NcclLogError(f"{log.source}: this is {log.collective} output; only all_reduce_perf logs calibrate an all-reduce")
    if any(r.redop == "none" for r in log.rows):
        raise NcclLogError(f"{log.source}: rows have redop 'none' (not an all-reduce); only all_reduce_perf logs are supported")
    # reduce_perf / broadcast_perf print a root >= 0 (all-reduce prints -1, old logs none); at
    # 2 ranks reduce's busbw = algbw equals all-reduce's 2(n-1)/n = 1, so the bandwidth
    # columns alone would let such a table through
    rooted = [r for r in log.rows if r.root is not None and r.root != -1]
    if rooted:
        raise NcclLogError(f"{log.source}: line {rooted[0].line}: root {rooted[0].root} (an all-reduce prints -1): "
                           "not all_reduce_perf output; only all_reduce_perf logs are supported")
