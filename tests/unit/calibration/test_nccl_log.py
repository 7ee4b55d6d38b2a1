"""Tests for commsim.calibration.nccl_log on every published log in tests/data/nccl-tests and on broken ones."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commsim.calibration.nccl_log import NcclLogError, check_allreduce, load_nccl_log, parse_nccl_log

DATA = Path(__file__).resolve().parents[2] / "data" / "nccl-tests"
LOGS = sorted(DATA.glob("*.txt"))

# file -> (rows, world size, where the world size came from, hosts, first size, last size)
EXPECTED = {
    "A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt": (25, 8, "device list", ("dkh",), 8, 134217728),
    "GH200-Alps-2nodes-x4-NoOFIplugin-socket_8ranks_cscs-docs-nccl.txt": (25, 8, "device list", ("nid005471", "nid005487"), 8, 134217728),
    "H100-AWS-p5-EFA-2nodes_16ranks_awsome-distributed-training.txt": (32, 16, "file header NRANKS", (), 8, 17179869184),
    "RTX2080Ti-PCIe3-noP2P-1node_2ranks_anthony-hoo-autodl.txt": (28, 2, "device list", ("autodl-container-xxxxx",), 8, 1073741824),
    "T4-PCIe-AWS-g4dn-1node_8ranks_aws-hpc-tutorials.txt": (29, 8, "NCCL INFO nranks", ("compute-dy-g4dn-1",), 8, 2147483648),
    "V100-SXM2-16GB-hybridCubeMesh-1node_8ranks_gh-blog-2019.txt": (25, 8, "device list", ("9a417caaf03b",), 8, 134217728),
}


def test_every_shipped_log_is_covered():
    assert {p.name for p in LOGS} == set(EXPECTED)
    for p in LOGS:  # provenance headers kept
        assert p.read_text().startswith("# SOURCE:")


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name.split("_")[0])
def test_real_logs(path):
    nrows, n, n_from, hosts, first, last = EXPECTED[path.name]
    log = load_nccl_log(str(path))
    check_allreduce(log)
    assert len(log.rows) == nrows
    assert (log.world_size, log.world_size_from, log.hostnames) == (n, n_from, hosts)
    assert log.rows[0].size_bytes == first and log.rows[-1].size_bytes == last
    sizes = [r.size_bytes for r in log.rows]
    assert sizes == sorted(sizes) and all(b == 2 * a for a, b in zip(sizes, sizes[1:]))
    assert not [msg for _, msg in log.notes if "dropped" in msg]
    # the rows' printed busbw equals size/time * 2(n-1)/n (checked on the parsed numbers)
    for r in log.rows:
        t = r.out_of_place
        assert t.busbw_Bps == pytest.approx(r.size_bytes / t.time_s * 2 * (n - 1) / n, abs=0.006e9, rel=0.01)
    assert len(log.times()) == nrows and len(log.times(in_place=True)) == nrows
    # node counts said by the files' own headers ("single process" says nothing about nodes)
    assert log.nodes == {"A100": 1, "GH200": 2, "H100": 2, "T4": 1}.get(path.name.split("-")[0])


def test_details_of_a100_log():
    log = load_nccl_log(str(DATA / "A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt"))
    assert log.nccl_version == "2.19.3" and log.nccl_tests_version == "2.19.4"
    assert log.collective == "all_reduce_perf"
    assert log.command == "./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8"
    assert log.avg_busbw_GBps == pytest.approx(34.9024)
    assert len(log.devices) == 8 and log.devices[7].name == "NVIDIA A100-SXM4-80GB"
    last = log.rows[-1]
    assert (last.count, last.dtype, last.redop, last.root) == (33554432, "float", "sum", -1)
    assert last.out_of_place.time_s == pytest.approx(1295.41e-6)
    assert last.in_place.time_s == pytest.approx(1284.21e-6)


def test_old_format_without_root_column():
    log = load_nccl_log(str(DATA / "V100-SXM2-16GB-hybridCubeMesh-1node_8ranks_gh-blog-2019.txt"))
    assert all(r.root is None for r in log.rows)
    assert log.rows[0].out_of_place.wrong == "1e-07"


HEADER = """\
# nThread 1 nGpus 2 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#  Rank  0 Group  0 Pid  1 on hostA device  0 [0000:b4:00] GPU
#  Rank  1 Group  0 Pid  2 on hostB device  0 [0000:b5:00] GPU
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""
ROW_1M = "     1048576        262144     float     sum      -1    279.5    3.75    3.75      0    280.2    3.74    3.74      0"
ROW_2M = "     2097152        524288     float     sum      -1    539.6    3.89    3.89      0    540.8    3.88    3.88      0"
ROW_4M = "     4194304       1048576     float     sum      -1   1065.1    3.94    3.94      0   1062.2    3.95    3.95      0"
# the same timings as all_gather rows over the 2 ranks: busbw = algbw x (n-1)/n
ROW_1M_AG = "     1048576        131072     float    none      -1    279.5    3.75    1.88      0    280.2    3.74    1.87      0"


