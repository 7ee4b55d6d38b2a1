"""A prediction that rests on a constant the logs did not determine says so (the nominal value
it used), and one the logs determine, or a measured table corrects, does not."""

import os

import numpy as np

from commsim.calibration.nccl_tables import load_tables
from commsim.calibration.physical_fit import Measurement, fit_physical
from commsim.network.system import preset

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "nccl-tests-multiscale")
GB200_1X4 = os.path.join(DATA, "GB200-NVL72-OCI_1x4_oci-quickstarts-allreduce.txt")


def _gb200_fit():
    lt = load_tables(GB200_1X4, world_size=4)
    t = lt.tables[0]
    m = Measurement(GB200_1X4, t.kind, 1, 4, np.array([r[0] for r in t.rows], float),
                    np.array([r[1] for r in t.rows], float), "gb200")
    return fit_physical([m], preset("gb200-nvl72"))


def test_nvls_across_nodes_names_the_nominal_nvls_efficiency():
    # the one-node log runs ring (NCCL's pick), so it cannot determine NVLS's efficiency; NVLS
    # at 16 nodes is priced with the nominal figure, and the prediction says which
    fit = _gb200_fit()
    assert not fit.constants["nvls_efficiency"].determined
    pred = fit.predict("all_reduce", 16, 4, [2 ** 30])
    assert "rests on nominal nvls_efficiency 0.74" in pred.note


def test_a_measured_scale_inside_its_table_names_no_nominal_constant():
    fit = _gb200_fit()
    pred = fit.predict("all_reduce", 1, 4, [2 ** 30])
    assert "measured scale" in pred.note
    assert "rests on nominal" not in pred.note


def test_only_constants_the_time_hinges_on_are_named():
    # a determined constant, or one whose change does not move the time, is never named
    fit = _gb200_fit()
    note = fit.predict("all_reduce", 16, 4, [2 ** 30]).note
    for name, c in fit.constants.items():
        if c.determined:
            assert f"{name} " not in note
