"""nccl-tests' JSON report (``all_reduce_perf -J RESULTS.json``) as the text log it stands for.

nccl-tests writes a JSON report beside its text output since its 2.17 series (src/util.cu,
``jsonOutputInit`` .. ``jsonOutputFinalize``, report ``version`` 3 in 2.19.6): the command line
(``args``), the NCCL library's version code (``nccl_version``), the run's ``config`` with one
``devices`` entry per *process* (the first GPU of each: ``parseRankInfo`` reads only the first
device line a process prints), and per size a ``results`` entry with ``size``, ``count``,
``type``, ``redop``, ``root`` and the ``out_of_place`` / ``in_place`` groups (``time`` or
``cpu_time`` in us, ``alg_bw``, ``bus_bw`` in GB/s, ``nwrong``; a NaN is written as the string
``"nan"``; a group nccl-tests did not run is ``null``).

:func:`render_json_report` turns such a report into the lines nccl-tests prints for the same
run (benchmark name, library version, device list, column header, one row per result), so that
:func:`commsim.calibration.nccl_log.parse_nccl_log` reads and checks it as it reads every text
log: the same bus-factor check of every row, the same world size and the same notes. Its line
numbers are those of the rendered text; its first line says which result each row is.
A process that drove several GPUs (``-t``/``-g``) gets one device line per GPU, numbered as
nccl-tests numbers them (rank = process x GPUs per process + i on device first + i, src/
util.cu ``writeDeviceReport``), with the process's first GPU's name and no bus id.

Pure module: json and the standard library only.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, List, Optional

from commsim.calibration.errors import CalibrationError

# a group's time: GPU time, or the host's with nccl-tests' -C 1 (report_cputime)
_GROUP_TIME_KEYS = ("time", "cpu_time")
# the nccl-tests version a rendered report's version line names: the report does not say it
UNSTATED_TESTS_VERSION = "-"
# most ranks a report's device list may stand for (the scenario loader's world-size limit): each
# is a rendered line
MAX_RANKS = 1_048_576


class JsonReportError(CalibrationError):
    """A JSON report cannot be read (one line naming the file and the key path)."""


# how nccl-tests' jsonOutputInit opens a report: {"version": N, "start_time": ...
_REPORT_HEAD = re.compile(rb'\A\s*\{\s*"version"\s*:\s*\d+\s*,\s*"start_time"\s*:')


def opens_like_a_report(data: bytes) -> bool:
    """Whether `data` opens as nccl-tests' writer opens a JSON report (its first two keys),
    a check on the first bytes alone: a profiler trace of hundreds of MB is not parsed for it."""
    return _REPORT_HEAD.match(data[:256]) is not None


def looks_like_json_report(text: str) -> bool:
    """Whether `text` is a JSON document rather than a text log (its first non-blank
    character opens an object; no nccl-tests text log starts with '{')."""
    return text.lstrip()[:1] == "{"


def _number(value: Any, source: str, key: str, what: str = "a number") -> Optional[float]:
    """A cell: None for nccl-tests' "nan" or null, else a finite number."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "nan"):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise JsonReportError(f"expected {what}, got {value!r}", source, key)
    return float(value)


def _integer(value: Any, source: str, key: str, printed: bool = False) -> int:
    """An integer cell; with `printed`, also the digits nccl-tests writes as a string ("root":
    the printed "    -1")."""
    if isinstance(value, str) and printed and value.strip().lstrip("-").isdigit() and len(value.strip()) <= 18:
        return int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise JsonReportError(f"expected an integer, got {value!r}", source, key)
    return value


def _mapping(value: Any, source: str, key: str) -> dict:
    if not isinstance(value, dict):
        raise JsonReportError(f"expected a mapping, got {type(value).__name__}", source, key)
    return value


def _word(value: Any, source: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value.split()) != 1:
        raise JsonReportError(f"expected one word, got {value!r}", source, key)
    return value.strip()


def _one_line(text: str) -> str:
    """`text` with every run of whitespace (a newline too) one space: a string of the report
    rendered into the text log can never start a line of its own (a row, a header)."""
    return " ".join(text.split())


def _cell(x: Optional[float]) -> str:
    return "N/A" if x is None else f"{x:.6g}"


def _group(entry: dict, name: str, source: str, key: str) -> str:
    """The four cells (time algbw busbw #wrong) of a result's column group."""
    group = entry.get(name)
    if group is None:
        return "N/A N/A N/A N/A"
    if not isinstance(group, dict):
        raise JsonReportError(f"expected a mapping or null, got {type(group).__name__}", source, f"{key}.{name}")
    time_key = next((k for k in _GROUP_TIME_KEYS if k in group), None)
    if time_key is None:
        raise JsonReportError("expected a time (or cpu_time) in us", source, f"{key}.{name}")
    cells = [_number(group.get(time_key), source, f"{key}.{name}.{time_key}"),
             _number(group.get("alg_bw"), source, f"{key}.{name}.alg_bw"),
             _number(group.get("bus_bw"), source, f"{key}.{name}.bus_bw")]
    wrong = _number(group.get("nwrong"), source, f"{key}.{name}.nwrong")
    return " ".join(_cell(c) for c in cells) + " " + ("N/A" if wrong is None else f"{wrong:g}")


