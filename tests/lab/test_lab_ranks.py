"""Without a lab: where a rank is from each launcher's variables, layouts, and the nccl-tests
tables the sweeps write (read back by the project's own parser)."""

import pytest

from validate.multinode import per_node_counts, placements
from validate.multinode_rank import place_from_env, resolve


@pytest.mark.parametrize("env, place", [
    ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, (3, 8, 1, 2)),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "8(x2)"},
     (5, 16, 1, None)),
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, (2, 4, 0, 2)),
    ({"PMI_RANK": "1", "PMI_SIZE": "2"}, (1, 2, 0, None)),
    # torchrun's variables win over an outer srun's
    ({"RANK": "0", "WORLD_SIZE": "2", "SLURM_PROCID": "7", "SLURM_NTASKS": "9"}, (0, 2, 0, None)),
])
def test_place_from_each_launcher(env, place):
    assert place_from_env(env) == place


def test_no_launcher_is_one_line():
    with pytest.raises(ValueError, match="no rank in the environment: run under torchrun, srun, mpirun"):
        place_from_env({})


def test_resolve_and_placements():
    assert resolve("validate.multinode:placements") is placements
    with pytest.raises(ValueError, match="expected module:function"):
        resolve("validate.multinode")
    assert placements(2, [2, 1]) == [(0, 0), (0, 1), (1, 0)]
    assert per_node_counts(3, 2) == [2, 2, 2]
    with pytest.raises(ValueError, match="at least|>= 1 rank"):
        per_node_counts(2, [1, 0])


def test_layouts_and_tables_round_trip(tmp_path):
    pytest.importorskip("torch")
    from commsim.calibration.nccl_log import load_nccl_log
    from validate import collectives_multi as cm

    counts = [2, 2, 1]
    assert cm.layout("4x2", 2, 2, counts)["ranks"] == [0, 1, 2, 3]
    assert cm.layout("x1", [0, 2], 1, counts)["ranks"] == [0, 4]
    with pytest.raises(ValueError, match="2 ranks per node, the job has"):
        cm.layout("bad", 3, 2, counts)
    with pytest.raises(ValueError, match="starting with node 0"):
        cm.layout("bad", [1, 2], 1, counts)
    assert cm.node_counts(["a", "a", "b", "c", "c"]) == [2, 1, 2]
    with pytest.raises(ValueError, match="not numbered together"):
        cm.node_counts(["a", "b", "a"])

    def row(size, times):
        t = sum(times) / len(times)
        return {"collective": "all_reduce", "size_bytes": size, "count": size // 4, "world_size": 2, "time_s": t,
                "time_median_s": sorted(times)[1], "times_s": times, "algbw_Bps": size / t,
                "busbw_Bps": size / t, "wrong": 0}

    lay = {**cm.layout("inter", 2, 1, counts), "hosts": [["n0", 11], ["n1", 12]],
           "rows": [row(1 << 20, [0.08, 0.09, 0.16]), row(4 << 20, [0.33, 0.34, 0.35])]}
    paths = cm.write_tables([lay], tmp_path, 1, 3, statistic="median")
    log = load_nccl_log(str(paths[("inter", "all_reduce")]))
    assert log.hostnames == ("n0", "n1") and log.world_size == 2 and log.nodes == 2
    assert log.times(in_place=True) == [(1 << 20, pytest.approx(0.09, rel=1e-3)), (4 << 20, pytest.approx(0.34, rel=1e-3))]
    # torch's all_reduce is in place: the out-of-place group is N/A, and the parser falls back
    assert log.times(in_place=False) == log.times(in_place=True)
    assert any("out-of-place columns have N/A cells" in note for _, note in log.notes)
    mean = load_nccl_log(str(cm.write_tables([lay], tmp_path / "m", 1, 3)[("inter", "all_reduce")]))
    assert mean.times(in_place=True)[0][1] == pytest.approx(0.11, rel=1e-3)
