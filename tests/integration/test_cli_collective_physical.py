"""`commsim calibrate --physical` and `commsim collective --nodes N`: a physical calibration
from 1- and 2-node logs predicting another scale, nominal hardware alone, and bad input."""

import json

import pytest
import yaml

from commsim.calibration.file import load_calibration
from commsim.cli.main import run_cli

D = "tests/data/nccl-tests-multiscale"
SNELLIUS = [f"{D}/Snellius-H100_1x4_odissei-allreduce.txt", f"{D}/Snellius-H100_1x4_odissei-allgather.txt",
            f"{D}/Snellius-H100_2x4_odissei-allreduce.txt"]


@pytest.fixture(scope="module")
def cal(tmp_path_factory):
    path = tmp_path_factory.mktemp("cal") / "snellius.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", *SNELLIUS, "--physical", "--system", "hgx-h100-4gpu",
                    "-o", str(path)]) == 0
    return path


def test_calibrate_physical_writes_every_constant_with_its_provenance(cal, capsys):
    doc = yaml.safe_load(cal.read_text())
    phys = doc["physical"]
    assert phys["nominal_system"]["nccl_version"] == "2.22"  # from the logs' header
    assert {t["kind"] for t in phys["tables"]} == {"all_reduce", "all_gather"}
    intra = phys["constants"]["intra_bw_GBps"]
    assert intra["determined"] and intra["stderr"] > 0 and intra["source"].startswith("fit: ")
    # the all_gather log cannot be fitted per level (all_reduce only): the physical fit alone
    assert "levels" not in doc
    assert load_calibration(cal).physical.max_nodes == 2


