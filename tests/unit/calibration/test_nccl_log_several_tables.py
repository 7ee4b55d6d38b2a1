"""A log holding the tables of several collectives (a script that runs all_reduce_perf and then
all_gather_perf into one file) is read one table at a time: each follows its own bus factor.
Before, every row was checked with the last table's factor, and the all_reduce table of such
a log was refused as "all_gather_perf output"."""

from pathlib import Path

import pytest

from commsim.calibration.nccl_log import NcclLogError, check_allreduce, parse_nccl_log

DATA = Path(__file__).resolve().parents[2] / "data" / "nccl-tests-multiscale"
AR = (DATA / "Snellius-H100_1x4_odissei-allreduce.txt").read_text()
AG = (DATA / "Snellius-H100_1x4_odissei-allgather.txt").read_text()
RS = (DATA / "Snellius-H100_1x4_odissei-reducescatter.txt").read_text()


def _figures(log):
    return [(r.size_bytes, r.steady().time_s) for r in log.rows]


@pytest.mark.parametrize("order", ["all_reduce first", "all_gather first"])
def test_the_all_reduce_table_of_a_two_table_log_is_the_one_read(order):
    text = AR + AG if order == "all_reduce first" else AG + AR
    log = parse_nccl_log(text, "both.txt")
    alone = parse_nccl_log(AR, "ar.txt")
    check_allreduce(log)  # refused before, whichever table came last
    assert log.bus_kind == "all_reduce" and log.collective == "all_reduce_perf"
    assert _figures(log) == _figures(alone) and log.world_size == 4
    assert any("table of all_gather_perf skipped" in note for _, note in log.notes)


def test_a_named_collective_reads_its_own_table():
    log = parse_nccl_log(AR + AG, "both.txt", collective="all_gather")
    assert log.bus_kind == "all_gather" and _figures(log) == _figures(parse_nccl_log(AG, "ag.txt"))


def test_without_an_all_reduce_table_the_first_is_read_and_named():
    log = parse_nccl_log(AG + RS, "ag_rs.txt")
    assert log.collective == "all_gather_perf" and _figures(log) == _figures(parse_nccl_log(AG, "ag.txt"))
    with pytest.raises(NcclLogError, match="this is all_gather_perf output"):
        check_allreduce(log)
    with pytest.raises(NcclLogError, match=r"ag_rs.txt: holds the tables of several collectives "
                                           r"\(all_gather_perf, reduce_scatter_perf\) and none of all_reduce"):
        parse_nccl_log(AG + RS, "ag_rs.txt", collective="all_reduce")
