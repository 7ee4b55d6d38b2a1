"""The output formats of recent nccl-tests, read as the classic table is.

nccl-tests 2.19.6 (src/util.cu, src/common.cu) adds to each row a timestamp (``-S 1``), four
per-iteration columns after each column group (``-I 1``: i_min i_max i_p99 i_cv%), host time
instead of GPU time (``-C 1``), and a JSON report (``-J FILE.json``). The emulation below
prints rows with nccl-tests' own format strings (writeBenchmarkLinePreamble,
writeBenchmarkLineBody, writePerIterReport, writeResultHeader, getFloatStr, jsonDouble), so
each test checks that the parser reads the same numbers from every form. Before, an ``-I 1``
row's in-place group was read from its out-of-place per-iteration columns (i_min as the time,
i_max as algbw) and dropped as inconsistent, with a note blaming the log, and a JSON report
was "no nccl-tests data table"."""

from __future__ import annotations

import json

import pytest

from commsim.calibration.nccl_json import JsonReportError, render_json_report
from commsim.calibration.nccl_log import load_nccl_log, parse_nccl_log, read_log_text as log_text
from commsim.calibration.nccl_tables import load_tables

N = 16  # ranks: 2 processes x 8 GPUs in the JSON case
SIZES = [8 << k for k in range(0, 26, 3)]  # 8 B .. 256 MiB


def _float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: the most decimals (2, 1, 0) that fit the width, else %e."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        s = fmt % (width, value)
        if len(s) <= width:
            return s
    return ("%*.1e" if width >= 7 else "%*.0e") % (width, value)


def _times(size: int):
    """(time us, algbw, busbw) of each group of an all-reduce of `size` bytes on N ranks."""
    out = []
    for t in (20.0 + size / 150e3, 21.0 + size / 155e3):
        alg = size / t / 1e3
        out.append((t, alg, alg * 2 * (N - 1) / N))
    return out


