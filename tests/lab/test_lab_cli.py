"""`commsim lab calibrate` and `commsim lab validate` end to end, and their one-line errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from commsim.calibration import load_calibration  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

SCENARIO = """\
name: lab_cli
steps: 2
cluster:
  nodes: 2
  gpus_per_node: 1
  intra_node: {bandwidth: 1 GB/s, latency: 100 us}
  inter_node: {bandwidth: 100 Mbps, latency: 1 ms}
model:
  parameters: 2.5e5
compute:
  forward: 50 ms
  backward: 150 ms
  optimizer: 10 ms
ddp:
  bucket_cap: 512 KiB
  first_bucket: 256 KiB
stragglers:
  - {kind: slow_rank, ranks: [1], factor: 1.5}
"""


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "commsim.cli", "lab", *args], cwd=str(REPO), capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=timeout)


def test_without_a_lab_up_the_commands_say_so(lab_name, tmp_path):
    (tmp_path / "sc.yaml").write_text(SCENARIO)
    for args in (["calibrate", "-o", str(tmp_path / "cal.yaml")], ["run", "--", "true"],
                 ["link", "--node", "0", "--cut"]):
        done = cli(args[0], "--name", lab_name, *args[1:])
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == (f"commsim: error: --name: no lab {lab_name!r} is up (no state file); "
                                       "start one with `commsim lab up`")
    assert not (tmp_path / "cal.yaml").exists()


@pytest.mark.lab
@pytest.mark.lab_accuracy
def test_calibrate_then_validate_a_slow_rank(lab_name, tmp_path):
    sc = tmp_path / "sc.yaml"
    sc.write_text(SCENARIO)
    cal, report = tmp_path / "cal.yaml", tmp_path / "report.json"
    up = cli("up", "--nodes", "2", "--bandwidth", "100Mbit", "--name", lab_name)
    assert up.returncode == 0, up.stderr
    try:
        done = cli("calibrate", "-o", str(cal), "--ranks-per-node", "2", "--max-size", "4M", "--iters", "3",
                   "--name", lab_name)
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in (tmp_path / "cal.tables").glob("*.txt")) == [
            "full_all_reduce.txt", "inter_all_reduce.txt", "intra_all_reduce.txt"]
        too_big = cli("validate", str(sc), "--calibration", str(cal), "--set", "cluster.nodes=3", "--name", lab_name)
        assert too_big.returncode == 2
        assert too_big.stderr.strip() == f"commsim: error: scenario 'lab_cli' needs 3 nodes, lab {lab_name} has 2"
        done = cli("validate", str(sc), "--calibration", str(cal), "--json", str(report), "--name", lab_name)
        assert done.returncode == 0, done.stderr
    finally:
        cli("down", "--name", lab_name)
    c = load_calibration(str(cal))
    assert c.level_names == ("intra_node", "inter_node") and c.provenance.backend == "gloo"
    doc = json.loads(report.read_text())
    assert abs(doc["error_pct"]["step_time_mean"]) < 20
    assert [(f["kind"], f["rank"]) for f in doc["stragglers_found"]] == [("slow_rank", 1)]
    assert f"stragglers seen: slow_rank: rank 1 (node cslab-{lab_name}-n1)" in done.stdout