def test_banners_warnings_prefixes_and_footer():
    text = (
        "Welcome to the cluster! Banner line 12 34\n"
        "host1:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
        "host1:1:1 [0] NCCL WARN something odd\n"
        + "".join("[1,0]<stdout>:" + line + "\n" for line in HEADER.splitlines())
        + "[1,0]<stdout>:" + ROW_1M + "\n"
        + "0: " + ROW_2M + "\n"
        + ROW_4M + "\n"
        + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 3.9\n#\n"
    )
    log = parse_nccl_log(text, "mixed.log")
    assert [r.size_bytes for r in log.rows] == [1048576, 2097152, 4194304]
    assert log.world_size == 2 and log.hostnames == ("host1", "hostA", "hostB")
    assert log.nccl_version == "2.21.5" and log.avg_busbw_GBps == 3.9


def test_na_cells_and_cut_off_lines():
    text = HEADER + "\n".join([
        "     1048576        262144     float     sum      -1    N/A    N/A    N/A      N/A    280.2    3.74    3.74      0",
        "     2097152        524288     float     sum      -1    539.6    3.89    3.89      0    540.8    3.",  # in-place cut
        "     4194304       1048576     float     sum      -1   1065.1    3.9",  # cut inside out-of-place
        "     8388608       2097152     float     sum      -1   2113.2    3.97    3.97      0   2111.5    3.97    3.97      0",
        "    16777216       4194304     float     sum      -1   4209.7    3.99    3.9",  # busbw "3.99" cut to "3.9"
        "    33554432       8388608     float     sum      -1   8399.7    3.99    1",  # busbw cut: caught by consistency
        "    67108864      16777",
    ]) + "\n"
    log = parse_nccl_log(text, "cut.log")
    sizes = [r.size_bytes for r in log.rows]
    assert sizes == [1048576, 2097152, 8388608]
    first = log.rows[0]
    assert first.out_of_place is None and first.in_place.time_s == pytest.approx(280.2e-6)
    assert log.times()[0] == (1048576, pytest.approx(280.2e-6))  # falls back to in-place
    assert log.rows[1].in_place is None
    lines = {line for line, _ in log.notes}
    assert {10, 11, 12, 14, 15, 16} <= lines


def test_world_size_from_ratio_when_nothing_else_says():
    rows = "\n".join(line for line in open(DATA / "H100-AWS-p5-EFA-2nodes_16ranks_awsome-distributed-training.txt")
                     if not line.startswith("# "))
    log = parse_nccl_log(rows, "noheader.log")
    assert (log.world_size, log.world_size_from) == (16, "busbw/algbw ratio")


def test_contradicting_world_size_is_rejected():
    text = (DATA / "A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt").read_text()
    with pytest.raises(NcclLogError, match="world size 16 .* implies 8 ranks"):
        parse_nccl_log(text, "a100.log", world_size=16)


@pytest.mark.parametrize(
    "text,msg",
    [
        ("", "no nccl-tests data table"),
        ("# nThread 1 nGpus 8\n# Using devices\nNCCL WARN init failed\n", "no nccl-tests data table"),
        ("this is a README\n\n- item 1 2\n", "no nccl-tests data table"),
        ("  8  2  float  sum  -1  12.25  0.00  0.00  0  12.00  0.00  0.00  0\n", "cannot determine the world size"),
    ],
)
def test_unusable_logs_raise_one_line_errors(text, msg):
    with pytest.raises(NcclLogError, match=msg) as exc:
        parse_nccl_log(text, "bad.log")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("bad.log: ")


