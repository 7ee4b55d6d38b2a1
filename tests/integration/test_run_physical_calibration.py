"""A scenario priced by a calibration's physical fit: `calibration: CAL` with
`collective.algorithm: nccl` runs, sweeps and compares NCCL's collectives on the calibrated
constants at the scenario's own scale (the issue: under a calibration only the alpha-beta ring
was allowed, and a physical fit was refused by `run` altogether)."""

import json

import numpy as np
import pytest

from commsim.analysis.report import summarize
from commsim.cli.main import run_cli
from commsim.scenario.loader import load_scenario
from commsim.sim.engine import simulate

D = "tests/data/nccl-tests-multiscale"
LOGS = [f"{D}/H100-cluster01_1x8_xxrjun.txt", f"{D}/H100-cluster01_2x1_xxrjun-smoke.txt"]


@pytest.fixture(scope="module")
def cal(tmp_path_factory):
    path = tmp_path_factory.mktemp("cal") / "h100.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", *LOGS, "--physical", "--system", "dgx-h100", "-q",
                    "-o", str(path)]) == 0
    return path


def scenario_file(tmp_path, cal, collective="{algorithm: nccl}", nodes=16, extra=""):
    path = tmp_path / "sc.yaml"
    path.write_text(f"""name: phys
steps: 3
cluster: {{preset: dgx-h100, nodes: {nodes}}}
model: {{parameters: 2e8, grad_dtype: bf16}}
compute: {{forward: 20 ms, backward: 40 ms}}
collective: {collective}
{extra}calibration: {cal}
""")
    return path


@pytest.mark.parametrize("nccl_algo", [None, "ring", "tree"])
def test_the_run_prices_every_bucket_with_the_calibrated_system(tmp_path, cal, nccl_algo):
    collective = "{algorithm: nccl" + (f", nccl_algo: {nccl_algo}" if nccl_algo else "") + "}"
    sc = load_scenario(scenario_file(tmp_path, cal, collective))
    result = simulate(sc)
    fit = sc.calibration.physical
    plan = fit.plan("all_reduce", 16, 8, algorithm=nccl_algo)
    expected = float(np.sum(plan.time_us(result.bucket_sizes))) * 1e-6
    assert summarize(sc, result)["comm_time_s"] == pytest.approx(expected, rel=1e-9)
    if nccl_algo:
        assert {a for a, _ in plan.choose(result.bucket_sizes)} == {nccl_algo}
    # the calibrated constants, not the scenario's nominal links: the same run without them differs
    nominal = load_scenario(scenario_file(tmp_path, cal, collective), overrides=["calibration=null"])
    assert abs(summarize(nominal, simulate(nominal))["comm_time_s"] / expected - 1) > 0.01


def test_run_says_whose_fit_prices_it_and_how_far_it_extrapolates(tmp_path, cal, capsys):
    assert run_cli(["run", str(scenario_file(tmp_path, cal, "{algorithm: nccl, nccl_algo: ring}"))]) == 0
    out = capsys.readouterr().out
    assert ("note: all-reduces: NCCL's choice within nccl_algo ring, priced by the calibration's physical fit of "
            "dgx-h100; extrapolating: 16 nodes is 8x the largest calibrated (2); 8 GPUs per node across nodes, "
            "where the logs crossed nodes with at most 1") in " ".join(out.split())


