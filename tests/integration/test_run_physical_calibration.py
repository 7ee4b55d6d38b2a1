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
            "dgx-h100; extrapolating: 16 nodes is 8x the largest calibrated (2)") in " ".join(out.split())


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
    assert text[1] == "# extrapolating: 16 nodes is 8x the largest calibrated (2)"
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