def test_non_allreduce_logs_are_rejected():
    text = "# Collective test starting: all_gather_perf\n" + HEADER + ROW_1M_AG + "\n"
    log = parse_nccl_log(text, "ag.log")
    with pytest.raises(NcclLogError, match="all_gather_perf output"):
        check_allreduce(log)


def test_missing_file(tmp_path):
    with pytest.raises(NcclLogError, match="cannot read log"):
        load_nccl_log(str(tmp_path / "nope.txt"))


JUNK = st.sampled_from([
    "",
    "host1:1234:1234 [0] NCCL INFO Channel 00/02 :    0   1",
    "host1:1234:1234 [3] NCCL WARN Cuda failure 'out of memory'",
    "#",
    "# Using devices",
    "srun: job 123 queued and waiting for resources",
    "Warning: Permanently added 'node7' (ECDSA) to the list of known hosts.",
    "   [some banner]  12 34 56",
    "0: ",
    "Welcome to the cluster 2 3",
])


@settings(max_examples=60, deadline=None)
@given(junk=st.lists(st.tuples(st.integers(0, 40), JUNK), max_size=25))
def test_junk_lines_never_change_the_rows(junk):
    """Banners, warnings and NCCL chatter anywhere in a log leave the table as it was."""
    path = DATA / "A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt"
    lines = path.read_text().splitlines()
    clean = parse_nccl_log("\n".join(lines), "a100")
    for pos, text in sorted(junk, reverse=True):
        lines.insert(min(pos + 10, len(lines)), text)  # after the file's own header
    dirty = parse_nccl_log("\n".join(lines), "a100")
    assert [(r.size_bytes, r.out_of_place, r.in_place) for r in dirty.rows] == \
        [(r.size_bytes, r.out_of_place, r.in_place) for r in clean.rows]
    assert dirty.world_size == 8


def test_rooted_tables_are_rejected():
    # a 2-rank reduce_perf table: root 0 and busbw = algbw, which at n=2 is also all-reduce's factor
    text = HEADER + "\n".join(row.replace("     -1 ", "      0 ") for row in (ROW_1M, ROW_2M, ROW_4M)) + "\n"
    log = parse_nccl_log(text, "reduce.log")
    assert [r.root for r in log.rows] == [0, 0, 0]
    with pytest.raises(NcclLogError, match=r"reduce\.log: line \d+: root 0 .*not all_reduce_perf output"):
        check_allreduce(log)
    check_allreduce(parse_nccl_log(HEADER + ROW_1M + "\n", "ar.log"))  # root -1 is fine


def test_overflowing_cells_skip_the_row():
    # 1e400 reads as inf in float(): no measurement, so the row is skipped with a note
    text = HEADER + "\n".join([ROW_1M, ROW_2M.replace("539.6", "1e400"), ROW_4M]) + "\n"
    log = parse_nccl_log(text, "inf.log")
    assert [r.size_bytes for r in log.rows] == [1048576, 4194304]
    assert any("non-numeric cell '1e400'" in note for _, note in log.notes)


def test_split_row_returns_root_and_cells():
    from commsim.calibration.nccl_log import Layout, _split_row

    toks = ROW_1M.split()
    assert _split_row(toks, Layout(True)) == (-1, toks[5:], Layout(True))
    assert _split_row(toks[:4] + toks[5:], Layout(False)) == (None, toks[5:], Layout(False))
    assert _split_row(toks, None) == (-1, toks[5:], Layout(True))  # 9 cells: root and both groups
    assert _split_row(toks[:4] + ["x"], None) is None


# --- linear-time parsing ---------------------------------------------------------------------

