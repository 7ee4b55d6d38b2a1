"""A sweep's table as plot data: numeric order of swept values, labels that name their key,
the stacked parts, the scaling knee and the slowdown grids."""

from __future__ import annotations

import errno
import json
import os
import threading

import numpy as np
import pytest
from hypothesis import given, strategies as st

from commsim.analysis.sweep_table import (MAX_JSON_BYTES, ResultsError, SweepTable, breakdown_by_gpus, breakdown_by_key,
                                          key_value_label, knee, natural_key, numeric_order, scaling_panels,
                                          read_json_document, slowdown_grids, value_text)
from commsim.errors import InputError


def row(world, key_values, compute=0.31, comm=0.1, strag=0.02, slowdown=1.05):
    step = compute + comm + strag
    return {"world_size": world, "step_time_s.mean": step, "baseline_step_time_s": compute + comm,
            "compute_time_s": compute, "exposed_comm_s": comm, "straggler_cost_s": strag,
            "scaling_efficiency": compute / step, "slowdown": slowdown, **key_values}


def test_sizes_rates_and_numbers_are_ordered_by_value_not_text():
    assert numeric_order(["100 MB", "1 MB", "25 MiB"]) == ["1 MB", "25 MiB", "100 MB"]
    assert numeric_order(["800 Gbps", "25 Gbps", "12.5 GB/s"]) == ["25 Gbps", "12.5 GB/s", "800 Gbps"]
    assert numeric_order([0.1, 0.02, 0]) == [0, 0.02, 0.1]
    assert numeric_order(["5 us", "1 ms", "20 us"]) == ["5 us", "20 us", "1 ms"]
    # no common kind (a size and a rate), or not quantities at all: the order given
    assert numeric_order(["1 MB", "5 Gbps"]) == ["1 MB", "5 Gbps"]
    flows = [[{"kind": "jitter", "cv": 0.1}], []]
    assert numeric_order(flows) == flows


@given(st.lists(st.integers(1, 10**6), min_size=1, max_size=8, unique=True))
def test_numeric_order_of_sizes_is_the_order_of_their_bytes(kb):
    values = [f"{k} kB" for k in kb]
    assert numeric_order(values) == [f"{k} kB" for k in sorted(kb)]


def test_case_names_sort_by_their_quantities():
    names = ["bucket_100MB_slow", "bucket_1MB", "bucket_25MB", "bucket_100MB", "bucket_1MB_slow", "bucket_1GB"]
    assert sorted(names, key=natural_key) == ["bucket_1MB", "bucket_1MB_slow", "bucket_25MB", "bucket_100MB",
                                              "bucket_100MB_slow", "bucket_1GB"]
    assert sorted(["run10", "run9", "run1"], key=natural_key) == ["run1", "run9", "run10"]


def test_groups_and_bars_follow_the_numeric_order_whatever_the_grid_order():
    grid = {"ddp.bucket_cap": ["100 MB", "1 MB", "4 MB"]}
    rows = [row(8, {"ddp.bucket_cap": v}, comm=c) for v, c in zip(grid["ddp.bucket_cap"], (0.01, 0.3, 0.1))]
    table = SweepTable({"grid": grid, "rows": rows}, "results.json")
    data = breakdown_by_key(table, "ddp.bucket_cap", table.rows)
    assert data.labels == ("1 MB", "4 MB", "100 MB")
    assert list(data.exposed_comm) == [0.3, 0.1, 0.01]


def test_labels_name_their_key():
    assert key_value_label(["compute.jitter"], [0.5]) == "compute.jitter = 0.5"
    assert key_value_label(["cluster.inter_node.bandwidth", "stragglers[0].cv"], ["400 Gbps", 0.05]) == \
        "inter_node.bandwidth = 400 Gbps, stragglers[0].cv = 0.05"
    assert value_text([]) == "none" and value_text({"kind": "jitter", "cv": 0.05}) == "jitter cv=0.05"


def heatmap_table():
    grid = {"cluster.nodes": [1, 2], "cluster.inter_node.bandwidth": ["800 Gbps", "400 Gbps"],
            "stragglers[0].cv": [0.1, 0.0]}
    rows = []
    for nodes in grid["cluster.nodes"]:
        for bw in grid["cluster.inter_node.bandwidth"]:
            for cv in grid["stragglers[0].cv"]:
                rows.append(row(8 * nodes, {"cluster.nodes": nodes, "cluster.inter_node.bandwidth": bw,
                                            "stragglers[0].cv": cv}, slowdown=1 + cv * nodes))
    return SweepTable({"grid": grid, "rows": rows}, "results.json")