def test_collective_predicts_another_scale_with_an_interval_and_a_note(cal, tmp_path, capsys):
    out = tmp_path / "p.json"
    assert run_cli(["collective", "--calibration", str(cal), "--nodes", "8", "--gpus-per-node", "4",
                    "--sizes", "1M:1G:4", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "extrapolating: 8 nodes is 4x the largest calibrated (2)" in text
    rows = json.loads(out.read_text())
    assert [r["size_bytes"] for r in rows] == [1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30]
    fit = load_calibration(cal).physical
    pred = fit.predict("all_reduce", 8, 4, [r["size_bytes"] for r in rows])
    for r, t in zip(rows, pred.time_us):
        assert r["time_us"] == pytest.approx(t, rel=1e-12)
        assert r["low_us"] < r["time_us"] < r["high_us"]
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * 31 / 32)
        assert r["note"].startswith("extrapolating")


def test_collective_on_nominal_hardware_and_overrides(capsys):
    assert run_cli(["collective", "--system", "dgx-h100", "--nodes", "1", "--sizes", "1G:1G",
                    "--nccl-algo", "ring", "--nccl-proto", "Simple", "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["chosen"] == "ring/Simple" and rows[0]["low_us"] is None


@pytest.mark.parametrize("args, message", [
    (["--system", "dgx-h100", "--nodes", "4", "--nccl-algo", "nvls"], "--nccl-algo: nvls cannot run all_reduce on 4 x 8 of dgx-h100: NVLS across nodes needs CollNet"),
    (["--system", "dgx-h100", "--nodes", "2", "--gpus-per-node", "9"], "--gpus-per-node: expected 1..8"),
    (["--system", "nope", "--nodes", "2"], "--system: preset: unknown system preset 'nope'"),
    (["--nodes", "2"], "--nodes needs --calibration CAL.yaml"),
    (["--gpus-per-node", "2", "--system", "p5"], "--gpus-per-node goes with --nodes"),
    (["--system", "hgx-h100-4gpu", "--nodes", "1", "--nccl-algo", "nvls"], "NVLS needs NVSwitch"),
])
def test_bad_physical_predictions_are_one_line_exit_2(args, message, capsys):
    assert run_cli(["collective", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_calibrate_physical_needs_a_system_and_logs(tmp_path, capsys):
    out = tmp_path / "c.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", *SNELLIUS, "--physical", "-o", str(out)]) == 2
    assert "--physical needs --system PRESET" in capsys.readouterr().err
    assert run_cli(["calibrate", "--from-nccl-tests", SNELLIUS[0], "--system", "p5", "-o", str(out)]) == 2
    assert "go with --physical" in capsys.readouterr().err
    assert not out.exists()


def test_a_calibration_without_a_physical_fit_says_how_to_write_one(tmp_path, capsys):
    cal = tmp_path / "old.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", SNELLIUS[0], "-o", str(cal)]) == 0
    capsys.readouterr()
    assert run_cli(["collective", "--calibration", str(cal), "--nodes", "4"]) == 2
    assert "has no physical fit" in capsys.readouterr().err


# an all_gather log among them: no per-level table fit, the file holds the physical fit only
POLARIS = [f"{D}/Polaris-A100_2x4_alcf-nccl2.18-allreduce.txt", f"{D}/Polaris-A100_8x4_alcf-nccl2.18-allreduce.txt",
           f"{D}/Polaris-A100_2x4_alcf-nccl2.18-allgather.txt"]


def test_a_physical_only_calibration_in_a_scenario_names_the_file_and_key(tmp_path, capsys):
    # it once failed inside the run as "calibration has no link level 'intra_node' (it has )"
    cal = tmp_path / "polaris.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", *POLARIS, "--physical", "--system", "polaris",
                    "-o", str(cal)]) == 0
    assert load_calibration(cal).levels == ()
    capsys.readouterr()
    assert run_cli(["run", "scenarios/validate_gloo_2rank.yaml", "-q", "--calibration", str(cal)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"commsim: error: scenarios/validate_gloo_2rank.yaml (after --calibration {str(cal)!r}): "
                   f"calibration: {cal}: the calibration has only a physical fit, which prices NCCL's own "
                   "collectives: expected collective.algorithm nccl (collective.nccl_algo: ring runs NCCL's ring), "
                   "got ring"]
    # with collective.algorithm nccl the same file prices the run
    assert run_cli(["run", "scenarios/validate_gloo_2rank.yaml", "-q", "--calibration", str(cal),
                    "--set", "collective.algorithm=nccl"]) == 0


def test_collective_level_the_calibration_lacks_names_the_file_and_option(tmp_path, capsys):
    cal = tmp_path / "one_node.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", SNELLIUS[0], "-o", str(cal)]) == 0
    capsys.readouterr()
    assert run_cli(["collective", "--calibration", str(cal), "--ranks", "4", "--level", "inter_node"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"commsim: error: {cal}: --level: calibration has no link level 'inter_node' (it has intra_node)"]


@pytest.mark.parametrize("tier, key", [
    ({"nodes_below": float("inf")}, "nodes_below"),
    ({"nodes_below": 2, "oversubscription": float("nan")}, "oversubscription"),
    ({"nodes_below": 2, "latency_us": float("inf")}, "latency_us"),
])
def test_a_hand_edited_switch_tier_is_one_line_naming_its_key(cal, tmp_path, tier, key, capsys):
    # nodes_below: .inf was a traceback (int(inf)); a NaN oversubscription or an infinite latency
    # was read and priced: RuntimeWarnings and NaN/inf times
    doc = yaml.safe_load(cal.read_text())
    doc["physical"]["nominal_system"]["tiers"] = [tier]
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(doc))
    assert run_cli(["collective", "--calibration", str(edited), "--nodes", "64", "--gpus-per-node", "4",
                    "--sizes", "1M:1G:32"]) == 2
    err = capsys.readouterr().err
    assert f"{edited}: physical.nominal_system.tiers[0].{key}: expected" in err
    assert "Traceback" not in err and "Warning" not in err and len(err.strip().splitlines()) == 1


def test_several_node_counts_give_one_table_each_and_rows_that_say_their_scale(tmp_path, capsys):
    """A scaling table in one call: --nodes 2,16,128 is the three single-count runs, in order."""
    one = []
    for n in (2, 16, 128):
        out = tmp_path / f"n{n}.json"
        assert run_cli(["collective", "--system", "dgx-h100", "--nodes", str(n), "--sizes", "1M:1G:32", "-q",
                        "--json", str(out)]) == 0
        one += json.loads(out.read_text())
    out = tmp_path / "all.json"
    capsys.readouterr()
    assert run_cli(["collective", "--system", "dgx-h100", "--nodes", "2,16,128", "--sizes", "1M:1G:32",
                    "--json", str(out)]) == 0
    text = capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert rows == one
    assert [(r["nodes"], r["gpus_per_node"]) for r in rows] == [(n, 8) for n in (2, 16, 128) for _ in range(3)]
    heads = [line for line in text.splitlines() if line.startswith("# commsim collective:")]
    assert [h.split(",")[1].strip() for h in heads] == ["2 nodes x 8 GPUs", "16 nodes x 8 GPUs", "128 nodes x 8 GPUs"]


@pytest.mark.parametrize("nodes, message", [
    ("0", "expected comma-separated positive node counts"), ("2,2", "expected each value once"),
    ("2,x", "expected comma-separated positive node counts"), ("2,200000", "expected a world size up to 1,048,576"),
])
def test_bad_node_lists_are_one_line(capsys, nodes, message):
    assert run_cli(["collective", "--system", "dgx-h100", "--nodes", nodes]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
