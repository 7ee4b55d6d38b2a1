"""`commsim algorithms` on a scenario with ddp.comm_streams > 1: the node counts and cost models it
runs get the loader's refusals (NCCL models, more than 8,192 ranks), one line, exit 2, nothing written."""

from click.testing import CliRunner

from commsim.cli.main import main

SCENARIO = """\
name: streams
steps: 2
cluster: {nodes: 2, gpus_per_node: 2, intra_node: {bandwidth: 10 GB/s}, inter_node: {bandwidth: 1 GB/s}}
model: {parameters: 1e6}
compute: {forward: 1 ms, backward: 2 ms, optimizer: 0.1 ms}
ddp: {bucket_cap: 1 MB, comm_streams: 2}
"""


def _run(tmp_path, *args):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "rows.json"
    res = CliRunner().invoke(main, ["algorithms", str(path), "--json", str(out), *args])
    return res, out


def test_streams_scenario_runs_at_its_own_scale(tmp_path):
    res, out = _run(tmp_path, "--algorithm", "ring")
    assert res.exit_code == 0, res.output
    assert out.exists()


def test_an_nccl_model_is_refused_at_comm_streams(tmp_path):
    res, out = _run(tmp_path, "--model", "nccl-2.19", "--algorithm", "ring")
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert "\n" not in line and "s.yaml" in line and "ddp.comm_streams: " in line and "nccl-2.19" in line
    assert "Traceback" not in res.output and not out.exists()


def test_a_node_count_above_the_streams_limit_is_refused(tmp_path):
    res, out = _run(tmp_path, "--nodes", "2,4097", "--algorithm", "ring")  # 8,194 ranks
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert "\n" not in line and "--nodes 4097" in line and "ddp.comm_streams: " in line and "8192 ranks" in line
    assert not out.exists()
