"""A physical fit refuses a system of another GPU generation than the log's, and a --nodes /
--gpus-per-node / --ranks flag that the log's device list contradicts (both were silent)."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from commsim.calibration.errors import CalibrationError
from commsim.calibration.from_logs import _load_physical, check_log_gpu, gpu_arch_of, physical_fit_from_nccl_logs
from commsim.cli.main import main as cli
from commsim.network.system import PRESETS

DATA = Path(__file__).resolve().parents[2] / "data"
POLARIS = str(DATA / "nccl-tests-multiscale" / "Polaris-A100_2x4_alcf-nccl2.18-allreduce.txt")


@pytest.mark.parametrize("name, arch", [
    # every device-list name of the shipped logs, and the preset each is calibrated with
    ("NVIDIA A100-SXM4-40GB", "ampere"), ("NVIDIA A100-SXM4-80GB", "ampere"), ("NVIDIA H100 80GB HBM3", "hopper"),
    ("NVIDIA H100", "hopper"), ("NVIDIA GH200 120GB", "hopper"), ("Tesla V100-SXM2-16GB", "volta"),
    ("NVIDIA GeForce RTX 2080 Ti", "volta"), ("NVIDIA B200", "blackwell"), ("NVIDIA GB200", "blackwell"),
    ("NVIDIA L40S", "ampere"), ("Tesla T4", "volta"), ("NVIDIA A10G", "ampere"),
    ("NVIDIA Graphics Device", None), ("", None), (None, None),
])
def test_gpu_arch_of_a_device_list_name_is_ncclss_tuning_row(name, arch):
    assert gpu_arch_of(name) == arch


@pytest.mark.parametrize("name, preset", [
    ("NVIDIA A100-SXM4-40GB", "polaris"), ("NVIDIA A100-SXM4-40GB", "polaris-socket"),
    ("NVIDIA A100-SXM4-80GB", "dgx-a100"), ("NVIDIA H100 80GB HBM3", "dgx-h100"), ("NVIDIA H100", "hgx-h100-4gpu"),
    ("NVIDIA GH200 120GB", "gh200-alps-socket"), ("Tesla V100-SXM2-16GB", "dgx1-v100"),
    ("NVIDIA GeForce RTX 2080 Ti", "pcie3-nop2p"), ("NVIDIA Graphics Device", "gb200-nvl72"),
])
def test_every_shipped_log_gpu_is_accepted_with_its_own_preset(name, preset):
    check_log_gpu("log.txt", name, PRESETS[preset])  # raises nothing


def test_an_a100_log_with_an_h100_preset_is_refused_at_system():
    with pytest.raises(CalibrationError) as exc:
        physical_fit_from_nccl_logs([POLARIS], PRESETS["dgx-h100"])
    assert exc.value.source == POLARIS and exc.value.path == "--system"
    assert "NVIDIA A100-SXM4-40GB: ampere" in exc.value.message and "dgx-h100 (hopper)" in exc.value.message
    assert "polaris" in exc.value.message  # the presets that would fit


@pytest.mark.parametrize("flags, key, says", [
    (dict(nodes=3), "--nodes", "--nodes says 3"),
    (dict(nodes=1, gpus_per_node=4), "--nodes", "--nodes says 1"),
    (dict(nodes=4, gpus_per_node=2), "--nodes", "--nodes says 4"),  # forced 8 ranks as 4 x 2
    (dict(gpus_per_node=2), "--gpus-per-node", "--gpus-per-node says 2"),
    (dict(ranks=4), "--ranks", "--ranks says 4"),
])
def test_a_flag_the_device_list_contradicts_is_refused_naming_both(flags, key, says):
    world = flags.get("ranks") or (flags["nodes"] * flags["gpus_per_node"] if len(flags) == 2 else None)
    with pytest.raises(CalibrationError) as exc:
        _load_physical(POLARIS, world, flags.get("nodes"), flags.get("gpus_per_node"), flags.get("ranks"))
    assert exc.value.path == key
    assert "the log's device list has 2 nodes x 4 ranks (8 ranks)" in exc.value.message and says in exc.value.message


def test_flags_that_agree_with_the_device_list_are_accepted():
    lt = _load_physical(POLARIS, 8, 2, 4, None)
    assert (lt.nodes, lt.world_size) == (2, 8)


def test_cli_refuses_a_contradicted_nodes_flag_in_one_line(tmp_path):
    out = tmp_path / "cal.yaml"
    r = CliRunner().invoke(cli, ["calibrate", "--from-nccl-tests", POLARIS, "--physical", "--system", "polaris",
                                 "--nodes", "3", "-o", str(out)])
    assert r.exit_code == 2
    assert r.stderr == (f"commsim: error: {POLARIS}: --nodes: the log's device list has 2 nodes x 4 ranks (8 ranks), "
                        "--nodes says 3: drop --nodes (it is for logs that do not say)\n")
    assert not out.exists()
