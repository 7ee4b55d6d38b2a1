"""Odd but plausible requests of a demanding user, each refused with one line and exit 2 (or
served correctly): limits the other modes had, addresses and logs of unusual shape."""

import pytest

from commsim.cli.main import run_cli

# A hand-written calibration: one level, one range, a one-row measured table.
CALIBRATION = """\
format: commsim-calibration/1
provenance: {backend: nccl-tests, world_size: 8}
levels:
  intra_node:
    alpha_s: 2.7e-06
    beta_Bps: 1.5e+11
    ranges:
    - {min_size_bytes: 8, alpha_s: 2.7e-06, beta_Bps: 1.5e+11}
    table:
      columns: [size_bytes, time_s, algbw_Bps, busbw_Bps, world_size]
      rows:
      - [8, 3.484e-05, 229621.1251435132, 401836.9690011481, 8]
"""


@pytest.fixture
def calibration(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text(CALIBRATION)
    return str(path)


def test_the_calibrations_curve_at_a_world_size_past_the_limit_is_refused(calibration, capsys):
    # --nodes and SCENARIO --ranks stop at the loader's world-size limit; the measured-curve
    # mode printed times for 1e23 ranks
    assert run_cli(["collective", "--calibration", calibration, "--ranks", str(10 ** 23), "--sizes", "8:64"]) == 2
    err = capsys.readouterr().err
    assert "--ranks: expected a world size up to 1,048,576, got 100,000,000,000,000,000,000,000" in err
    assert run_cli(["collective", "--calibration", calibration, "--ranks", str(2 ** 20), "--sizes", "8:8"]) == 0


def test_a_dask_scheduler_address_without_a_port_is_refused_before_anything_is_written(tmp_path, capsys):
    pytest.importorskip("distributed")
    out = tmp_path / "sweep"
    code = run_cli(["sweep", "scenarios/seed_1b_8gpu_ib100.yaml", "--steps", "2", "-q", "-o", str(out),
                    "--grid", "cluster.nodes=1,2", "--dask-scheduler", "bogus"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--dask-scheduler bogus: expected a scheduler address" in err
    assert not out.exists()


def _one_rank_network_sweep(out):
    return run_cli(["sweep", "scenarios/seed_1b_8gpu_ib100.yaml", "--steps", "2", "-j", "1", "-q", "-o", str(out),
                    "--set", "cluster.nodes=1", "--grid", "cluster.inter_node.bandwidth=100 Gbps,200 Gbps", "--plot"])


def test_a_sweep_of_one_rank_stores_no_nan_busbw_curve_and_plots(tmp_path):
    # one rank runs no all-reduce: its busbw curve was all NaN, written as bare NaN into
    # results.json, and --plot then died on a log axis with nothing positive (a traceback)
    out = tmp_path / "sweep"
    assert _one_rank_network_sweep(out) == 0
    text = (out / "results.json").read_text()
    assert "NaN" not in text
    assert (out / "step_time_by_cluster_inter_node_bandwidth.svg").is_file()
    assert not (out / "busbw_vs_size.svg").exists()


def test_plot_of_an_older_results_json_with_a_nan_curve_skips_it(tmp_path):
    import json

    out = tmp_path / "sweep"
    assert _one_rank_network_sweep(out) == 0
    doc = json.loads((out / "results.json").read_text())
    doc["busbw_curves"] = [{"label": "scenario", "world_size": 1, "algorithm": "ring", "model": "alpha-beta",
                            "size_bytes": [8, 16], "busbw_Bps": [float("nan"), float("nan")]}]
    (out / "results.json").write_text(json.dumps(doc))
    assert run_cli(["plot", str(out)]) == 0
    assert not (out / "busbw_vs_size.svg").exists()


def test_a_physical_fit_alone_on_a_scenarios_cluster_is_refused_naming_the_file(tmp_path, capsys):
    # the algorithms are priced by the calibration's link levels; a physical-only file failed
    # mid-table as "calibration has no link level 'intra_node' (it has )", naming no file. A
    # physical fit prices NCCL's own choice (--algorithm nccl), not the alpha-beta ring
    cal = tmp_path / "phys.yaml"
    log = "tests/data/nccl-tests-multiscale/Snellius-H100_1x4_odissei-allgather.txt"  # no all-reduce: no level
    assert run_cli(["calibrate", "--from-nccl-tests", log, "--physical", "--system", "dgx-h100", "-o", str(cal)]) == 0
    capsys.readouterr()
    assert run_cli(["collective", "scenarios/32gpu_throttle.yaml", "--calibration", str(cal), "--algorithm", "ring",
                    "--sizes", "8:64"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"commsim: error: --calibration {cal}: a physical fit prices NCCL's own collectives only: "
                          "expected --algorithm nccl, got ring")
    assert err.count("\n") == 1
    assert run_cli(["collective", "scenarios/32gpu_throttle.yaml", "--calibration", str(cal), "--algorithm", "nccl",
                    "--sizes", "8:64", "-q"]) == 0


def test_level_with_a_scenario_is_refused_not_ignored(calibration, capsys):
    assert run_cli(["collective", "scenarios/32gpu_throttle.yaml", "--calibration", calibration, "--level", "flat",
                    "--algorithm", "ring", "--sizes", "8:64"]) == 2
    assert "--level goes with --calibration CAL --ranks N (no SCENARIO)" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [["/nonexistent/scenario.yaml"], ["scenarios/32gpu_throttle.yaml", "--mitigations", "bogus"]])
def test_compare_leaves_no_plot_folder_behind_on_bad_input(bad, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "plots"
    assert run_cli(["compare", *bad, "--plot", str(folder)]) == 2
    assert not folder.exists()  # made before the scenario was read, left empty


def test_compare_refuses_a_new_plot_folder_named_like_a_figure(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    target = tmp_path / "compare.svg"
    assert run_cli(["compare", "scenarios/32gpu_throttle.yaml", "--plot", str(target)]) == 2
    assert "expected a folder (compare.png and compare.svg are written into it), got a figure's file name (.svg)" in \
        capsys.readouterr().err
    assert not target.exists()  # was a folder named compare.svg


def test_calibrate_takes_quiet_as_every_other_command_does(tmp_path, capsys):
    log = "tests/data/nccl-tests/A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt"
    out = tmp_path / "cal.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", log, "-o", str(out), "-q"]) == 0
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")
    assert out.read_text().startswith("# commsim calibration")
