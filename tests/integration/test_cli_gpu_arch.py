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


def test_algorithms_compares_nccls_own_choice_with_the_closed_forms(tmp_path):
    # `--algorithm nccl` (the physical model, as `run` prices it) was refused as no all-reduce
    out = tmp_path / "rows.json"
    assert run_cli(["algorithms", "scenarios/dgx_h100_scaling.yaml", "--algorithm", "ring,nccl", "--nodes", "4,256",
                    "--steps", "2", "-q", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["world_size"], r["algorithm"]) for r in rows} == {(32, "ring"), (32, "nccl"), (2048, "ring"),
                                                                  (2048, "nccl")}
    at = {(r["world_size"], r["algorithm"]): r["comm_time_s"] for r in rows}
    # a flat ring pays 2(n-1) hop latencies; NCCL's trees and NVLS do not: at 2,048 GPUs it is far ahead
    assert at[(2048, "nccl")] < at[(2048, "ring")] / 10
    all_rows = tmp_path / "all.json"
    assert run_cli(["algorithms", "scenarios/dgx_h100_scaling.yaml", "--algorithm", "all", "--steps", "2", "-q",
                    "--json", str(all_rows)]) == 0
    assert "nccl" in {r["algorithm"] for r in json.loads(all_rows.read_text())["rows"]}