def test_algorithms_compares_nccls_own_algorithms_under_the_fit(tmp_path, cal, capsys):
    out = tmp_path / "rows.json"
    assert run_cli(["algorithms", str(scenario_file(tmp_path, cal)), "--nodes", "1,16", "-q", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    names = {n: [r["algorithm"] for r in rows if r["nodes"] == n] for n in (1, 16)}
    assert names[1][0] == names[16][0] == "nccl" and "nccl:ring" in names[16] and "nccl:tree" in names[16]
    # NVLS runs inside one node; across nodes without SHARP it cannot, so that row is left out
    assert "nccl:nvls" in names[1] and "nccl:nvls" not in names[16]
    # NCCL's choice is one of the algorithms it chose from: no faster than the fastest of them
    at16 = {r["algorithm"]: r["comm_time_s"] for r in rows if r["nodes"] == 16}
    assert at16["nccl"] >= min(v for k, v in at16.items() if k != "nccl") - 1e-12


@pytest.mark.parametrize("collective, extra, key, says", [
    ("{algorithm: ring}", "", "calibration", "the calibration has only a physical fit, which prices NCCL's own "
     "collectives: expected collective.algorithm nccl"),
    ("{algorithm: ring, nccl_algo: ring}", "", "collective.nccl_algo", "expected collective.algorithm nccl"),
    ("{algorithm: nccl, nccl_algo: nvls}", "", "collective.nccl_algo", "nvls cannot run all_reduce on 16 x 8"),
    ("{algorithm: nccl, nccl_algo: bogus}", "", "collective.nccl_algo", "unknown name 'bogus'"),
    ("{algorithm: nccl, nccl_proto: 'LL,'}", "", "collective.nccl_proto", "without empty items"),
    ("{algorithm: nccl, nccl_algo: 3}", "", "collective.nccl_algo", "expected names like NCCL_ALGO's"),
])
def test_bad_combinations_are_refused_at_their_key(tmp_path, cal, capsys, collective, extra, key, says):
    assert run_cli(["run", str(scenario_file(tmp_path, cal, collective, extra=extra)), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{key}: " in err and says in err, err


def test_link_levels_alone_cannot_price_nccl(tmp_path, capsys):
    levels = tmp_path / "levels.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", LOGS[0], "-q", "-o", str(levels)]) == 0
    assert run_cli(["run", str(scenario_file(tmp_path, levels)), "-q"]) == 2
    err = capsys.readouterr().err
    assert "calibration: " in err and "collective.algorithm nccl is priced by a physical fit" in err, err


def test_algorithms_refuses_the_ring_under_a_physical_fit(tmp_path, cal, capsys):
    assert run_cli(["algorithms", str(scenario_file(tmp_path, cal)), "--algorithm", "ring", "-q"]) == 2
    assert "prices NCCL's own collectives (nccl, nccl:ALGO) only: got ring" in capsys.readouterr().err


def test_collective_of_a_scenario_prices_nccl_with_a_physical_calibration(tmp_path, cal, capsys):
    sc_path = scenario_file(tmp_path, cal)
    out = tmp_path / "rows.json"
    assert run_cli(["collective", str(sc_path), "--calibration", str(cal), "--algorithm", "nccl", "--sizes", "1M:64M:4",
                    "--json", str(out)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].endswith(f"calibration {cal} (physical fit), algorithm nccl (runs: nccl:nvls_tree/Simple, "
                            "nccl:tree/LL128)")
    assert text[1] == ("# extrapolating: 16 nodes is 8x the largest calibrated (2); 8 GPUs per node across nodes, "
                       "where the logs crossed nodes with at most 1")
    rows = json.loads(out.read_text())
    sizes = [r["size_bytes"] for r in rows]
    plan = load_scenario(sc_path).calibration.physical.plan("all_reduce", 16, 8)
    assert [r["time_us"] for r in rows] == pytest.approx(list(plan.time_us(sizes)), rel=1e-9)
    # the ring of the alpha-beta model is not what the fit prices
    assert run_cli(["collective", str(sc_path), "--calibration", str(cal), "--algorithm", "ring", "-q"]) == 2
    assert "a physical fit prices NCCL's own collectives only: expected --algorithm nccl, got ring" in \
        capsys.readouterr().err


def test_the_shipped_calibrated_scenario_holds_todays_fit(tmp_path):
    """scenarios/dgx_h100_calibrated.yaml is priced by scenarios/calibrations/h100_cluster01_physical.yaml,
    a fit of two shipped logs: refitting them must give the same system, or the file is stale
    (rewrite it with the command in the scenario's header)."""
    fresh = tmp_path / "fresh.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", *LOGS, "--physical", "--system", "dgx-h100", "-q",
                    "-o", str(fresh)]) == 0
    from commsim.calibration.file import load_calibration

    shipped = load_scenario("scenarios/dgx_h100_calibrated.yaml").calibration.physical
    refit = load_calibration(fresh).physical
    # rel 1e-4: another machine's floating point may end the fit's iterations a few digits apart;
    # a change to the model moves its constants by far more
    for name in refit.system.FIT_NAMES:
        assert getattr(shipped.system, name) == pytest.approx(getattr(refit.system, name), rel=1e-4), name
    assert shipped.nominal == refit.nominal


SNELLIUS = [f"{D}/Snellius-H100_1x4_odissei-allreduce.txt", f"{D}/Snellius-H100_2x4_odissei-allreduce.txt"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A calibration with both link levels and a physical fit (what calibrate --physical writes
    from logs that have all-reduce tables), of a 4-GPU node."""
    path = tmp_path_factory.mktemp("mixed") / "snellius.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", *SNELLIUS, "--physical", "--system", "hgx-h100-4gpu", "-q",
                    "-o", str(path)]) == 0
    from commsim.calibration.file import load_calibration

    cal = load_calibration(path)
    assert cal.levels and cal.physical is not None
    return path


@pytest.mark.parametrize("extra, key, says", [
    # the fit (or the keys) price all-reduces, and a sharded run has none: it was run on the
    # ring halves while the note said the fit priced it
    ("ddp: {sharding: zero2}\n", "ddp.sharding", "a calibration's physical fit prices NCCL's all-reduces, and a "
     "zero2 run has none"),
    ("ddp: {sharding: fsdp}\n", "ddp.sharding", "expected ddp.sharding none, got fsdp"),
])
def test_a_sharded_run_under_the_fit_is_refused(tmp_path, cal, capsys, extra, key, says):
    assert run_cli(["run", str(scenario_file(tmp_path, cal, extra=extra)), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{key}: " in err and says in err, err


def test_a_cluster_the_fitted_system_cannot_hold_is_refused_at_its_key(tmp_path, mixed, capsys):
    # the 4-GPU fit under the scenario's 8 GPUs per node: "scale: gpus_per_node: ..." named no file
    assert run_cli(["run", str(scenario_file(tmp_path, mixed)), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"commsim: error: {tmp_path / 'sc.yaml'}: cluster.gpus_per_node: expected 1..4 "
                          "(hgx-h100-4gpu has 4 GPUs per node), got 8: the calibration's physical fit is of "
                          "hgx-h100-4gpu"), err


def test_collective_uses_the_fit_of_a_calibration_with_levels_too(tmp_path, mixed, capsys):
    sc_path = scenario_file(tmp_path, mixed)
    out = tmp_path / "rows.json"
    assert run_cli(["collective", str(sc_path), "--set", "cluster.gpus_per_node=4", "--calibration", str(mixed),
                    "--algorithm", "nccl", "--sizes", "1M:1G:32", "-q", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    plan = load_scenario(sc_path, overrides=["cluster.gpus_per_node=4"]).calibration.physical.plan("all_reduce", 16, 4)
    assert [r["time_us"] for r in rows] == pytest.approx(list(plan.time_us([r["size_bytes"] for r in rows])), rel=1e-9)


def test_algorithms_defaults_to_what_the_calibration_prices(tmp_path, mixed, capsys):
    out = tmp_path / "rows.json"
    assert run_cli(["algorithms", str(scenario_file(tmp_path, mixed)), "--set", "cluster.gpus_per_node=4", "--steps",
                    "2", "-q", "--json", str(out)]) == 0
    names = [r["algorithm"] for r in json.loads(out.read_text())["rows"]]
    assert names[:2] == ["ring", "nccl"] and "nccl:tree" in names


def test_algorithms_of_only_unrunnable_algorithms_says_why(tmp_path, cal, capsys):
    assert run_cli(["algorithms", str(scenario_file(tmp_path, cal)), "--algorithm", "nccl:nvls", "-q"]) == 2
    assert ("--algorithm nccl:nvls: nothing NCCL can run: nvls cannot run all_reduce on 16 x 8 of dgx-h100"
            in capsys.readouterr().err)


def test_the_nccl_row_is_the_scenarios_own_choice(tmp_path, cal):
    path = scenario_file(tmp_path, cal, "{algorithm: nccl, nccl_algo: tree}")
    out = tmp_path / "rows.json"
    assert run_cli(["algorithms", str(path), "--algorithm", "nccl", "-q", "--json", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    sc = load_scenario(path)
    assert row["comm_time_s"] == pytest.approx(summarize(sc, simulate(sc))["comm_time_s"], rel=1e-12)


def test_a_protocol_selection_of_the_wrong_type_names_protocols(tmp_path, cal, capsys):
    assert run_cli(["run", str(scenario_file(tmp_path, cal, "{algorithm: nccl, nccl_proto: 0}")), "-q"]) == 2
    assert "collective.nccl_proto: expected names like NCCL_PROTO's (LL, LL,LL128 or ^Simple), got 0" in \
        capsys.readouterr().err