# Lines that made a backtracking pattern retry every split of a long run: a word with no
# blank (the command-line search was cubic in it), '@'s (the prompt), a long digit run in a
# cell, long whitespace, many partial device entries, numbers past int()'s 4,300 digits.
_ADVERSARIAL = """
import json, sys, time
from commsim.calibration.nccl_log import MAX_LINE_CHARS as L, parse_nccl_log
base = open(sys.argv[1]).read()
lines = ["x" * L, "@" * L, "a_perf" * (L // 6), "u@h" * (L // 4) + " all_reduce_perf", "a@" * (L // 2 - 20) + " x_perf",
         "8 2 float sum -1 " + "1" * (L - 40) + "x 0 0 0", "8 2 float sum -1 1e" + "1" * (L - 40) + "x 0 0 0",
         "1" * (L - 20) + " 2 float sum", "# Rank 0 " + "on h device 0 [" * (L // 16),
         "#  Rank 0 on " + " " * (L - 40) + "h device 0 [0] X", "h:1:1 [0] NCCL INFO nranks " + "1" * (L - 40),
         "# NRANKS: " + "1" * (L - 20), "# nccl-tests version 1 " + "nccl-library=" * (L // 14), " " * (L - 1) + "x",
         "a" * (L - 30) + ":1:1 [0] NCCL INFO x", "ab_perf@#$ [] on device " * (L // 25)]
times = []
for line in lines:
    assert len(line) <= L
    t0 = time.perf_counter()
    log = parse_nccl_log(line + "\\n" + base + "\\n" + line + "\\n", "adv")
    times.append(time.perf_counter() - t0)
    assert len(log.rows) == 25, len(log.rows)
t0 = time.perf_counter()
log = parse_nccl_log("x" * 100_000 + "\\n" + base, "long")
times.append(time.perf_counter() - t0)
print(json.dumps({"max_s": max(times), "notes": log.notes[:1]}))
"""