def _devices(config: dict, source: str) -> List[str]:
    """The device lines of the run: every process's GPUs, numbered as nccl-tests numbers them."""
    devices = config.get("devices", [])
    if not isinstance(devices, list):
        raise JsonReportError(f"expected a list, got {type(devices).__name__}", source, "config.devices")
    per_process = 1
    for k in ("nthreads", "ngpus"):
        if k in config:
            v = _integer(config[k], source, f"config.{k}")
            if not 1 <= v <= 1024:
                raise JsonReportError(f"expected 1..1024, got {v}", source, f"config.{k}")
            per_process *= v
    if len(devices) * per_process > MAX_RANKS:
        raise JsonReportError(f"expected at most {MAX_RANKS:,} ranks, got {len(devices):,} processes x {per_process:,} "
                              "GPUs each", source, "config.devices")
    lines = []
    for p, d in enumerate(devices):
        key = f"config.devices[{p}]"
        d = _mapping(d, source, key)
        rank = _integer(d.get("rank"), source, f"{key}.rank")
        first = _integer(d.get("device"), source, f"{key}.device")
        host = _word(d.get("hostname"), source, f"{key}.hostname")
        name = d.get("device_info", "")
        name = _one_line(name) if isinstance(name, str) else ""
        bus = d.get("device_hex", "")
        bus = bus.strip() if isinstance(bus, str) and bus.strip() and len(bus.split()) == 1 else "-"
        group, pid = (d.get(k) if isinstance(d.get(k), int) and not isinstance(d.get(k), bool) else 0
                      for k in ("group", "pid"))
        for i in range(per_process):
            lines.append(f"#  Rank {rank + i:2d} Group {group:2d} Pid {pid:6d} on {host} device {first + i:2d} "
                         f"[{bus if i == 0 else '-'}] {name}")
    return lines


def render_json_report(text: str, source: str) -> str:
    """The text log that the nccl-tests JSON report `text` stands for (see the module docstring).
    JsonReportError, naming `source` and the key path, where it is not such a report."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise JsonReportError(f"not a JSON document{where}: {getattr(exc, 'msg', exc)}", source) from None
    if not isinstance(doc, dict):
        raise JsonReportError(f"expected an nccl-tests JSON report (a mapping), got {type(doc).__name__}", source)
    results = doc.get("results")
    if not isinstance(results, list):
        raise JsonReportError("expected the list of results an nccl-tests JSON report (-J FILE.json) holds"
                              + ("" if results is None else f", got {type(results).__name__}"), source, "results")
    config = _mapping(doc.get("config", {}), source, "config")
    head: List[str] = []
    args = doc.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str) and args[0].strip():
        program = os.path.basename(args[0].strip())
        head.append("$ " + " ".join(_one_line(a) for a in args if isinstance(a, str) and a.strip()))
        head.append(f"# Collective test starting: {program}")
    if "nccl_version" in doc:
        code = _integer(doc["nccl_version"], source, "nccl_version")
        if code > 0:  # the report does not say which nccl-tests wrote it: UNSTATED_TESTS_VERSION
            head.append(f"# nccl-tests version {UNSTATED_TESTS_VERSION} nccl-library={code}")
    head += _devices(config, source)
    head.append("#       size         count      type   redop    root     time   algbw   busbw #wrong     "
                "time   algbw   busbw #wrong")
    rows = []
    for i, entry in enumerate(results):
        key = f"results[{i}]"
        entry = _mapping(entry, source, key)
        size = _integer(entry.get("size"), source, f"{key}.size")
        count = _integer(entry.get("count"), source, f"{key}.count")
        dtype = _word(entry.get("type"), source, f"{key}.type")
        redop = _word(entry.get("redop"), source, f"{key}.redop")
        root = _integer(entry.get("root", -1), source, f"{key}.root", printed=True)
        rows.append(f"{size} {count} {dtype} {redop} {root} "
                    f"{_group(entry, 'out_of_place', source, key)} {_group(entry, 'in_place', source, key)}")
    first_row = len(head) + 2  # the note line below, and lines counting from 1
    note = f"# rendered from the nccl-tests JSON report {source}: line {first_row} + i is results[i]"
    return "\n".join([note] + head + rows) + "\n"