def test_slowdown_grids_titles_name_the_key_and_rows_ascend():
    grids = slowdown_grids(heatmap_table(), "stragglers[0].cv")
    assert [g.title for g in grids] == ["inter_node.bandwidth = 400 Gbps", "inter_node.bandwidth = 800 Gbps"]
    g = grids[0]
    assert g.severities == ("0", "0.1") and g.gpus == (8, 16)
    assert g.slowdown.tolist() == [[1.0, 1.0], [1.1, 1.2]]


def test_knee_is_the_first_count_below_threshold():
    assert knee([8, 16, 32, 64], [0.99, 0.9, 0.84, 0.7], 0.85) == 32
    assert knee([64, 8, 32, 16], [0.7, 0.99, 0.84, 0.9], 0.85) == 32
    assert knee([8, 16], [0.99, 0.9], 0.85) is None


def test_scaling_panels_one_per_first_key_lines_per_rest():
    table = heatmap_table()
    panels = scaling_panels(table, 0.85)
    assert [p.title for p in panels] == ["inter_node.bandwidth = 400 Gbps", "inter_node.bandwidth = 800 Gbps"]
    assert panels[0].line_keys == ("stragglers[0].cv",)
    assert [line.label for line in panels[0].lines] == ["0", "0.1"]
    line = panels[0].lines[0]
    assert line.gpus == (8, 16) and line.knee == 8  # 0.31/0.43 = 72% < 85% from the start
    assert line.knee_text(0.85) == "below 85% from 8 GPUs"


def test_breakdown_clips_negative_parts_and_orders_gpu_counts():
    rows = [row(32, {}, comm=0.2, strag=-1e-6), row(8, {}, comm=-1e-9, strag=0.01)]
    data = breakdown_by_gpus(rows)
    assert data.labels == ("8", "32")
    assert data.exposed_comm.tolist() == [0.0, 0.2] and data.straggler.tolist() == [0.01, 0.0]
    assert data.top == pytest.approx(np.array([0.32, 0.51]))


def test_foreign_results_are_one_line_input_errors(tmp_path):
    bad = tmp_path / "results.json"
    bad.write_text(json.dumps({"rows": [{"point": 0}], "grid": {"cluster.nodes": [1]}}))
    with pytest.raises(ResultsError, match=r"rows\[0\]: .*lacks world_size") as info:
        SweepTable.load(bad)
    assert isinstance(info.value, InputError) and str(bad) in str(info.value)
    bad.write_text("{")
    with pytest.raises(ResultsError, match="invalid JSON"):
        SweepTable.load(bad)
    bad.write_text("[" * 100_000)  # json's recursive decoder raised RecursionError (a traceback)
    with pytest.raises(ResultsError, match=r"results\.json: expected the results\.json of commsim sweep, "
                                           r"got invalid JSON \(nested too deeply\)"):
        SweepTable.load(bad)
    with pytest.raises(ResultsError, match="no finished points"):
        SweepTable({"grid": {}, "rows": []}, "x.json")
    with pytest.raises(ResultsError, match="grid"):
        SweepTable({"grid": {"a": 1}, "rows": [row(8, {})]}, "x.json")


RESULTS = "the results.json of commsim sweep"


def test_a_device_is_refused_before_it_is_read():
    # /dev/null stands for /dev/zero (which was read until MemoryError): the same kind of file,
    # and without the check it reads as "invalid JSON" rather than hanging the test.
    with pytest.raises(ResultsError) as info:
        read_json_document("/dev/null", RESULTS)
    assert str(info.value) == f"/dev/null: is a character device, expected {RESULTS} (a regular file)"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this platform")
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    done = threading.Event()

    def writer():
        # Feeds "{}" to any reader that opens the FIFO, so that a reader that should not
        # have opened it gets a document instead of blocking the test for ever.
        while not done.is_set():
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
                done.wait(0.01)
                continue
            os.write(fd, b"{}")
            os.close(fd)
            return

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        with pytest.raises(ResultsError) as info:
            read_json_document(fifo, RESULTS)
    finally:
        done.set()
        thread.join()
    assert str(info.value) == f"{fifo}: is a named pipe (FIFO), expected {RESULTS} (a regular file)"


def test_a_file_over_64_mib_is_refused_unread(tmp_path):
    big = tmp_path / "results.json"
    with open(big, "wb") as f:  # sparse: no 64 MiB written to the disk
        f.truncate(MAX_JSON_BYTES + 1)
    with pytest.raises(ResultsError) as info:
        SweepTable.load(big)
    assert str(info.value) == (f"{big}: is 67,108,865 bytes, more than the 67,108,864-byte limit for {RESULTS}")
    exact = tmp_path / "exact.json"
    exact.write_bytes(b"{}" + b" " * (MAX_JSON_BYTES - 2))  # the limit itself is read
    assert read_json_document(exact, RESULTS) == {}


