"""Tests for commsim.calibration.from_logs: a calibration from nccl-tests logs, refused when
the logs' sizes cannot determine the bandwidth or the logs come from different systems."""

import itertools
from pathlib import Path

import pytest

from commsim.calibration import CalibrationError, model_time
from commsim.calibration.from_logs import calibration_from_nccl_logs, system_layout
from commsim.calibration.nccl_log import load_nccl_log

DATA = Path(__file__).resolve().parents[2] / "data" / "nccl-tests"
LOGS = sorted(DATA.glob("*.txt"))
RTX = DATA / "RTX2080Ti-PCIe3-noP2P-1node_2ranks_anthony-hoo-autodl.txt"


def _truncated(path: Path, tmp_path: Path, max_size: int) -> Path:
    """`path` with the data rows above `max_size` bytes cut off (a sweep stopped early)."""
    keep = []
    for line in path.read_text().splitlines():
        toks = line.split()
        if toks and toks[0].endswith(":"):  # an srun -l prefix
            toks = toks[1:]
        if len(toks) > 8 and toks[0].isdigit() and int(toks[0]) > max_size:
            continue
        keep.append(line)
    out = tmp_path / f"{path.stem}-to-{max_size}.txt"
    out.write_text("\n".join(keep) + "\n")
    return out


def test_truncated_log_is_refused_naming_the_sizes_needed(tmp_path):
    # the 2080 Ti log's 3 smallest rows (8-32 B) fitted B = 0.032 GB/s; the whole log gives 3.9
    short = _truncated(RTX, tmp_path, 32)
    assert [r.size_bytes for r in load_nccl_log(str(short)).rows] == [8, 16, 32]
    with pytest.raises(CalibrationError) as exc:
        calibration_from_nccl_logs([str(short)])
    msg = str(exc.value)
    assert msg.startswith(f"{short}: level intra_node: sizes 8 to 32 B cannot determine the bandwidth: "
                          "the fitted transfer term is only 7.9% of the time at 32 B")
    assert "add sizes >= 512 B" in msg and "\n" not in msg
    cal, _ = calibration_from_nccl_logs([str(RTX)])
    assert cal.level().beta_Bps / 1e9 == pytest.approx(3.865, abs=0.001)


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name.split("_")[0])
def test_every_shipped_log_cut_to_tiny_sizes_is_refused(path, tmp_path):
    with pytest.raises(CalibrationError, match="cannot determine the bandwidth|do not grow with size"):
        calibration_from_nccl_logs([str(_truncated(path, tmp_path, 32))])
    calibration_from_nccl_logs([str(path)])  # the whole log fits


# --- logs of different systems ----------------------------------------------------------------


def test_all_six_shipped_logs_are_refused_naming_two_files():
    with pytest.raises(CalibrationError) as exc:
        calibration_from_nccl_logs([str(p) for p in LOGS])
    assert str(exc.value) == (
        f"{LOGS[0]} and {LOGS[1]} come from different systems (GPU NVIDIA A100-SXM4-80GB vs NVIDIA GH200 120GB, "
        "8 vs 4 ranks per node); a calibration describes one system: fit them separately, or pass --same-system if "
        "they are one")
    cal, logs = calibration_from_nccl_logs([str(p) for p in LOGS], same_system=True)
    assert len(logs) == 6 and cal.level_names == ("intra_node", "inter_node")


def test_layouts_of_the_shipped_logs():
    got = {p.name.split("-")[0]: system_layout(load_nccl_log(str(p))) for p in LOGS}
    assert {k: (v.gpus, v.nodes, v.ranks_per_node) for k, v in got.items()} == {
        "A100": (("NVIDIA A100-SXM4-80GB",), 1, 8),
        "GH200": (("NVIDIA GH200 120GB",), 2, 4),
        "H100": (None, 2, 8),  # the excerpt has no device list; its header says 2 nodes
        "RTX2080Ti": (("NVIDIA GeForce RTX 2080 Ti",), 1, 2),
        "T4": (None, 1, 8),
        "V100": (("Tesla V100-SXM2-16GB",), 1, 8),
    }
    assert got["GH200"].describe() == "NVIDIA GH200 120GB, 2 nodes x 4 ranks"
    assert got["H100"].describe() == "2 nodes x 8 ranks"


