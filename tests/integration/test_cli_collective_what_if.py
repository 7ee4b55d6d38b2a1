"""`commsim collective --nodes N --with FIELD=VALUE`: the cluster you will buy when it is not the
one you measured (4 NICs per node instead of 8, another NIC rate, a switch tier), from nominal
hardware or from a calibration, and its bad input."""

import json

import numpy as np
import pytest

from commsim.calibration.file import load_calibration
from commsim.calibration.physical_prediction import physical_rows
from commsim.cli.main import run_cli
from commsim.network.system import preset, with_fields

D = "tests/data/nccl-tests-multiscale"
SNELLIUS = [f"{D}/Snellius-H100_1x4_odissei-allreduce.txt", f"{D}/Snellius-H100_1x4_odissei-allgather.txt",
            f"{D}/Snellius-H100_2x4_odissei-allreduce.txt"]
SIZES = [float(1 << k) for k in range(20, 31, 2)]


@pytest.fixture(scope="module")
def cal(tmp_path_factory):
    path = tmp_path_factory.mktemp("cal") / "snellius.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", *SNELLIUS, "--physical", "--system", "hgx-h100-4gpu",
                    "-q", "-o", str(path)]) == 0
    return path


def rows_of(tmp_path, *args):
    out = tmp_path / "rows.json"
    assert run_cli(["collective", *args, "--sizes", "1M:1G:4", "-q", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_half_the_nics_at_half_the_rate_on_nominal_hardware(tmp_path, capsys):
    base = rows_of(tmp_path, "--system", "dgx-h100", "--nodes", "16")
    fewer = rows_of(tmp_path, "--system", "dgx-h100", "--nodes", "16", "--with", "nics_per_node=4",
                    "--with", "nic_bw_GBps=23.75")
    # the same prediction as the library gives for that system
    system = with_fields(preset("dgx-h100", "t"), {"nics_per_node": 4, "nic_bw_GBps": 23.75}, "--with")
    expected, _ = physical_rows("all_reduce", 16, 8, SIZES, system=system)
    assert [r["time_us"] for r in fewer] == [r["time_us"] for r in expected]
    # a quarter of the node's network: at 1 GB, where bandwidth binds, about 4x the time
    assert 3.5 < fewer[-1]["time_us"] / base[-1]["time_us"] < 4.2
    assert all(f["time_us"] >= b["time_us"] for f, b in zip(fewer, base))
    assert run_cli(["collective", "--system", "dgx-h100", "--nodes", "16", "--sizes", "1G", "--with",
                    "nics_per_node=4"]) == 0
    assert "nominal dgx-h100 with nics_per_node=4," in capsys.readouterr().out


def test_a_switch_tier_slows_a_cluster_that_spans_it(tmp_path):
    flat = rows_of(tmp_path, "--system", "dgx-h100", "--nodes", "16")
    tiered = rows_of(tmp_path, "--system", "dgx-h100", "--nodes", "16", "--with",
                     "tiers=[{nodes_below: 4, oversubscription: 2}]")
    assert tiered[-1]["time_us"] > 1.5 * flat[-1]["time_us"]


def test_a_calibrations_what_if_keeps_its_constants_and_drops_the_measured_residuals(cal, tmp_path):
    fit = load_calibration(cal).physical
    # the measured scale (2 x 4): its table corrects the plain prediction; a what-if is other hardware
    plain = rows_of(tmp_path, "--calibration", str(cal), "--nodes", "2")
    same = rows_of(tmp_path, "--calibration", str(cal), "--nodes", "2", "--with", f"nics_per_node={fit.system.nics_per_node}")
    physical = fit.predict("all_reduce", 2, 4, SIZES, use_measured=False)
    assert [r["time_us"] for r in same] == pytest.approx(list(physical.time_us), rel=1e-12)
    assert [r["time_us"] for r in plain] != [r["time_us"] for r in same]
    assert "what-if nics_per_node=" in same[0]["note"] and "measured scale" in plain[0]["note"]
    # a fitted constant the what-if sets is the user's value: out of the covariance, the interval narrower
    name = "net_hop_us"
    assert name in fit.free
    w = fit.what_if({name: 10.0})
    assert name not in w.free and w.covariance.shape == (len(fit.free) - 1,) * 2
    assert w.constants[name].value == 10.0 and w.constants[name].source == "--with"
    kept = [fit.free.index(n) for n in w.free]
    assert np.array_equal(w.covariance, fit.covariance[np.ix_(kept, kept)])
    slow = rows_of(tmp_path, "--calibration", str(cal), "--nodes", "8", "--with", f"{name}=200")
    fast = rows_of(tmp_path, "--calibration", str(cal), "--nodes", "8")
    assert all(s["time_us"] > f["time_us"] and s["low_us"] < s["time_us"] < s["high_us"] for s, f in zip(slow, fast))


@pytest.mark.parametrize("args, message", [
    (["--with", "nics_per_node=0"], "--with nics_per_node: expected an integer >= 1, got 0"),
    (["--with", "bogus=1"], "--with bogus: not a field of a system (expected one of gpu_arch,"),
    (["--with", "name=x"], "--with name: not a field of a system"),
    (["--with", "nvls=maybe"], "--with nvls: expected true or false, got 'maybe'"),
    (["--with", "nics_per_node"], "--with 'nics_per_node': expected FIELD=VALUE (e.g. nics_per_node=4)"),
    (["--with", "tiers=[{nodes_below: 0}]"], "--with tiers[0].nodes_below: expected an integer >= 1, got 0"),
    (["--with", "nic_bw_GBps=[1"], "--with 'nic_bw_GBps=[1': invalid YAML"),
    (["--with", "nccl_version=2.2x"], "--with nccl_version: expected an NCCL release like 2.21 or 2.27.3"),
])
def test_bad_what_if_is_one_line_naming_the_field(capsys, args, message):
    assert run_cli(["collective", "--system", "dgx-h100", "--nodes", "4", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("commsim: error: " + message) and "\n" not in err


def test_with_needs_nodes(capsys):
    assert run_cli(["collective", "scenarios/dgx_h100_scaling.yaml", "--with", "nics_per_node=4"]) == 2
    assert "--with goes with --nodes N" in capsys.readouterr().err


def test_a_release_keeps_its_digits(tmp_path):
    """2.20 read as YAML is the number 2.2; as a release it is 2.20 (its tables differ from 2.2's)."""
    rows = rows_of(tmp_path, "--system", "dgx-h100", "--nodes", "2", "--with", "nccl_version=2.20")
    assert rows and run_cli(["collective", "--system", "dgx-h100", "--nodes", "2", "--sizes", "1G",
                             "--with", "nccl_version=2.20"]) == 0
