"""commsim.calibration.nccl_tables: the collective tables of a real nccl-tests log."""

import os

import pytest

from commsim.calibration.nccl_tables import TRANSIENT_RATIO, load_tables, parse_tables

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "nccl-tests-multiscale")


def _row(size, t_oop, t_ip, n=8):
    a, b = size / (t_oop * 1e3), size / (t_ip * 1e3)
    f = 2 * (n - 1) / n
    return f"{size:12d} {size // 4:10d}  float  sum  -1  {t_oop:8.2f} {a:7.2f} {a * f:7.2f}  0  {t_ip:8.2f} {b:7.2f} {b * f:7.2f}  0"


def test_an_out_of_place_stall_keeps_the_in_place_time():
    """Snellius 2x4 all_reduce, 16 KB: out-of-place 90.85 us against 22.59 us in-place and
    22-24 us at 8 KB and 32 KB; the table keeps 22.59 (the interpolation benchmark's 288%)."""
    t = load_tables(os.path.join(DATA, "Snellius-H100_2x4_odissei-allreduce.txt")).table("all_reduce")
    rows = {s: tm for s, tm, _ in t.rows}
    assert rows[16384] == 22.59
    assert rows[8192] == 22.81 and rows[32768] == 24.02  # ordinary rows keep out-of-place


def test_transient_rule_only_above_the_ratio():
    text = "\n".join(["# Collective test starting: all_reduce_perf",
                      _row(1 << 20, 100.0, 100.0 / (TRANSIENT_RATIO * 1.01)),   # stall: in-place kept
                      _row(1 << 21, 150.0, 150.0 / (TRANSIENT_RATIO * 0.99)),   # noise: out-of-place kept
                      _row(1 << 22, 100.0, 300.0)])                           # in-place slower: out-of-place
    (t,) = parse_tables(text, world_size=8).tables
    assert [r[1] for r in t.rows] == [pytest.approx(100.0 / (TRANSIENT_RATIO * 1.01), abs=0.01), 150.0, 100.0]


def _ag_row(size, t_us, n=8):
    a = size / (t_us * 1e3)
    return f"{size:12d} {size // 4 // n:10d}  float  none  -1  {t_us:8.2f} {a:7.2f} {a * (n - 1) / n:7.2f}  0  {t_us:8.2f} {a:7.2f} {a * (n - 1) / n:7.2f}  0"


def test_sections_are_read_by_the_log_parser_with_their_own_bus_factor():
    """A table named only by its command line (no 'Collective test starting' line) is an
    all_gather table: rows checked with (n-1)/n and the world size from that ratio."""
    text = "\n".join(["$ ./build/all_gather_perf -b 1M -e 4M -g 8",
                      _ag_row(1 << 20, 100.0), _ag_row(1 << 21, 180.0), _ag_row(1 << 22, 350.0)])
    lt = parse_tables(text, "ag.log")
    assert lt.world_size == 8 and [t.kind for t in lt.tables] == ["all_gather"]
    assert [r[1] for r in lt.tables[0].rows] == [100.0, 180.0, 350.0]


def test_every_section_sees_the_device_list_and_keeps_the_log_line_numbers():
    head = ["# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902",
            "#  Rank  0 Group  0 Pid 1 on nodeA device  0 [0000:01:00] NVIDIA H100",
            "#  Rank  1 Group  0 Pid 2 on nodeB device  0 [0000:01:00] NVIDIA H100"]
    text = "\n".join(head + ["# Collective test starting: all_reduce_perf", _row(1 << 20, 50.0, 50.0, n=2),
                             "# Collective test starting: broadcast_perf", "junk",
                             "# Collective test starting: all_gather_perf", _ag_row(1 << 20, 40.0, n=2)])
    lt = parse_tables(text, "two.log")
    assert (lt.world_size, lt.nodes, lt.gpu_name, lt.nccl_version) == (2, 2, "NVIDIA H100", "2.29.2")
    assert [(t.kind, t.first_line) for t in lt.tables] == [("all_reduce", 4), ("all_gather", 8)]


def test_a_bare_nccl_version_banner_is_read():
    lt = load_tables(os.path.join(DATA, "GB200-NVL72-OCI_32x4_oci-quickstarts-allreduce.txt"))
    assert lt.nccl_version == "2.27.3"
