"""`commsim collective SCENARIO --algorithm ...`: algorithm tables on a scenario's cluster."""

import json

import pytest

from commsim.sim.links import scenario_fabric
from commsim.cli.main import run_cli
from commsim.collectives import uniform_time
from commsim.scenario.loader import load_scenario

SCENARIO = "scenarios/dgx_h100_scaling.yaml"
LOG = "tests/data/nccl-tests/H100-AWS-p5-EFA-2nodes_16ranks_awsome-distributed-training.txt"


def test_all_algorithms_side_by_side_with_the_fastest_marked(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert run_cli(["collective", SCENARIO, "--algorithm", "all", "--sizes", "1K:64M:8", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tree" in text and "hierarchical" in text and "*" in text
    rows = json.loads(out.read_text())
    fabric = scenario_fabric(load_scenario(SCENARIO))
    for size in {r["size_bytes"] for r in rows}:
        group = [r for r in rows if r["size_bytes"] == size]
        assert sum(r["fastest"] for r in group) >= 1
        for r in group:
            assert r["time_us"] == pytest.approx(uniform_time(r["algorithm"], fabric, size) * 1e6, rel=1e-12)
        fastest = min(r["time_us"] for r in group if r["algorithm"] not in ("reduce_scatter", "all_gather"))
        assert all(r["time_us"] == fastest for r in group if r["fastest"])


def test_one_algorithm_prints_nccl_tests_columns_and_resizes_the_world(capsys):
    assert run_cli(["collective", SCENARIO, "--algorithm", "tree", "--ranks", "256", "--sizes", "1M:4M"]) == 0
    text = capsys.readouterr().out
    assert "256 ranks (32 nodes x 8)" in text
    assert "size         count      type   redop    root     time   algbw   busbw" in text


def test_calibration_replaces_the_nominal_links(tmp_path, capsys):
    cal = tmp_path / "h100.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", LOG, "-o", str(cal)]) == 0
    nominal, calibrated = tmp_path / "n.json", tmp_path / "c.json"
    args = ["collective", SCENARIO, "--ranks", "16", "--algorithm", "ring", "--sizes", "1G:1G"]
    assert run_cli(args + ["--json", str(nominal)]) == 0
    assert run_cli(args + ["--calibration", str(cal), "--json", str(calibrated)]) == 0
    measured_busbw_1g = 437.0  # the log's out-of-place busbw at 1 GiB (GB/s)
    got = json.loads(calibrated.read_text())[0]["busbw_GBps"]
    assert got == pytest.approx(measured_busbw_1g, rel=0.10)
    assert json.loads(nominal.read_text())[0]["busbw_GBps"] != pytest.approx(got, rel=0.01)


@pytest.mark.parametrize("args, needle", [
    (["collective", "--algorithm", "tree", "--ranks", "8"], "SCENARIO"),
    (["collective", SCENARIO, "--algorithm", "trees"], "--algorithm"),
    (["collective", SCENARIO, "--ranks", "12"], "multiple"),
    (["collective", SCENARIO, "--algorithm", "hierarchical", "--model", "nccl-2.19"], "covers algorithms"),
    (["collective"], "--calibration"),
])
def test_bad_requests_exit_2(args, needle, capsys):
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


@pytest.mark.parametrize("command", [
    ["collective", SCENARIO, "--algorithm", "ring,tree", "--sizes", "1K:1M:8"],
    ["collective", "--system", "dgx-h100", "--nodes", "2", "--sizes", "1K:1M:8"],
    ["algorithms", SCENARIO, "--nodes", "1,2", "--steps", "2"],
])
@pytest.mark.parametrize("flag", ["-q", "--quiet"])
def test_quiet_prints_nothing_but_still_writes_the_json(tmp_path, capsys, command, flag):
    loud, quiet = tmp_path / "loud.json", tmp_path / "quiet.json"
    assert run_cli([*command, "--json", str(loud)]) == 0
    assert capsys.readouterr().out.strip()  # the table, without the flag
    assert run_cli([*command, flag, "--json", str(quiet)]) == 0
    got = capsys.readouterr()
    assert (got.out, got.err) == ("", "")
    assert quiet.read_bytes() == loud.read_bytes()
    # --json - with --quiet: stdout holds the JSON alone (no table on stderr either)
    assert run_cli([*command, flag, "--json", "-"]) == 0
    got = capsys.readouterr()
    assert got.out.encode() == loud.read_bytes() and got.err == ""


@pytest.mark.parametrize("command,written", [("collective", "--json and --csv are"), ("algorithms", "--json and --csv are")])
def test_quiet_is_in_the_help(capsys, command, written):
    assert run_cli([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # click wraps the help at the terminal's width
    assert f"-q, --quiet Print nothing but errors ({written} still written)." in text


@pytest.mark.parametrize("mode", [
    [SCENARIO, "--algorithm", "ring,tree", "--sizes", "1M:4M"],
    ["--system", "dgx-h100", "--nodes", "4", "--sizes", "64K:64M:8"],
    ["--calibration", "{cal}", "--ranks", "16", "--sizes", "1M:16M"],
])
def test_csv_holds_the_json_rows_in_every_mode(tmp_path, capsys, mode):
    """A table for a spreadsheet: the same rows as --json, its fields as columns."""
    import csv

    cal = tmp_path / "c.yaml"
    if "{cal}" in mode:
        assert run_cli(["calibrate", "--from-nccl-tests", LOG, "-q", "-o", str(cal)]) == 0
    mode = [str(cal) if a == "{cal}" else a for a in mode]
    js, cs = tmp_path / "rows.json", tmp_path / "rows.csv"
    assert run_cli(["collective", *mode, "-q", "--json", str(js), "--csv", str(cs)]) == 0
    rows = json.loads(js.read_text())
    with open(cs, newline="") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == list(rows[0]) and len(table) == len(rows)

    def as_json(v):  # what the JSON holds for a CSV cell
        return None if v == "" else {"true": True, "false": False}.get(v, v)

    for row, line in zip(rows, table):
        for key, value in row.items():
            cell = as_json(line[key])
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert float(cell) == value  # full precision: repr of each float
            else:
                assert cell == (value if value != "" else None)
    capsys.readouterr()
    assert run_cli(["collective", *mode, "--csv", "-"]) == 0
    assert capsys.readouterr().out == cs.read_text()  # '-': the rows on stdout, the table on stderr
