"""Parse real nccl-tests output (``all_reduce_perf`` and friends) into rows.

Real logs are messy: shell prompts and banners, ``NCCL INFO`` / ``NCCL WARN`` lines, device
lists, launcher prefixes (``0: `` from srun -l, ``[1,0]<stdout>:`` from mpirun
--tag-output), the out-of-place and in-place column groups, ``N/A`` cells, lines cut off
mid-way, the ``# Avg bus bandwidth`` footer. This module keeps every complete data row and
says, in :attr:`NcclLog.notes`, which lines it could not use and why.

The world size comes from, in order: the caller; the device list (``#  Rank  7 ...``); the
``nranks N`` of NCCL INFO lines; a ``# NRANKS: N`` line of the file's own header (the
provenance headers in tests/data/nccl-tests/); and last, the busbw/algbw ratio of the rows.
That ratio is the collective's own bus factor as nccl-tests defines it (doc/PERFORMANCE.md,
:func:`commsim.collectives.busbw.busbw_factor`): 2(n-1)/n for all-reduce, (n-1)/n for
all-gather and reduce-scatter, 1 for broadcast and reduce. The collective is the caller's, or
the one the log names (``# Collective test starting: all_gather_perf``, or its command line),
else all-reduce; every row is checked with that factor. When a stated world size contradicts
the ratio the log is rejected.

Parsing takes time linear in the log's length: every pattern below is anchored or scans each
character a bounded number of times (no nested or adjacent unbounded repeats that a regex
engine would retry at every split of a long line), numbers are read only up to
:data:`MAX_DIGITS` digits, and a line longer than :data:`MAX_LINE_CHARS` characters is skipped
with a note: no line nccl-tests or NCCL prints is that long.

Pure module: no numpy needed, no torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from commsim.calibration.errors import CalibrationError
from commsim.calibration.nccl_json import UNSTATED_TESTS_VERSION, looks_like_json_report, render_json_report
from commsim.collectives.busbw import BUSBW_FACTORS, busbw_factor
from commsim.yamlio import read_regular_bytes

# nccl-tests counts GB/s as 1e9 bytes/s (src/common.cu: 1.0E9)
GB = 1.0e9

# Longest line read. nccl-tests' rows and headers are under 200 characters; the longest lines
# of a real log are its command line and NCCL INFO ring/tree lists (a few thousand characters
# at 1,024 ranks), neither of which the parser needs beyond its first line or its start.
MAX_LINE_CHARS = 10_000
# Longest integer read (a size, a count, a rank): 18 digits is past any size or rank count
# and far below the 4,300 digits where Python's int() refuses a string.
MAX_DIGITS = 18

# The out-of-place and in-place column groups time the same collective (in-place saves at most
# one local copy of the buffer), each averaged over the run's iterations. Over the 1,112 rows
# of the shipped logs that have both, they differ by a median 0.7% and by at most 1.5x in 99.5%
# of rows; the rows where out-of-place is more than 2x the in-place time are isolated spikes
# against both neighbouring sizes too (Snellius 2x4 all_reduce at 16 KB: 90.85 us out-of-place,
# 22.59 us in-place, 22-24 us at 8 KB and 32 KB): a stall during that group's iterations, not
# the collective's cost. :meth:`NcclRow.steady` then takes the in-place figure.
TRANSIENT_RATIO = 2.0


def collective_of(name: Optional[str]) -> Optional[str]:
    """The collective of a benchmark name ("all_gather_perf", "all_gather_perf_mpi",
    "all_gather") whose bus factor nccl-tests defines; None for any other name."""
    if not name:
        return None
    base = name[:-len("_mpi")] if name.endswith("_mpi") else name
    base = base[:-len("_perf")] if base.endswith("_perf") else base
    return base if base in BUSBW_FACTORS else None


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

    def steady(self) -> Optional[Timing]:
        """The row's figure: out-of-place, or in-place where out-of-place is unusable or more
        than :data:`TRANSIENT_RATIO` times slower than in-place (a stall); None if neither."""
        oop = self.out_of_place if self.out_of_place is not None and self.out_of_place.complete else None
        ip = self.in_place if self.in_place is not None and self.in_place.complete else None
        if oop is not None and ip is not None and oop.time_s > TRANSIENT_RATIO * ip.time_s:
            return ip
        return oop or ip


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
    bus_kind: str = "all_reduce"  # the collective whose bus factor checked the rows

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
# "#  Rank  0 Group  0 Pid 584419 on  dkh device  0 [0000:14:00] NVIDIA A100-SXM4-80GB": the
# head, then the first "on HOST device N [BUS]" after it (searched from the head's end), then
# the GPU name. The bus id has no blanks, so each try of the search scans a few tokens.
_DEVICE_HEAD = re.compile(r"#\s*Rank\s+(\d{1,9})\b")
_DEVICE_ON = re.compile(r"\bon\s+(\S+)\s+device\s+(\d{1,9})\s+\[([^\]\s]*)\]")
_NRANKS = re.compile(r"\bnranks\s+(\d{1,9})\b")
_INFO_HOST = re.compile(r"^\s*([A-Za-z0-9][\w.\-]*):\d+:\d+\s+\[\d+\]\s+NCCL\s+(?:INFO|WARN)")
_NCCL_VERSION = re.compile(r"NCCL version\s+(\d+\.\d+\.\d+)")
# The provenance line this repository's logs open with ("# source: ...; NCCL 2.21.5-1+cuda12.4;
# ..."; "NCCL 2.18.x from NVHPC 23.9"): the release a run used when the output itself has no
# banner. Read last, after the banner, nccl-tests' nccl-library code and INFO lines.
_SOURCE_NCCL = re.compile(r"^#\s*source:.*?\bNCCL\s+v?(\d{1,3}\.\d{1,3})(\.\d{1,3}(?![\d.]))?")
_TESTS_VERSION = re.compile(r"#\s*nccl-tests version\s+(\S+)(?:.*nccl-library=(\d{1,9})(?!\d))?")
_FILE_NRANKS = re.compile(r"^#\s*NRANKS:\s*(\d{1,9})(?!\d)(.*)$")
_FILE_NODES = re.compile(r"\((?:(\d{1,9})\s+nodes?\b|(single node))", re.IGNORECASE)
_COLLECTIVE = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_WORD = re.compile(r"\w+")
_HEADER = re.compile(r"^#\s*size\s+count\s+type\s+redop\s+(root\s+)?time\b", re.IGNORECASE)
_INT = re.compile(r"^-?\d+$")
# `\d+\.?\d*` would split a long digit run between its two repeats in every way before failing
# (quadratic); with the dot required inside the optional group the run is read once.
_NUM = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def _nccl_version_from_code(code: str) -> str:
    """NCCL_VERSION_CODE -> "x.y.z": major*10000+minor*100+patch since 2.9, major*1000+... before."""
    c = int(code)
    if c >= 20900:
        return f"{c // 10000}.{c // 100 % 100}.{c % 100}"
    return f"{c // 1000}.{c // 100 % 10}.{c % 100}"


def _cell(tok: str) -> Optional[float]:
    if tok.upper() == "N/A":
        return None
    if not _NUM.fullmatch(tok):
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


@dataclass(frozen=True)
class Layout:
    """Where a data row's cells are: whether a ``root`` column follows ``size count type redop``,
    and how many cells after it (and the root) the in-place group starts: 4 (time algbw busbw
    #wrong), 8 in nccl-tests' per-iteration report (``-I 1``, 2.19 and later: i_min i_max i_p99
    i_cv% follow each group's four). A timestamp (``-S 1``) comes last, after both groups."""

    has_root: bool
    in_place_at: int = 4


# a row's cell count after "size count type redop" -> its layout, where no header says it:
# 9 / 8 (root / none, both groups), 5 / 4 (one group), 11 (root, a "YYYY-MM-DD HH:MM:SS"
# timestamp), 17 / 19 (root, per-iteration columns, without / with a timestamp)
_HEADERLESS = {9: Layout(True), 5: Layout(True), 11: Layout(True), 8: Layout(False), 4: Layout(False),
               17: Layout(True, 8), 19: Layout(True, 8)}


def _header_layout(header: str, has_root: bool) -> Layout:
    """The layout a column header names: the in-place group starts at its second ``time`` (or
    ``cputime``, nccl-tests' ``-C 1``) column, counted from its first."""
    times = [i for i, tok in enumerate(header.lstrip("#").split()) if tok.lower() in ("time", "cputime")]
    return Layout(has_root, times[1] - times[0] if len(times) >= 2 and times[1] > times[0] else 4)


def _split_row(toks: List[str], layout: Optional[Layout]):
    """Split a data row's tokens after "size count type redop"; returns (root, rest, layout) or
    None when the row has no layout this parser can tell."""
    rest = toks[4:]
    if layout is None:  # no header seen: the cell count says it (_HEADERLESS)
        layout = _HEADERLESS.get(len(rest))
        if layout is None:
            return None
    if layout.has_root:
        if not rest or not _INT.match(rest[0]) or len(rest[0]) > MAX_DIGITS:
            return None
        return int(rest[0]), rest[1:], layout
    return None, rest, layout


def parse_nccl_log(text: str, source: str = "<log>", world_size: Optional[int] = None,
                   collective: Optional[str] = None) -> NcclLog:
    """Parse nccl-tests output. `collective` (a key of
    :data:`commsim.collectives.busbw.BUSBW_FACTORS`) says whose bus factor the rows follow;
    None: the collective the log names, else all_reduce. Raises NcclLogError when there is no
    data table, when the world size cannot be found or contradicts the rows, or when no row
    follows that collective's bus factor (see module docstring)."""
    if collective is not None and collective not in BUSBW_FACTORS:
        raise NcclLogError(f"collective {collective!r} has no nccl-tests bus factor "
                           f"(expected one of {', '.join(sorted(BUSBW_FACTORS))})", source)
    rows: List[NcclRow] = []
    skipped: List[Tuple[int, str]] = []  # becomes NcclLog.notes
    devices: List[Device] = []
    hosts: List[str] = []
    nranks_info: Optional[int] = None
    file_nranks: Optional[int] = None
    file_nodes: Optional[int] = None
    collective_line = command = nccl_version = tests_version = None
    source_version: Optional[str] = None
    perf_name = None
    avg = None
    layout: Optional[Layout] = None  # from the column header, else from the first complete row
    # the collective of each "# Collective test starting: X_perf" section, per row: a log of
    # several tables (one script running all_reduce_perf then all_gather_perf) keeps one table
    section: Optional[str] = None
    row_sections: List[Optional[str]] = []

    for lineno, raw in enumerate(text.splitlines(), start=1):
        if len(raw) > MAX_LINE_CHARS:
            skipped.append((lineno, f"line of {len(raw)} characters skipped (longer than {MAX_LINE_CHARS}; "
                                    "no nccl-tests line is)"))
            continue
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
            if (device := _device(stripped)) is not None:
                devices.append(device)
            elif (m := _HEADER.match(stripped)):
                layout = _header_layout(stripped, bool(m.group(1)))
            elif source_version is None and (m := _SOURCE_NCCL.match(stripped)):
                source_version = m.group(1) + (m.group(2) or "")
            elif (m := _TESTS_VERSION.match(stripped)):
                tests_version = None if m.group(1) == UNSTATED_TESTS_VERSION else m.group(1)
                if m.group(2):
                    nccl_version = nccl_version or _nccl_version_from_code(m.group(2))
            elif (m := _COLLECTIVE.match(stripped)):
                collective_line = section = m.group(1)
            elif (m := _AVG.match(stripped)):
                try:
                    avg = float(m.group(1))
                except ValueError:
                    skipped.append((lineno, "unreadable average bus bandwidth"))
            continue
        if stripped.startswith("NCCL version") and (m := _NCCL_VERSION.match(stripped)):
            nccl_version = nccl_version or m.group(1)  # a bare banner line some launch scripts print
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
            parsed = _parse_row(lineno, toks, layout, skipped)
            if parsed is not None:
                row, row_layout = parsed
                rows.append(row)
                row_sections.append(section)
                if layout is None:  # the first complete row fixes the layout for cut-off rows
                    layout = row_layout
            continue
        if command is None and (name := _perf_name(stripped)) is not None:
            command = _strip_prompt(stripped)
            perf_name = name

    if not rows:
        raise NcclLogError("no nccl-tests data table found (expected rows like "
                           "'   8   2  float  sum  -1  12.3  0.00  0.00  0 ...')", source)

    rows, collective_line = _one_table(source, rows, row_sections, collective, collective_line, skipped)

    # A log that names no collective follows all-reduce's bus factor, unless its rows say they are
    # no reduction (redop 'none', no root: all_gather_perf): judged by all-reduce's factor, its
    # world size looked contradicted ("busbw/algbw implies 2 ranks") before the caller could say
    # the log is no all-reduce
    unreduced = all(r.redop == "none" and r.root in (None, -1) for r in rows)
    kind = collective or collective_of(collective_line or perf_name) or ("all_gather" if unreduced else "all_reduce")
    n, n_from = _world_size(source, rows, devices, nranks_info, file_nranks, world_size, kind)
    rows = _drop_inconsistent(rows, n, skipped, kind)
    if not rows:
        raise NcclLogError(f"no data row has algbw = size/time and busbw = algbw*{_FACTOR_TEXT.get(kind, kind)} for n={n} "
                           f"({kind})", source)
    host_list = sorted({d.host for d in devices} | set(hosts))
    return NcclLog(
        source=source,
        rows=tuple(rows),
        world_size=n,
        world_size_from=n_from,
        collective=collective_line or perf_name,
        command=command,
        hostnames=tuple(host_list),
        devices=tuple(devices),
        nccl_version=nccl_version or source_version,
        nccl_tests_version=tests_version,
        avg_busbw_GBps=avg,
        nodes=file_nodes,
        notes=tuple(sorted(skipped)),
        bus_kind=kind,
    )


def _one_table(source, rows, row_sections, collective, collective_line, notes):
    """The rows of one collective's table and its benchmark name. A log whose rows lie in the
    sections of several collectives keeps the table of `collective` (NcclLogError when it has
    none); without `collective`, its all_reduce table, else its first, noting the tables left
    out. Each table follows its own bus factor, so their rows cannot be checked as one table
    (the all_reduce rows of all_reduce_perf + all_gather_perf were judged by all_gather's factor)."""
    names = list(dict.fromkeys(row_sections))
    if len(names) < 2:
        return rows, collective_line
    want = collective or "all_reduce"
    keep = next((n for n in names if n is not None and collective_of(n) == want), None)
    if keep is None and collective is None:
        keep = names[0]
    if keep is None:
        listed = ", ".join(n or "(before any 'Collective test starting' line)" for n in names)
        raise NcclLogError(f"holds the tables of several collectives ({listed}) and none of {want}", source)
    first_line = {}
    for r, n in zip(rows, row_sections):
        first_line.setdefault(n, r.line)
    for n in names:
        if n != keep:
            notes.append((first_line[n], f"table of {n or 'an unnamed collective'} skipped: the log's {keep} table is read"))
    return [r for r, n in zip(rows, row_sections) if n == keep], keep or collective_line


def _device(line: str) -> Optional[Device]:
    """The device of a "#  Rank  0 ... on HOST device N [BUS] NAME" line, else None."""
    head = _DEVICE_HEAD.match(line)
    if head is None:
        return None
    on = _DEVICE_ON.search(line, head.end())
    if on is None:
        return None
    return Device(int(head.group(1)), on.group(1), int(on.group(2)), on.group(3), line[on.end():].strip())


def _perf_name(line: str) -> Optional[str]:
    """The benchmark a command line runs ("all_reduce_perf" in "./build/all_reduce_perf -b 8",
    also of "all_reduce_perf_mpi"): the first word ending in _perf (or _perf_mpi) after at least
    one other character; None when there is none."""
    if "_perf" not in line:
        return None
    for word in _WORD.finditer(line):
        w = word.group()
        if w.endswith("_perf_mpi") and len(w) > len("_perf_mpi"):
            return w[: -len("_mpi")]
        if w.endswith("_perf") and len(w) > len("_perf"):
            return w
    return None


def _strip_prompt(line: str) -> str:
    """Drop a shell prompt ("user@host:~/dir# ", "$ ") in front of a command.

    A prompt is the first word up to the first '#' or '$' that follows its last '@' (by at
    least one character, with one before the '@'), or a lone '$', '#' or '>'. Found with string
    searches, not a regex whose two repeats around '@' backtrack over a long word."""
    words = line.split(None, 1)
    if not words:
        return ""
    first = words[0]
    last_mark = max(first.rfind("#"), first.rfind("$"))
    at = first.rfind("@", 1, last_mark - 1) if last_mark >= 3 else -1
    if at != -1:
        end = min(i for i in (first.find("#", at + 2), first.find("$", at + 2)) if i != -1)
        return line[len(line) - len(line.lstrip()) + end + 1:].strip()
    if first in ("$", "#", ">") and len(words) > 1:
        return words[1].strip()
    return line.strip()


def _parse_row(lineno: int, toks: List[str], layout: Optional[Layout], skipped) -> Optional[Tuple[NcclRow, Layout]]:
    """The row of a data line and the layout it was read with; None (with a note) if unusable."""
    if max(len(toks[0]), len(toks[1])) > MAX_DIGITS:
        skipped.append((lineno, f"data row with a size or count of more than {MAX_DIGITS} digits"))
        return None
    if len(toks) < 4:
        skipped.append((lineno, "cut-off data row (fewer than 4 columns)"))
        return None
    split = _split_row(toks, layout)
    if split is None:
        skipped.append((lineno, f"data row with {len(toks)} columns: cannot tell its layout"))
        return None
    root, rest, layout = split
    at = layout.in_place_at
    try:
        oop = _timing(rest[:4])
        ip = _timing(rest[at:at + 4])
    except ValueError as exc:
        skipped.append((lineno, f"data row with a non-numeric cell {exc.args[0]!r}"))
        return None
    if oop is None:
        skipped.append((lineno, "cut-off data row (no complete out-of-place columns)"))
        return None
    if ip is None and rest[at:]:
        skipped.append((lineno, "in-place columns cut off"))
    size = int(toks[0])
    if size <= 0:
        skipped.append((lineno, "data row with size 0"))
        return None
    return NcclRow(lineno, size, int(toks[1]), toks[2], toks[3], root, oop, ip), layout


_FACTOR_TEXT = {"all_reduce": "2(n-1)/n", "all_gather": "(n-1)/n", "reduce_scatter": "(n-1)/n",
                "broadcast": "1", "reduce": "1"}


def _consistent(size: int, t: Optional[Timing], n: int, kind: str = "all_reduce") -> bool:
    """The printed algbw and busbw agree with size/time and `kind`'s bus factor to print
    rounding (0.005 GB/s from 2 decimals, and 1% for the rounding of the time column). A line
    cut in the middle of a number fails this, which is how such cut-off cells are caught."""
    if t is None or not t.complete:
        return False
    alg = size / t.time_s
    bus = alg * busbw_factor(kind, n)
    return abs(alg - t.algbw_Bps) <= 0.006 * GB + 0.01 * alg and abs(bus - t.busbw_Bps) <= 0.006 * GB + 0.01 * bus


def _drop_inconsistent(rows: List[NcclRow], n: int, notes, kind: str = "all_reduce") -> List[NcclRow]:
    """Replace inconsistent column groups by None; drop rows left with none."""
    out = []
    for r in rows:
        oop = r.out_of_place if _consistent(r.size_bytes, r.out_of_place, n, kind) else None
        ip = r.in_place if _consistent(r.size_bytes, r.in_place, n, kind) else None
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


def _ratio_world_size(rows, kind: str = "all_reduce") -> Optional[int]:
    """n from the median busbw/algbw = c(n-1)/n (c = 2 for all-reduce, 1 for all-gather and
    reduce-scatter); None without discriminating rows or for a factor that does not depend
    on n (broadcast, reduce)."""
    c = busbw_factor(kind, 2) * 2  # c(n-1)/n at n = 2 is c/2
    if busbw_factor(kind, 3) == busbw_factor(kind, 2):
        return None
    ratios = sorted(r.out_of_place.busbw_Bps / r.out_of_place.algbw_Bps for r in _discriminating(rows))
    if not ratios:
        return None
    ratio = ratios[len(ratios) // 2]
    if not 0.45 * c < ratio < c:
        return None
    return max(2, round(c / (c - ratio)))


def _world_size(source, rows, devices, nranks_info, file_nranks, given, kind="all_reduce") -> Tuple[int, str]:
    ratio_n = _ratio_world_size(rows, kind)
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
        raise NcclLogError("cannot determine the world size (no device list, no nranks, no NRANKS header); "
                           "pass it explicitly", source)
    if n < 2:
        raise NcclLogError(f"world size {n} (from {where}): a collective needs >= 2 ranks", source)
    if ratio_n is not None and ratio_n != n:
        disc = _discriminating(rows)
        fits_ratio = sum(_consistent(r.size_bytes, r.out_of_place, ratio_n, kind) for r in disc)
        fits_n = sum(_consistent(r.size_bytes, r.out_of_place, n, kind) for r in disc)
        if fits_ratio > len(disc) / 2 and fits_n < len(disc) / 2:
            raise NcclLogError(
                f"world size {n} (from {where}) contradicts the rows: busbw/algbw implies {ratio_n} ranks", source
            )
    return n, where


# Largest log read. An NCCL_DEBUG=INFO log of 1,024 ranks is some 100 INFO lines per rank of at
# most a few hundred characters: tens of MB; the shipped logs are at most 50 kB.
MAX_LOG_BYTES = 64 * 1024 * 1024


def read_log_text(path: str) -> str:
    """The text of the log file at `path` (undecodable bytes replaced; an nccl-tests JSON
    report rendered as its text log, :mod:`commsim.calibration.nccl_json`), refused with an
    NcclLogError unless it is a regular file of at most :data:`MAX_LOG_BYTES`: reading
    /dev/zero never ended (it filled memory until the process was killed) and a FIFO blocked
    for a writer."""
    source = str(path)
    try:
        raw = read_regular_bytes(
            path, MAX_LOG_BYTES, "an nccl-tests log", lambda message: NcclLogError(message, source),
            lambda size: NcclLogError(f"is more than {MAX_LOG_BYTES:,} bytes, the limit for an nccl-tests log", source))
    except NcclLogError:  # a ValueError too: not the NUL case below
        raise
    except OSError as exc:
        raise NcclLogError(f"cannot read log: {exc.strerror or exc}", source) from None
    except ValueError:  # a path with a NUL character
        raise NcclLogError("cannot read log: the path contains a NUL character", source) from None
    text = raw.decode("utf-8-sig", errors="replace")  # a BOM (Windows editors) dropped
    # nccl-tests' JSON report (-J FILE.json) is read as the text log it stands for
    return render_json_report(text, source) if looks_like_json_report(text) else text


def load_nccl_log(path: str, world_size: Optional[int] = None, collective: Optional[str] = None) -> NcclLog:
    """Read (:func:`read_log_text`) and parse a log file (NcclLogError if unreadable or
    unusable); see :func:`parse_nccl_log` for `collective`."""
    text = read_log_text(path)
    return parse_nccl_log(text, source=str(path), world_size=world_size, collective=collective)


def check_allreduce(log: NcclLog) -> None:
    """Raise NcclLogError unless `log` is all-reduce output (busbw factor 2(n-1)/n applies)."""
    if log.collective and "all_reduce" not in log.collective:
        raise NcclLogError(f"this is {log.collective} output; only all_reduce_perf logs calibrate an all-reduce",
                           log.source)
    if any(r.redop == "none" for r in log.rows):
        raise NcclLogError("rows have redop 'none' (not an all-reduce); only all_reduce_perf logs are supported",
                           log.source)
    # reduce_perf / broadcast_perf print a root >= 0 (all-reduce prints -1, old logs none); at
    # 2 ranks reduce's busbw = algbw equals all-reduce's 2(n-1)/n = 1, so the bandwidth
    # columns alone would let such a table through
    rooted = [r for r in log.rows if r.root is not None and r.root != -1]
    if rooted:
        raise NcclLogError(f"root {rooted[0].root} (an all-reduce prints -1): not all_reduce_perf output; "
                           "only all_reduce_perf logs are supported", log.source, f"line {rooted[0].line}")
