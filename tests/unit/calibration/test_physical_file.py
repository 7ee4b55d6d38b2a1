"""The physical: section of a calibration file: written, read back to the same predictions,
read strictly (one-line errors naming the key path), and old files without it still load."""

import copy
import os
from dataclasses import replace

import numpy as np
import pytest
import yaml

from commsim.calibration import CalibrationError
from commsim.calibration.file import calibration_from_dict, calibration_to_dict, dump_calibration, load_calibration
from commsim.calibration.physical_file import physical_from_dict, physical_to_dict
from commsim.calibration.physical_fit import Measurement, fit_physical
from commsim.calibration.records import Calibration, Provenance
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import preset

SIZES = np.array([2.0 ** k for k in range(12, 31, 2)])


@pytest.fixture(scope="module")
def fit():
    nominal = replace(preset("hgx-h100-4gpu"), nccl_version="2.22")
    truth = nominal.with_constants({"intra_bw_GBps": 300.0, "nic_bw_GBps": 20.0, "launch_us": 8.0}, "truth")
    ms = []
    for nodes, gpn in ((1, 4), (2, 4)):
        t = plan("all_reduce", truth, nodes, gpn, choice_system=nominal).time_us(SIZES)
        ms.append(Measurement(f"log{nodes}x{gpn}", "all_reduce", nodes, gpn, SIZES, t * (1 + 0.01 * np.sin(SIZES))))
    return fit_physical(ms, nominal)


def _cal(fit, levels=()):
    return Calibration(levels, Provenance("nccl-tests", 8), None, fit)


def test_round_trip_gives_the_same_predictions_and_the_same_text(fit, tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text(dump_calibration(_cal(fit)))
    back = load_calibration(path).physical
    assert dump_calibration(_cal(back)) == path.read_text()
    for nodes in (2, 8):
        a = fit.predict("all_reduce", nodes, 4, SIZES)
        b = back.predict("all_reduce", nodes, 4, SIZES)
        np.testing.assert_allclose(b.time_us, a.time_us, rtol=1e-12)
        np.testing.assert_allclose(b.high_us, a.high_us, rtol=1e-9)
        assert a.note == b.note
    assert "extrapolating: 8 nodes is 4x" in back.predict("all_reduce", 8, 4, SIZES).note
    assert back.constants["intra_bw_GBps"].determined and back.constants["intra_bw_GBps"].stderr > 0


def test_every_constant_records_value_stderr_and_source(fit):
    doc = physical_to_dict(fit)
    for name, c in doc["constants"].items():
        bandwidth = name in ("intra_bw_GBps", "nic_bw_GBps")
        assert set(c) == {"value", "stderr", "determined", "logs", "source"} | (
            {"line_rate_GBps", "at_line_rate"} if bandwidth else set())
        assert c["source"].startswith("fit: ") == c["determined"], name
        assert (c["stderr"] is None) == (not c["determined"]), name


def test_a_physical_fit_alone_loads_and_refuses_level_lookups(fit):
    doc = calibration_to_dict(_cal(fit))
    assert "levels" not in doc
    cal = calibration_from_dict(yaml.safe_load(dump_calibration(_cal(fit))), "x.yaml")
    assert cal.physical is not None and cal.levels == ()
    with pytest.raises(CalibrationError, match="no link level, only a physical fit"):
        cal.level()


def test_neither_levels_nor_physical_is_refused_naming_the_key():
    doc = {"format": "commsim-calibration/1", "provenance": {"backend": "x", "world_size": 2}}
    with pytest.raises(CalibrationError, match="missing key 'levels'"):
        calibration_from_dict(doc, "x.yaml")


@pytest.mark.parametrize("edit, where", [
    (lambda d: d.pop("free"), "physical: missing key 'free'"),
    (lambda d: d["constants"]["nic_bw_GBps"].update(value=-1.0), "physical.constants.nic_bw_GBps.value"),
    (lambda d: d["constants"].pop("launch_us"), "physical.constants: missing key 'launch_us'"),
    (lambda d: d["covariance"].pop(), "physical.covariance"),
    (lambda d: d["free"].append("ll_ch_GBps") if "ll_ch_GBps" not in d["free"] else d["free"].pop(), "physical.free"),
    (lambda d: d["nominal_system"].update(gpu_arch="kepler"), "physical.nominal_system.gpu_arch"),
    (lambda d: d["nominal_system"].update(nccl_version="abc"), "physical.nominal_system.nccl_version"),
    (lambda d: d.update(rms_log_error=1e308), "physical.rms_log_error"),  # overflowed rms**2 (OverflowError)
    (lambda d: d.update(rms_log_error=-0.1), "physical.rms_log_error"),
    (lambda d: d["nominal_system"].update(bogus=1), "physical.nominal_system.bogus"),
    (lambda d: d["tables"][0].update(kind="broadcast"), r"physical.tables\[0\].kind"),
    (lambda d: d["tables"][0]["rows"][0].__setitem__(1, 0.0), r"physical.tables\[0\].rows\[0\]\[1\] \(time_us\)"),
    (lambda d: d["tables"][1].update(gpus_per_node=9), r"physical.tables\[1\].gpus_per_node"),
])
def test_strict_reading_names_the_key_path(fit, edit, where):
    doc = physical_to_dict(fit)
    bad = copy.deepcopy(doc)
    edit(bad)
    with pytest.raises(CalibrationError, match=where):
        physical_from_dict(bad, "cal.yaml")
    physical_from_dict(doc, "cal.yaml")  # the unedited section reads


def test_old_files_without_physical_still_load(tmp_path):
    here = os.path.dirname(__file__)
    log = os.path.join(here, "..", "..", "data", "nccl-tests", "H100-AWS-p5-EFA-2nodes_16ranks_awsome-distributed-training.txt")
    from commsim.calibration.from_logs import calibration_from_nccl_logs

    cal, _ = calibration_from_nccl_logs([log])
    path = tmp_path / "old.yaml"
    path.write_text(dump_calibration(cal))
    assert "physical" not in path.read_text()
    assert load_calibration(path).physical is None


def test_the_line_rate_bound_is_written_read_back_and_enforced(fit):
    doc = physical_to_dict(fit)
    assert doc["constants"]["nic_bw_GBps"]["line_rate_GBps"] == 25.0
    back = physical_from_dict(copy.deepcopy(doc), "cal.yaml")
    assert back.constants["nic_bw_GBps"].line_rate == 25.0
    assert back.constants["nic_bw_GBps"].at_line_rate == fit.constants["nic_bw_GBps"].at_line_rate
    bad = copy.deepcopy(doc)
    bad["constants"]["nic_bw_GBps"]["value"] = 30.0
    with pytest.raises(CalibrationError, match=r"cal.yaml: physical.constants.nic_bw_GBps.value: expected at most the line rate 25 GB/s"):
        physical_from_dict(bad, "cal.yaml")
    bad = copy.deepcopy(doc)
    bad["constants"]["nic_bw_GBps"]["at_line_rate"] = "yes"
    with pytest.raises(CalibrationError, match="physical.constants.nic_bw_GBps.at_line_rate: expected true or false"):
        physical_from_dict(bad, "cal.yaml")
    old = copy.deepcopy(doc)  # a file written before the bound existed still loads
    for c in old["constants"].values():
        c.pop("line_rate_GBps", None), c.pop("at_line_rate", None)
    assert physical_from_dict(old, "cal.yaml").constants["nic_bw_GBps"].line_rate is None