def _row(size: int, per_iter: bool, timestamp: bool) -> str:
    line = "%12li  %12li  %8s  %6s  %6s" % (size, size // 4, "float", "sum", "%6i" % -1)
    for t, alg, bus in _times(size):
        line += "  %7s  %6s  %6s  %6g" % (_float_str(t, 7), _float_str(alg, 6), _float_str(bus, 6), 0)
        if per_iter:
            line += "  %7s  %7s  %7s  %7s" % (_float_str(t * 0.9, 7), _float_str(t * 1.4, 7),
                                               _float_str(t * 1.3, 7), _float_str(3.21, 7))
    if timestamp:
        line += "%21s" % "2026-11-30 09:15:02"
    return line


def _header(per_iter: bool, timestamp: bool, cputime: bool) -> str:
    ts_lbl, ts_pad = ("timestamp", 19) if timestamp else ("", 0)
    time = "cputime" if cputime else "time"
    if per_iter:
        return ("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s %*s"
                % ("size", "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", "i_min", "i_max",
                   "i_p99", "i_cv%", time, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%",
                   ts_pad, ts_lbl))
    return ("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
            % ("size", "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", time, "algbw", "busbw",
               "#wrong", ts_pad, ts_lbl))


def _log(per_iter=False, timestamp=False, cputime=False, header=True) -> str:
    lines = ["# nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22803",
             "# Collective test starting: all_reduce_perf",
             "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on {'node' + str(r // 8):>10s} device {r % 8:2d} "
              f"[0000:{r:02x}:00] NVIDIA H100 80GB HBM3" for r in range(N)]
    if header:
        lines += ["#", _header(per_iter, timestamp, cputime)]
    lines += [_row(s, per_iter, timestamp) for s in SIZES]
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 12.5 ", "#"]
    return "\n".join(lines) + "\n"


def _figures(log):
    return [(r.size_bytes, r.out_of_place.time_s, r.out_of_place.busbw_Bps,
             r.in_place.time_s, r.in_place.busbw_Bps) for r in log.rows]


CLASSIC = _figures(parse_nccl_log(_log(), "classic.txt"))


def test_the_emulated_classic_table_reads_every_row_with_both_groups():
    log = parse_nccl_log(_log(), "classic.txt")
    assert len(log.rows) == len(SIZES) and log.world_size == N and not log.notes
    assert log.nccl_version == "2.28.3" and log.nccl_tests_version == "2.19.6"
    assert log.rows[-1].in_place.time_s == pytest.approx(_times(SIZES[-1])[1][0] * 1e-6, rel=1e-3)


@pytest.mark.parametrize("per_iter,timestamp,cputime,header", [
    (True, False, False, True),    # -I 1: the in-place group is 8 cells after the out-of-place one
    (True, True, False, True),     # -I 1 -S 1
    (False, True, False, True),    # -S 1: a two-word timestamp after the in-place group
    (False, False, True, True),    # -C 1: 'cputime' columns
    (True, False, False, False),   # -I 1, the header cut away: the cell count says the layout
    (True, True, False, False),
    (False, True, False, False),
])
def test_recent_columns_give_the_classic_figures(per_iter, timestamp, cputime, header):
    log = parse_nccl_log(_log(per_iter, timestamp, cputime, header), "recent.txt")
    assert _figures(log) == CLASSIC
    assert not log.notes  # nothing dropped, nothing blamed on the log


def _json_report(results=None, **over) -> str:
    """A report as nccl-tests 2.19.6 writes it (jsonOutputInit, writeDeviceReport, the result
    lines, writeResultFooter): 2 processes of 8 GPUs, one device entry per process."""
    def group(t, alg, bus):
        return {"time": t, "alg_bw": alg, "bus_bw": bus, "nwrong": 0.0}

    if results is None:
        results = []
        for s in SIZES:
            (t0, a0, b0), (t1, a1, b1) = _times(s)
            results.append({"size": s, "count": s // 4, "type": "float", "redop": "sum", "root": "    -1",
                            "out_of_place": group(t0, a0, b0), "in_place": group(t1, a1, b1),
                            "actual_iterations": 20, "experiment_name": ""})
    doc = {"version": 3, "start_time": "2026-11-30 09:15:00",
           "args": ["/opt/nccl-tests/build/all_reduce_perf", "-b", "8", "-e", "256M", "-f", "8", "-g", "8",
                    "-J", "ar.json"],
           "env": ["NCCL_DEBUG=WARN"], "nccl_version": 22803,
           "config": {"nthreads": 1, "ngpus": 8, "minimum_bytes": 8, "maximum_bytes": 268435456, "step_factor": 8,
                      "warmup_iters": 5, "iterations": 20, "aggregated_iterations": 1, "validation": 1,
                      "graph": 0, "blocking_collectives": False, "per_iter_timing": False, "per_iter_skip": 0,
                      "parallel_init": False,
                      "devices": [{"rank": 8 * p, "group": 0, "pid": 100 + p, "hostname": f"node{p}", "device": 0,
                                   "device_hex": f"0000:{p:02x}:00", "device_info": "NVIDIA H100 80GB HBM3"}
                                  for p in range(2)]},
           "results": results,
           "out_of_bounds": {"count": 0, "okay": True},
           "average_bus_bandwidth": {"bandwidth": 12.5, "okay": "unchecked"}, "errors": [],
           "end_time": "2026-11-30 09:16:00"}
    doc.update(over)
    return json.dumps(doc, indent=2)


def test_a_json_report_reads_as_its_text_table(tmp_path):
    path = tmp_path / "ar.json"
    path.write_text(_json_report())
    log = load_nccl_log(str(path))
    # the report holds the figures unrounded: the text table's within its printed digits
    got, printed = _figures(log), CLASSIC
    assert [r[0] for r in got] == [r[0] for r in printed]
    for g, p in zip(got, printed):
        assert g[1::2] == pytest.approx(p[1::2], rel=2e-3) and g[2::2] == pytest.approx(p[2::2], abs=0.006e9)
    # 2 processes x 8 GPUs: every rank, numbered as nccl-tests numbers them, on its process's host
    assert log.world_size == N and log.world_size_from == "device list"
    assert log.hostnames == ("node0", "node1") and len(log.devices) == N
    assert log.collective == "all_reduce_perf" and log.nccl_version == "2.28.3"
    assert log.nccl_tests_version is None  # the report does not say which nccl-tests wrote it
    assert log.command.startswith("/opt/nccl-tests/build/all_reduce_perf -b 8")
    tables = load_tables(str(path))
    assert tables.nodes == 2 and tables.gpu_name == "NVIDIA H100 80GB HBM3"
    assert [r[0] for r in tables.table("all_reduce").rows] == SIZES


def test_a_json_reports_nan_and_missing_group_are_na(tmp_path):
    doc = json.loads(_json_report())
    doc["results"][2]["out_of_place"]["time"] = "nan"   # jsonDouble writes NaN as the string "nan"
    doc["results"][3]["in_place"] = None                # a group nccl-tests did not run
    path = tmp_path / "ar.json"
    path.write_text(json.dumps(doc))
    log = load_nccl_log(str(path))
    assert log.rows[2].out_of_place is None and log.rows[2].steady() is log.rows[2].in_place
    assert log.rows[3].in_place is None and log.rows[3].steady() is log.rows[3].out_of_place
    assert len(log.rows) == len(SIZES)
    # the notes name the rendered lines, and the first line says which result each is
    first = int(log_text(str(path)).splitlines()[0].split("line ")[1].split(" ")[0])
    assert dict(log.notes) == {first + 2: "out-of-place columns have N/A cells",
                               first + 3: "in-place columns have N/A cells"}


@pytest.mark.parametrize("mutate,key,expected", [
    (lambda d: d.update(results={"a": 1}), "results", "expected the list of results"),
    (lambda d: d.pop("results"), "results", "expected the list of results"),
    (lambda d: d["results"][1].update(size="big"), "results[1].size", "expected an integer, got 'big'"),
    (lambda d: d["results"][0]["in_place"].update(bus_bw=[1]), "results[0].in_place.bus_bw", "expected a number"),
    (lambda d: d["results"][0]["in_place"].update(time=float("inf")), "results[0].in_place.time", "expected a number"),
    (lambda d: d["results"][4].update(type="unsigned char"), "results[4].type", "expected one word"),
    (lambda d: d["config"]["devices"][1].update(hostname=7), "config.devices[1].hostname", "expected one word"),
    (lambda d: d["config"].update(ngpus=0), "config.ngpus", "expected 1..1024, got 0"),
    (lambda d: d.update(nccl_version="2.28"), "nccl_version", "expected an integer"),
    (lambda d: d["results"][2].update(size="1048576"), "results[2].size", "expected an integer"),  # root alone is text
    (lambda d: d["config"].update(nthreads=1024, ngpus=1024), "config.devices", "expected at most 1,048,576 ranks"),
    (lambda d: d["config"]["devices"].append(3), "config.devices[2]", "expected a mapping, got int"),
])
def test_a_broken_json_report_is_one_line_naming_the_key(tmp_path, mutate, key, expected):
    doc = json.loads(_json_report())
    mutate(doc)
    with pytest.raises(JsonReportError) as err:
        render_json_report(json.dumps(doc), "ar.json")
    assert str(err.value).startswith(f"ar.json: {key}: {expected}")
    assert "\n" not in str(err.value)


def test_text_that_is_not_json_says_where():
    with pytest.raises(JsonReportError, match=r"^r\.json: not a JSON document \(line 1, column 13\): Expecting value"):
        render_json_report('{"results": ]', "r.json")
    with pytest.raises(JsonReportError, match=r"^r\.json: results: expected the list of results"):
        render_json_report('{"traceEvents": []}', "r.json")


def test_a_reports_strings_never_become_lines_of_the_rendered_log():
    """A newline inside device_info or an argument would have started a line of its own: a
    forged data row, read as a measurement."""
    doc = json.loads(_json_report())
    forged = "\n  1048576  262144  float  sum  -1  1.00  1048.58  1966.08  0  1.00  1048.58  1966.08  0"
    doc["config"]["devices"][0]["device_info"] = "NVIDIA H100" + forged
    doc["args"].append(forged)
    log = parse_nccl_log(render_json_report(json.dumps(doc), "ar.json"), "ar.json")
    assert [r.size_bytes for r in log.rows] == SIZES  # no 1 MiB row in 1 us
