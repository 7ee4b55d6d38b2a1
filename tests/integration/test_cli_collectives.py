"""`commsim algorithms`: step time per algorithm / model / node count, from the command line."""

import json
from pathlib import Path

import click
from click.testing import CliRunner

from commsim.cli.algorithms import register

SCENARIO = str(Path(__file__).resolve().parents[2] / "scenarios" / "dgx_h100_scaling.yaml")


def cli():
    group = click.Group()
    register(group)
    return group


def invoke(*args):
    return CliRunner().invoke(cli(), ["algorithms", *args])


def test_compares_algorithms_and_marks_the_fastest(tmp_path):
    out = tmp_path / "rows.json"
    args = [SCENARIO, "--nodes", "1,2", "--algorithm", "ring,tree,hierarchical", "--steps", "3",
            "--set", "model.parameters=1e8", "--json", str(out)]
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert lines[0].split()[:3] == ["GPUs", "algorithm", "model"]
    assert len(lines) == 1 + 2 * 3
    assert sum(line.endswith("*") for line in lines) >= 2  # one fastest per node count
    doc = json.loads(out.read_text())
    assert [row["world_size"] for row in doc["rows"]] == [8, 8, 8, 16, 16, 16]
    first = out.read_bytes()
    assert invoke(*args).exit_code == 0 and out.read_bytes() == first  # deterministic


def test_nccl_models_skip_algorithms_they_do_not_cover():
    r = invoke(SCENARIO, "--nodes", "1", "--algorithm", "all", "--model", "alpha-beta,nccl-2.19", "--steps", "2",
               "--set", "model.parameters=1e8")
    assert r.exit_code == 0, r.output
    rows = r.output.strip().splitlines()[1:]
    nccl = [line.split()[1] for line in rows if "nccl-2.19" in line]
    assert nccl == ["ring", "tree", "auto"]
    alpha_beta = [line.split()[1] for line in rows if "alpha-beta" in line]
    assert alpha_beta[-1] == "nccl" and len(alpha_beta) == 7  # the six closed forms and NCCL's own choice
    assert len(rows) == 7 + 3


def test_bad_input_exits_2():
    r = invoke(SCENARIO, "--algorithm", "ring,bogus")
    assert r.exit_code == 2 and "--algorithm" in r.output
    r = invoke(SCENARIO, "--nodes", "0,4")
    assert r.exit_code == 2 and "node counts" in r.output
    r = invoke(SCENARIO, "--model", "logp")
    assert r.exit_code == 2
    r = invoke(SCENARIO, "--set", "cluster.nodes=zero")
    assert r.exit_code == 2 and "cluster.nodes" in r.output


def test_csv_holds_the_json_rows(tmp_path):
    import csv

    js, cs = tmp_path / "rows.json", tmp_path / "rows.csv"
    args = [SCENARIO, "--nodes", "1,2", "--algorithm", "ring,tree", "--steps", "3", "--set", "model.parameters=1e8",
            "-q", "--json", str(js), "--csv", str(cs)]
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    rows = json.loads(js.read_text())["rows"]
    with open(cs, newline="") as f:
        table = list(csv.DictReader(f))
    assert set(table[0]) == set(rows[0]) and len(table) == len(rows) == 4
    for row, line in zip(rows, table):
        assert (line["algorithm"], line["model"], line["fastest"]) == (row["algorithm"], row["model"],
                                                                       "true" if row["fastest"] else "false")
        assert float(line["step_time_s"]) == row["step_time_s"] and int(line["world_size"]) == row["world_size"]
