"""cluster.gpu_arch on the command line: NCCL's cost models have no Blackwell tables, so a
Blackwell cluster is refused where --model asks for one (one line naming the file and key,
exit 2) and skipped where --model all lists them; the physical model prices it."""

import json

from commsim.cli.main import run_cli

B200 = """cluster: {preset: dgx-b200, nodes: 4}
model: {parameters: 1e8}
compute: {forward: 5 ms, backward: 10 ms}
collective: {algorithm: nccl}
steps: 3
"""


def _scenario(tmp_path):
    path = tmp_path / "b200.yaml"
    path.write_text(B200)
    return str(path)


def test_a_blackwell_cluster_runs_on_the_physical_model(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert run_cli(["run", _scenario(tmp_path), "-q", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["world_size"] == 32


def test_an_nccl_cost_model_is_refused_naming_the_file_and_key(tmp_path, capsys):
    path = _scenario(tmp_path)
    for args in (["collective", path, "--model", "nccl-2.19", "--algorithm", "auto", "--sizes", "1M:4M"],
                 ["algorithms", path, "--model", "nccl-2.30"],
                 ["run", path, "--set", "collective.model=nccl-2.30", "--set", "collective.algorithm=auto"]):
        assert run_cli(args) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and path in err and "cluster.gpu_arch: the nccl-2." in err
        assert "got blackwell" in err


def test_algorithms_with_every_model_keeps_the_ones_that_price_it(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert run_cli(["algorithms", _scenario(tmp_path), "--model", "all", "-q", "--json", str(out)]) == 0
    assert {r["model"] for r in json.loads(out.read_text())["rows"]} == {"alpha-beta"}
