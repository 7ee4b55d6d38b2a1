"""`commsim calibrate --from-nccl-tests` and `commsim collective --calibration`, end to end."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from commsim import calibration as calib
from commsim.benchsizes import parse_bench_size, parse_size_range
from commsim.cli.main import main as cli
from commsim.calibration.nccl_log import load_nccl_log

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
LOGS = sorted(DATA.glob("*.txt"))
# The GH200 log is the deliberately misconfigured run (NCCL fell back to sockets): its busbw
# jumps up and down with size (3.98 GB/s at 2 MiB, 3.38 at 32 MiB, 5.53 at 64 MiB), which no
# smooth model follows. It is kept as a robustness case and excluded from the model-error target.
NOISY = {"GH200-Alps-2nodes-x4-NoOFIplugin-socket_8ranks_cscs-docs-nccl.txt"}



def run(*args, ok=True):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, result.output + str(result.exception)
    return result


def test_size_parsing():
    assert parse_bench_size("8") == 8 and parse_bench_size("1G") == 2**30 and parse_bench_size("64k") == 65536
    assert parse_size_range("8:64") == [8, 16, 32, 64]
    assert parse_size_range("1K:1M:4") == [1024, 4096, 16384, 65536, 262144, 1048576]
    assert len(parse_size_range("8:1G")) == 28
    assert parse_size_range("8") == [8]  # one size alone, as nccl-tests' -b 8 -e 8
    for bad in ("8:", "64:8", "8:64:1", "x:1G", "1:2:3:4"):
        with pytest.raises(ValueError):
            parse_size_range(bad)


def fit_from(log_path, tmp_path):
    out = tmp_path / "cal.yaml"
    run("calibrate", "--from-nccl-tests", log_path, "-o", out)
    return out, calib.load_calibration(out)


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name.split("_")[0])
def test_calibration_reproduces_its_log(path, tmp_path):
    """Target (issue 3, section 8): a calibration fitted from each log reproduces that log's busbw
    for sizes >= 1 MB with median error <= 5%, through the predicted nccl-tests table."""
    cal_path, cal = fit_from(path, tmp_path)
    log = load_nccl_log(str(path))
    n = log.world_size
    measured = {r.size_bytes: r.out_of_place.busbw_Bps / 1e9 for r in log.rows if r.size_bytes >= 2**20}
    lo, hi = min(measured), max(measured)
    js = tmp_path / "pred.json"
    run("collective", "--calibration", cal_path, "--ranks", n, "--sizes", f"{lo}:{hi}", "--json", js)
    rows = json.loads(js.read_text())
    assert [r["size_bytes"] for r in rows] == sorted(measured)
    errs = [abs(r["busbw_GBps"] / measured[r["size_bytes"]] - 1) * 100 for r in rows]
    assert np.median(errs) <= 5.0
    assert all(r["source"] == "table" for r in rows)


def leave_one_out_errors(link, n):
    """busbw error (%) at each interior size >= 1 MiB predicted from the table without that row."""
    rows = link.rows_for(n)
    errs = []
    for i, m in enumerate(rows):
        if m.size_bytes < 2**20 or i in (0, len(rows) - 1):
            continue
        bw = calib.interpolate_busbw(rows[:i] + rows[i + 1:], m.size_bytes)
        errs.append(abs(bw / m.busbw - 1) * 100)
    return errs


@pytest.mark.parametrize("path", [p for p in LOGS if p.name not in NOISY], ids=lambda p: p.name.split("_")[0])
def test_model_and_interpolation_errors_on_clean_logs(path, tmp_path):
    """Not by construction: the size-range alpha-beta model (used off the table, e.g. for other
    world sizes) and the table interpolation between measured sizes, both >= 1 MiB."""
    _, cal = fit_from(path, tmp_path)
    link = cal.level()
    assert link.fit_error.points >= 8
    assert link.fit_error.median_pct <= 5.0
    assert np.median(leave_one_out_errors(link, cal.provenance.world_size)) <= 6.0


def test_noisy_log_reports_its_large_error(tmp_path):
    _, cal = fit_from(DATA / next(iter(NOISY)), tmp_path)
    assert cal.level().fit_error.median_pct > 5.0  # recorded honestly in the file


def test_calibrate_output_and_provenance(tmp_path):
    path = DATA / "A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt"
    out = tmp_path / "cal.yaml"
    result = run("calibrate", "--from-nccl-tests", path, "-o", out)
    assert "n = 8 (from device list), level intra_node" in result.output
    assert "intra_node: alpha = " in result.output
    cal = calib.load_calibration(out)
    p = cal.provenance
    assert (p.backend, p.world_size, p.hostnames, p.nccl_version) == ("nccl-tests", 8, ("dkh",), "2.19.3")
    assert p.sources[0].command == "./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8"
    assert len(p.sources[0].sha256) == 64 and p.date.endswith("Z")


def test_two_logs_two_levels(tmp_path):
    out = tmp_path / "cal.yaml"
    logs = [DATA / "A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt",
            DATA / "GH200-Alps-2nodes-x4-NoOFIplugin-socket_8ranks_cscs-docs-nccl.txt"]
    # two systems (A100, GH200): refused unless said to be one
    r = run("calibrate", "--from-nccl-tests", *logs, "-o", out, ok=False)
    assert r.exit_code == 2 and "come from different systems" in r.output and not out.exists()
    run("calibrate", "--from-nccl-tests", *logs, "--same-system", "-o", out)
    cal = calib.load_calibration(out)
    assert cal.level_names == ("intra_node", "inter_node")
    # the default level of a two-level calibration is the slower, inter-node one
    slow = calib.predict_allreduce_time(cal, 2**26, 8)
    fast = calib.predict_allreduce_time(cal, 2**26, 8, "intra_node")
    assert slow > 10 * fast


def test_flat_and_hosted_logs_need_a_level(tmp_path):
    # the H100 excerpt without the file's own "#" header: no host, no node count -> flat
    bare = tmp_path / "h100_bare.txt"
    text = (DATA / "H100-AWS-p5-EFA-2nodes_16ranks_awsome-distributed-training.txt").read_text()
    bare.write_text("\n".join(line for line in text.splitlines() if not line.startswith("# ")))
    args = ["calibrate", "--from-nccl-tests", DATA / "A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt", bare,
            "-o", tmp_path / "c.yaml"]
    r = run(*args, ok=False)
    assert r.exit_code == 2 and "pass --level" in r.output
    run(*args[:-2], "--level", "inter_node", "-o", tmp_path / "c.yaml")
    cal = calib.load_calibration(tmp_path / "c.yaml")
    assert sorted({m.world_size for m in cal.level().table}) == [8, 16]


def test_node_count_from_the_file_header(tmp_path):
    r = run("calibrate", "--from-nccl-tests", DATA / "H100-AWS-p5-EFA-2nodes_16ranks_awsome-distributed-training.txt",
            "-o", tmp_path / "c.yaml")
    assert "level inter_node" in r.output


def test_collective_table_format(tmp_path):
    cal_path, cal = fit_from(DATA / "RTX2080Ti-PCIe3-noP2P-1node_2ranks_anthony-hoo-autodl.txt", tmp_path)
    r = run("collective", "--calibration", cal_path, "--ranks", 2, "--sizes", "8:2G")
    lines = r.output.splitlines()
    header = next(line for line in lines if "size" in line and "count" in line)
    assert header.split()[1:] == ["size", "count", "type", "redop", "root", "time", "algbw", "busbw"]
    data = [line.split() for line in lines if not line.startswith("#")]
    assert len(data) == 29
    # measured row reproduced: 1073741824 B took 268588 us in the log
    row = next(d for d in data if d[0] == "1073741824")
    assert row[1:5] == ["268435456", "float", "sum", "-1"] and row[5] == "268588" and row[7] == "4.00"
    # 2 GiB is beyond the table: the model continues the last range
    last = data[-1]
    assert last[0] == "2147483648" and 3.9 < float(last[7]) < 4.1
    assert "28 of 29 sizes from the measured table" in r.output


@pytest.mark.parametrize(
    "args,msg",
    [
        (["calibrate", "-o", "x.yaml"], "either --from-nccl-tests"),
        (["calibrate", "--from-nccl-tests", "-o", "x.yaml"], "no nccl-tests log given"),
        (["calibrate", "--from-nccl-tests", "missing.txt", "-o", "x.yaml"], "cannot read log"),
        (["collective", "--calibration", "missing.yaml", "--ranks", "8"], "cannot read calibration file"),
    ],
)
def test_errors_are_one_line_exit_2(args, msg, tmp_path):
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2 and msg in r.output
    if "error:" in r.output:
        assert r.output.count("\n") == 1 and "Traceback" not in r.output


def test_log_without_table_is_rejected(tmp_path):
    bad = tmp_path / "empty.log"
    bad.write_text("# nThread 1 nGpus 8\nNCCL WARN could not connect\n")
    r = run("calibrate", "--from-nccl-tests", bad, "-o", tmp_path / "c.yaml", ok=False)
    assert r.exit_code == 2 and "no nccl-tests data table found" in r.output
    assert not (tmp_path / "c.yaml").exists()


def test_cli_does_not_import_torch():
    code = "import commsim.cli.main, sys; print('torch' in sys.modules, 'validate' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_nccl_table_header_is_all_reduce_perfs():
    from commsim.output.nccl_table import nccl_table_header, time_cell

    oop = nccl_table_header().splitlines()
    full = nccl_table_header(in_place=True).splitlines()
    assert oop[1] == "#       size         count      type   redop    root     time   algbw   busbw"
    assert full[1] == ("#       size         count      type   redop    root     time   algbw   busbw #wrong"
                       "     time   algbw   busbw #wrong")
    assert full[0].endswith("out-of-place                       in-place")
    assert [time_cell(x) for x in (12.345, 123.45, 12345.6)] == ["  12.35", "  123.5", "  12346"]


def test_collective_says_when_it_extrapolates(tmp_path):
    out = tmp_path / "cal.yaml"
    run("calibrate", "--from-nccl-tests", DATA / "A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt", "-o", out)
    within = run("collective", "--calibration", out, "--ranks", "8", "--sizes", "1M:4M")
    assert "extrapolating" not in within.output
    beyond = run("collective", "--calibration", out, "--ranks", "64", "--sizes", "1M:4M")
    assert "# extrapolating: 64 ranks is 8 x the largest calibrated world size 8" in beyond.output


@pytest.mark.parametrize("mode", [[], ["--physical", "--system", "dgx-a100"]], ids=["levels", "physical"])
@pytest.mark.parametrize("alias", ["same", "symlink", "hardlink"])
def test_an_output_over_an_input_log_is_refused_and_the_log_kept(mode, alias, tmp_path):
    log = tmp_path / "a100.txt"
    log.write_bytes(LOGS[0].read_bytes())
    other = tmp_path / "other.txt"
    other.write_bytes(LOGS[0].read_bytes())
    out = {"same": log, "symlink": tmp_path / "link.txt", "hardlink": tmp_path / "hard.txt"}[alias]
    if alias == "symlink":
        out.symlink_to(log)
    elif alias == "hardlink":
        os.link(log, out)
    r = CliRunner().invoke(cli, ["calibrate", "--from-nccl-tests", str(other), str(log), *mode, "-o", str(out)])
    assert r.exit_code == 2, r.output
    named = "" if out == log else f", {log}"
    assert r.stderr.strip() == (f"commsim: error: -o {out}: expected an output path other than the inputs, got the "
                                f"nccl-tests log itself{named} (it would be overwritten)")
    assert log.read_bytes() == LOGS[0].read_bytes()  # untouched
    # another file is written as usual
    run("calibrate", "--from-nccl-tests", log, *mode, "-o", tmp_path / "cal.yaml")
    assert calib.load_calibration(tmp_path / "cal.yaml").levels
