"""The physical: section's uncertainty, read strictly: a covariance that is not positive
semi-definite, or a negative standard error, is refused naming its key path (before, either
loaded and gave NaN intervals and a numpy RuntimeWarning in every prediction)."""

import copy
import re
from dataclasses import replace

import numpy as np
import pytest

from commsim.calibration import CalibrationError
from commsim.calibration.physical_file import physical_from_dict, physical_to_dict
from commsim.calibration.physical_fit import Measurement, fit_physical
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import preset

SIZES = np.array([2.0 ** k for k in range(12, 31, 3)])


@pytest.fixture(scope="module")
def doc():
    nominal = replace(preset("hgx-h100-4gpu"), nccl_version="2.22")
    truth = nominal.with_constants({"intra_bw_GBps": 300.0, "launch_us": 8.0}, "truth")
    t = plan("all_reduce", truth, 1, 4, choice_system=nominal).time_us(SIZES)
    fit = fit_physical([Measurement("log1x4", "all_reduce", 1, 4, SIZES, t * (1 + 0.01 * np.sin(SIZES)))], nominal)
    return physical_to_dict(fit)


def _not_psd(d):
    k = len(d["free"])
    m = np.eye(k)
    m[0, 1] = m[1, 0] = 2.0  # symmetric, diagonal 1: eigenvalues -1 and 3
    d["covariance"] = m.tolist()


def test_the_fitted_covariance_reads(doc):
    assert len(doc["free"]) >= 2
    physical_from_dict(copy.deepcopy(doc), "cal.yaml")


def test_a_covariance_that_is_not_positive_semi_definite_is_refused(doc):
    bad = copy.deepcopy(doc)
    _not_psd(bad)
    with pytest.raises(CalibrationError, match=r"cal.yaml: physical.covariance: expected a positive semi-definite"):
        physical_from_dict(bad, "cal.yaml")


def test_a_negative_standard_error_is_refused(doc):
    bad = copy.deepcopy(doc)
    name = bad["free"][0]
    bad["constants"][name]["stderr"] = -3.0
    with pytest.raises(CalibrationError, match=rf"physical.constants.{name}.stderr: expected a standard error >= 0, got -3.0"):
        physical_from_dict(bad, "cal.yaml")


@pytest.mark.parametrize("name, value, expected", [
    ("intra_bw_GBps", 1e-300, "expected a bandwidth of at least 1e-09 GB/s (1 B/s)"),  # inf times
    ("launch_us", 1e300, "expected a time of at most 1e+12 us (1e6 s)"),  # 300-digit times
    ("tree_efficiency", 1e-300, "expected an efficiency from 1e-06 to 1"),
    ("nvls_efficiency", 5.0, "expected an efficiency from 1e-06 to 1"),  # a tree 5x its links' rate
])
def test_a_constant_past_the_scenarios_limits_is_refused(doc, name, value, expected):
    d = copy.deepcopy(doc)
    d["constants"][name]["value"] = value
    if d["constants"][name].get("line_rate_GBps"):
        d["constants"][name]["line_rate_GBps"] = max(value, d["constants"][name]["line_rate_GBps"])
    with pytest.raises(CalibrationError, match=rf"cal.yaml: physical.constants.{name}.value: {re.escape(expected)}"):
        physical_from_dict(d, "cal.yaml")


def test_a_variance_above_the_priors_is_refused(doc):
    # a diagonal of 1e308 is symmetric and positive semi-definite, but exp(1.96 sd) of a
    # prediction overflowed: a RuntimeWarning and an infinite high_us
    d = copy.deepcopy(doc)
    k = len(d["free"])
    d["covariance"] = (np.eye(k) * 1e308).tolist()
    with pytest.raises(CalibrationError, match=r"cal.yaml: physical.covariance\[0\]\[0\]: expected a variance of log\("):
        physical_from_dict(d, "cal.yaml")
    d["covariance"] = (np.eye(k) * np.log(4.0) ** 2).tolist()  # the prior's own: the most a fit gives
    physical_from_dict(d, "cal.yaml")


@pytest.mark.parametrize("name, value, expected", [
    # nominal_system.nvls_efficiency 2.0 loaded (a prior twice the links' rate) while the same
    # constant's fitted value of 5 was refused
    ("nvls_efficiency", 2.0, "expected an efficiency from 1e-06 to 1"),
    ("launch_us", 1e300, "expected a time of at most 1e+12 us (1e6 s)"),
])
def test_a_nominal_constant_past_the_limits_is_refused_too(doc, name, value, expected):
    d = copy.deepcopy(doc)
    d["nominal_system"][name] = value
    with pytest.raises(CalibrationError,
                       match=rf"cal.yaml: physical.nominal_system.{name}: {re.escape(expected)}.*, got {re.escape(repr(value))}$"):
        physical_from_dict(d, "cal.yaml")