@pytest.mark.parametrize("a,b", list(itertools.combinations(LOGS, 2)), ids=lambda p: p.name.split("-")[0])
def test_pairs_with_different_gpus_or_layouts_are_refused(a, b):
    la, lb = system_layout(load_nccl_log(str(a))), system_layout(load_nccl_log(str(b)))
    differ = (la.gpus and lb.gpus and la.gpus != lb.gpus) or la.ranks_per_node != lb.ranks_per_node
    if differ:
        with pytest.raises(CalibrationError, match=f"{a} and {b} come from different systems"):
            calibration_from_nccl_logs([str(a), str(b)])
    else:  # a log without a device list cannot be told apart by its GPUs
        calibration_from_nccl_logs([str(a), str(b)])
    calibration_from_nccl_logs([str(a), str(b)], same_system=True)


def _log(tmp_path, name, hosts, gpu, alpha=5e-6, beta=20e9):
    """A small all_reduce_perf log: one rank per entry of `hosts` (a host name each), on `gpu`."""
    n = len(hosts)
    lines = ["# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {100 + r} on {h} device {r % 8} [0x{r:02x}] {gpu}" for r, h in enumerate(hosts)]
    lines.append("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong")
    for size in (2**k for k in range(3, 27)):
        t = model_time(alpha, beta, size, n)
        alg = size / t / 1e9
        bus = alg * 2 * (n - 1) / n
        cells = f"{t * 1e6:8.2f} {alg:7.2f} {bus:7.2f}      0"
        lines.append(f"{size:12d} {size // 4:12d}     float     sum      -1 {cells} {cells}")
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_one_system_on_one_node_and_on_two_is_accepted(tmp_path):
    one = _log(tmp_path, "one.txt", ["a"] * 4, "GPU X", alpha=2e-6, beta=100e9)
    two = _log(tmp_path, "two.txt", ["b"] * 4 + ["c"] * 4, "GPU X")
    cal, logs = calibration_from_nccl_logs([one, two])
    assert [lv for _, _, lv in logs] == ["intra_node", "inter_node"]
    assert cal.level("inter_node").beta_Bps == pytest.approx(20e9, rel=0.01)


def test_other_gpus_or_ranks_per_node_are_refused(tmp_path):
    base = _log(tmp_path, "base.txt", ["b"] * 4 + ["c"] * 4, "GPU X")
    other_gpu = _log(tmp_path, "gpu.txt", ["d"] * 4 + ["e"] * 4, "GPU Y")
    other_layout = _log(tmp_path, "layout.txt", ["d"] * 2 + ["e"] * 2 + ["f"] * 2 + ["g"] * 2, "GPU X")
    with pytest.raises(CalibrationError, match=r"base.txt and .*gpu.txt come from different systems \(GPU GPU X vs GPU Y\)"):
        calibration_from_nccl_logs([base, other_gpu])
    with pytest.raises(CalibrationError, match=r"\(4 vs 2 ranks per node\)"):
        calibration_from_nccl_logs([base, other_layout])
    cal, _ = calibration_from_nccl_logs([base, other_gpu, other_layout], same_system=True)
    assert sorted({m.world_size for m in cal.level().table}) == [8]


def test_an_unnamed_all_gather_log_is_refused_as_no_all_reduce_not_by_its_world_size():
    # Polaris 128 x 4 all_gather: no perf name or collective line, redop 'none'. Judged by
    # all-reduce's bus factor, its device list's 512 ranks looked contradicted by the rows
    # ("busbw/algbw implies 2 ranks"); the log's world size is right, the collective is not.
    path = DATA.parent / "nccl-tests-multiscale" / "Polaris-A100_128x4_alcf-nccl2.18-allgather.txt"
    log = load_nccl_log(str(path))
    assert log.world_size == 512 and log.bus_kind == "all_gather" and log.collective is None
    with pytest.raises(CalibrationError, match=r"rows have redop 'none' \(not an all-reduce\)"):
        calibration_from_nccl_logs([str(path)])