def test_a_directory_is_named_as_one(tmp_path):
    with pytest.raises(ResultsError, match=f"is a directory, expected {RESULTS}$"):
        read_json_document(tmp_path, RESULTS)


@pytest.mark.parametrize("column, value, expected", [
    ("world_size", "abc", r"rows\[0\]\.world_size: expected a whole number of GPUs in \[1, 1,048,576\], got 'abc'"),
    ("world_size", None, r"rows\[0\]\.world_size: .*got null"),
    ("world_size", float("nan"), r"rows\[0\]\.world_size: .*got nan"),
    ("world_size", 2**70, r"rows\[0\]\.world_size: .*got 1180591620717411303424"),
    ("world_size", True, r"rows\[0\]\.world_size: .*got true \(a boolean\)"),
    ("scaling_efficiency", "abc", r"rows\[0\]\.scaling_efficiency: expected a finite number \(or NaN\), got 'abc'"),
    ("scaling_efficiency", [], r"rows\[0\]\.scaling_efficiency: .*got \[\] \(a list\)"),
    ("compute_time_s", float("inf"), r"rows\[0\]\.compute_time_s: .*got inf"),
    ("step_time_s.mean", 10**400, r"rows\[0\]\.step_time_s\.mean: .*got 1000"),
    ("slowdown", None, r"rows\[0\]\.slowdown: .*got null"),
    ("exposed_comm_s", 1e308, r"rows\[0\]: expected compute_time_s \+ exposed_comm_s \+ straggler_cost_s"),
])
def test_a_hand_edited_row_that_is_no_number_is_named(tmp_path, column, value, expected):
    # `commsim plot DIR` on these ended in a traceback: int('abc') / float(None) (ValueError,
    # TypeError), numpy's log2 of a 2**70 object array, matplotlib's "Axis limits cannot be NaN or Inf"
    bad = row(8, {"cluster.nodes": 1}, compute=1e308 if column == "exposed_comm_s" else 0.31)
    bad[column] = value
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"grid": {"cluster.nodes": [1, 2]}, "rows": [bad, row(16, {"cluster.nodes": 2})]}))
    with pytest.raises(ResultsError, match=f"^{results}: {expected}") as info:
        SweepTable.load(results)
    assert isinstance(info.value, InputError) and "\n" not in str(info.value)


def test_a_nan_figure_and_a_whole_float_gpu_count_are_read():
    rows = [row(8.0, {"cluster.nodes": 1}, slowdown=float("nan")), row(16, {"cluster.nodes": 2})]
    table = SweepTable({"grid": {"cluster.nodes": [1, 2]}, "rows": rows}, "results.json")
    assert table.gpu_counts() == [8, 16]


@pytest.mark.parametrize("edit, expected", [
    (lambda rows: rows[0].update({"stragglers[0].cv": 0.5}),
     r"rows\[0\]\.stragglers\[0\]\.cv: expected one of the grid's values of stragglers\[0\]\.cv \(0\.1, 0\), got 0\.5"),
    (lambda rows: rows[1].pop("stragglers[0].cv"), r"rows\[1\]\.stragglers\[0\]\.cv: .*got none"),
    (lambda rows: rows[2].update({"stragglers[0].cv": {"a": 1}}), r"rows\[2\]\.stragglers\[0\]\.cv: .*\(a mapping\)"),
    (lambda rows: [r.pop("slowdown") for r in rows],
     r"rows\[0\]: expected a slowdown column .*stragglers\[0\]\.cv is swept.*lacks it"),
])
def test_a_row_off_the_grid_is_named(tmp_path, edit, expected):
    # the heatmap looked each row's severity up among the grid's (StopIteration) and read its
    # slowdown (KeyError); a grid key no row holds divided by zero panels (ZeroDivisionError)
    doc = {"grid": heatmap_table().grid, "rows": heatmap_table().rows}
    edit(doc["rows"])
    results = tmp_path / "results.json"
    results.write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match=f"^{results}: {expected}"):
        SweepTable.load(results)


def test_a_grid_key_no_row_holds_is_named():
    table = heatmap_table()
    with pytest.raises(ResultsError, match=r"rows\[0\]\.ddp\.bucket_cap: expected one of the grid's values of "
                                           r"ddp\.bucket_cap \(1 MB, 4 MB\), got none"):
        SweepTable({"grid": {**table.grid, "ddp.bucket_cap": ["1 MB", "4 MB"]}, "rows": table.rows}, "results.json")
