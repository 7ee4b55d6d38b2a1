"""The real-cluster path: torchrun on every lab node (static rendezvous on node 0's address),
`commsim lab run --all-nodes`, the per-level calibration entry; rank 0's host gets the tables
and the calibration, with the hosts and levels of the job's own layout."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from commsim.calibration import load_calibration  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.lab
@pytest.mark.lab_accuracy
def test_torchrun_on_two_nodes_calibrates_both_levels(lab_name, tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    if not os.path.exists(torchrun):
        pytest.skip("no torchrun next to this python")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cli = [sys.executable, "-m", "commsim.cli", "lab"]
    up = subprocess.run(cli + ["up", "--nodes", "2", "--bandwidth", "100Mbit", "--name", lab_name], cwd=str(REPO),
                        capture_output=True, text=True, env=env)
    assert up.returncode == 0, up.stderr
    cal_dir = tmp_path / "cal"
    args = '[{"out": "%s", "max_size": 4194304, "iters": 3}]' % cal_dir
    script = (f"{torchrun} --nnodes $COMMSIM_LAB_NODES --node-rank $COMMSIM_LAB_NODE --nproc-per-node 2 "
              f"--master-addr $MASTER_ADDR --master-port 29500 -m validate.multinode_rank "
              f"--fn validate.collectives_multi:rank_calibrate --args '{args}' --out {tmp_path}/records$COMMSIM_LAB_NODE")
    try:
        run = subprocess.run(cli + ["run", "--all-nodes", "--name", lab_name, "--", "sh", "-c", script], cwd=str(REPO),
                             capture_output=True, text=True, env=env, timeout=300)
    finally:
        subprocess.run(cli + ["down", "--name", lab_name], cwd=str(REPO), capture_output=True, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    cal = load_calibration(str(cal_dir / "calibration.yaml"))
    assert cal.level_names == ("intra_node", "inter_node")
    assert cal.provenance.backend == "gloo"
    assert cal.provenance.hostnames == (f"cslab-{lab_name}-n0", f"cslab-{lab_name}-n1")
    # the network level is the shaped link (100 Mbit/s), the intra-node level loopback
    # above the rate by up to ~10%: tbf's 16 KiB bucket speeds the mid sizes a fitted range spans
    # (tests/lab/test_lab_multihost.py says how); loopback would be GB/s
    assert 0.7 * 12.5e6 < cal.level("inter_node").beta_Bps < 1.3 * 12.5e6
    assert cal.level("intra_node").beta_Bps > 10 * cal.level("inter_node").beta_Bps
    assert sorted(p.name for p in cal_dir.glob("*.txt")) == ["full_all_reduce.txt", "inter_all_reduce.txt",
                                                            "intra_all_reduce.txt"]