def test_long_and_adversarial_lines_parse_in_linear_time():
    # a subprocess, so that a regression fails after the timeout instead of running for minutes
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    res = subprocess.run([sys.executable, "-c", _ADVERSARIAL, str(DATA / LOGS[-1].name)], cwd=root,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert out["max_s"] < 1.0  # a few ms each here; the cubic pattern took minutes on the 100,000-character line
    assert out["notes"] == [[1, "line of 100000 characters skipped (longer than 10000; no nccl-tests line is)"]]


def test_line_length_limit_is_exact():
    from commsim.calibration.nccl_log import MAX_LINE_CHARS

    assert MAX_LINE_CHARS == 10_000
    padded = ROW_2M + " " * (MAX_LINE_CHARS - len(ROW_2M))
    log = parse_nccl_log(HEADER + "\n".join([ROW_1M, padded, ROW_4M]) + "\n", "pad.log")
    assert [r.size_bytes for r in log.rows] == [1048576, 2097152, 4194304] and not log.notes
    log = parse_nccl_log(HEADER + "\n".join([ROW_1M, padded + " ", ROW_4M]) + "\n", "pad.log")
    line = HEADER.count("\n") + 2
    assert [r.size_bytes for r in log.rows] == [1048576, 4194304]
    assert log.notes == ((line, f"line of {MAX_LINE_CHARS + 1} characters skipped (longer than 10000; no nccl-tests line is)"),)


@pytest.mark.parametrize("line", [
    "# NRANKS: " + "9" * 5000,
    "# nccl-tests version 2.19.4 nccl-headers=21903 nccl-library=" + "9" * 5000,
    "host1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks " + "9" * 5000 + " cudaDev 0",
    "#  Rank " + "9" * 5000 + " Group 0 Pid 1 on host1 device 0 [0x07] GPU",
    "#  Rank 0 Group 0 Pid 1 on host1 device " + "9" * 5000 + " [0x07] GPU",
])
def test_numbers_past_int_limits_are_not_read(line):
    # int() refuses strings of more than 4,300 digits: such a number is no rank count or version
    log = parse_nccl_log(HEADER + line + "\n" + ROW_1M + "\n", "big.log")
    assert [r.size_bytes for r in log.rows] == [1048576]
    assert log.nccl_version is None and [d.rank for d in log.devices] == [0, 1] and log.world_size == 2


def test_data_rows_with_overlong_sizes_are_skipped_with_a_note():
    big = ROW_2M.replace("2097152", "2" * 5000, 1)
    log = parse_nccl_log(HEADER + "\n".join([ROW_1M, big, ROW_4M]) + "\n", "big.log")
    assert [r.size_bytes for r in log.rows] == [1048576, 4194304]
    assert any("size or count of more than 18 digits" in note for _, note in log.notes)


@pytest.mark.parametrize("line,command,collective", [
    ("root@dkh:~/nccl-tests# ./build/all_reduce_perf -b 8", "./build/all_reduce_perf -b 8", "all_reduce_perf"),
    ("u@h:~$ mpirun -np 8 all_reduce_perf_mpi -b 8", "mpirun -np 8 all_reduce_perf_mpi -b 8", "all_reduce_perf"),
    ("$ ./build/all_gather_perf -g 8", "./build/all_gather_perf -g 8", "all_gather_perf"),
    ("> srun ./all_reduce_perf", "srun ./all_reduce_perf", "all_reduce_perf"),
    ("a@b@c#d$e ./all_reduce_perf", "d$e ./all_reduce_perf", "all_reduce_perf"),  # the last @, the first # after it
    ("x@#y ./all_reduce_perf", "x@#y ./all_reduce_perf", "all_reduce_perf"),
    ("run foo_perfx then bar_perf", "run foo_perfx then bar_perf", "bar_perf"),
])
def test_command_lines_and_prompts(line, command, collective):
    log = parse_nccl_log(line + "\n" + HEADER + (ROW_1M_AG if "all_gather" in line else ROW_1M) + "\n", "cmd.log")
    assert (log.command, log.collective) == (command, collective)


def test_rows_follow_their_own_collectives_bus_factor():
    """busbw/algbw is nccl-tests' factor of the collective the log names: (n-1)/n for all_gather."""
    ag = parse_nccl_log("# Collective test starting: all_gather_perf\n" + HEADER + ROW_1M_AG + "\n", "ag.log")
    assert ag.bus_kind == "all_gather" and [r.size_bytes for r in ag.rows] == [1048576]
    # the caller's collective wins: the same rows read as all_reduce do not follow 2(n-1)/n
    with pytest.raises(NcclLogError, match=r"busbw = algbw\*2\(n-1\)/n for n=2 \(all_reduce\)"):
        parse_nccl_log(HEADER + ROW_1M_AG + "\n", "ag.log", collective="all_reduce")
    with pytest.raises(NcclLogError, match=r"busbw = algbw\*\(n-1\)/n for n=2 \(all_gather\)"):
        parse_nccl_log(HEADER + ROW_1M + "\n", "ar.log", collective="all_gather")
    with pytest.raises(NcclLogError, match="collective 'alltoall' has no nccl-tests bus factor"):
        parse_nccl_log(HEADER + ROW_1M + "\n", "x.log", collective="alltoall")
    # without a device list the world size comes from the all_gather ratio (n-1)/n = 7/8
    row = "     1048576   32768  float  none  -1   100.0   10.49    9.18  0   100.0   10.49    9.18  0"
    log = parse_nccl_log(row + "\n", "ag8.log", collective="all_gather")
    assert (log.world_size, log.world_size_from) == (8, "busbw/algbw ratio")


def test_a_multiscale_reduce_scatter_log_reads_with_its_factor():
    path = DATA.parent / "nccl-tests-multiscale" / "Snellius-H100_2x4_odissei-reducescatter.txt"
    log = load_nccl_log(str(path))
    assert log.bus_kind == "reduce_scatter" and log.world_size == 8 and len(log.rows) > 20
    r = log.rows[-1].out_of_place
    assert r.busbw_Bps == pytest.approx(r.algbw_Bps * 7 / 8, rel=0.01, abs=0.006e9)


def test_steady_takes_in_place_only_for_a_stall():
    from commsim.calibration.nccl_log import TRANSIENT_RATIO, NcclRow, Timing

    def row(t_oop, t_ip):
        return NcclRow(1, 1 << 20, 1, "float", "sum", -1, Timing(t_oop, 1.0, 1.0, "0"),
                       None if t_ip is None else Timing(t_ip, 1.0, 1.0, "0"))
    assert row(1.0, 1.0 / (TRANSIENT_RATIO * 1.01)).steady().time_s == pytest.approx(1.0 / (TRANSIENT_RATIO * 1.01))
    assert row(1.0, 1.0 / (TRANSIENT_RATIO * 0.99)).steady().time_s == 1.0
    assert row(1.0, 3.0).steady().time_s == 1.0 and row(1.0, None).steady().time_s == 1.0
    assert NcclRow(1, 8, 2, "float", "sum", -1, None, Timing(2.0, 1.0, 1.0, "0")).steady().time_s == 2.0
