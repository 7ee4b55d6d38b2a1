"""LL's per-channel rate across nodes (``net_ll_ch_GBps``) is a network-level constant: a fit from
2 nodes recovers it and the recovered system predicts 8 nodes; 1-node logs leave it nominal; a
calibration file from before it existed reads it as nominal."""

import copy

import numpy as np
import pytest

from commsim.calibration.physical_file import physical_from_dict, physical_to_dict
from commsim.calibration.physical_fit import LEVEL, Measurement, fit_physical
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import preset

SIZES = np.array([2.0 ** k for k in range(10, 31)])
KINDS = ("all_reduce", "all_gather")


def _nominal():
    return preset("polaris")


def _truth():
    # Polaris-like: LL across the network far below the prior (the ALCF logs fit 0.4-0.75 GB/s)
    return _nominal().with_constants({"net_ll_ch_GBps": 0.7, "nic_bw_GBps": 18.0}, "truth")


def _log(system, kind, nodes, gpn):
    t = plan(kind, system, nodes, gpn, choice_system=_nominal()).time_us(SIZES)
    return Measurement(f"synthetic_{nodes}x{gpn}", kind, nodes, gpn, SIZES, t, "A100")


def test_it_belongs_to_the_network_level():
    assert LEVEL["net_ll_ch_GBps"] == "network"


def test_two_node_fit_recovers_it_and_transfers_to_eight_nodes():
    truth = _truth()
    fit = fit_physical([_log(truth, k, 2, 4) for k in KINDS], _nominal())
    c = fit.constants["net_ll_ch_GBps"]
    assert c.determined
    assert c.value == pytest.approx(0.7, rel=0.03)
    assert c.source.startswith("fit: synthetic_2x4")
    mid = SIZES[(SIZES >= 1 << 16) & (SIZES < 1 << 20)]  # where NCCL runs LL across nodes
    for kind in KINDS:
        p = plan(kind, truth, 8, 4, choice_system=_nominal())
        assert any(proto == "LL" for _, proto in p.choose(mid))
        pred = fit.predict(kind, 8, 4, mid, use_measured=False)
        assert np.max(np.abs(pred.time_us / p.time_us(mid) - 1)) < 0.03, kind
    # the nominal prior (5.5 GB/s per channel) would be far off at those sizes
    off = plan("all_reduce", _nominal().with_constants({"nic_bw_GBps": 18.0}, "t"), 8, 4,
               choice_system=_nominal()).time_us(mid)
    true = plan("all_reduce", truth, 8, 4, choice_system=_nominal()).time_us(mid)
    assert np.max(np.abs(off / true - 1)) > 0.3


def test_one_node_logs_leave_it_nominal():
    fit = fit_physical([_log(_truth(), k, 1, 4) for k in KINDS], _nominal())
    c = fit.constants["net_ll_ch_GBps"]
    assert not c.determined and c.value == pytest.approx(87.7 / 16)
    assert any(n.startswith("net_ll_ch_GBps") and "network level" in n for n in fit.notes)


def test_an_older_calibration_file_without_it_reads_it_as_nominal():
    fit = fit_physical([_log(_truth(), k, 1, 4) for k in KINDS], _nominal())
    doc = physical_to_dict(fit)
    old = copy.deepcopy(doc)
    del old["constants"]["net_ll_ch_GBps"]
    del old["nominal_system"]["net_ll_ch_GBps"]
    back = physical_from_dict(old, "old.yaml")
    c = back.constants["net_ll_ch_GBps"]
    assert not c.determined and c.stderr is None
    assert c.value == pytest.approx(87.7 / 16)
    assert back.system.net_ll_ch_GBps == pytest.approx(87.7 / 16)
    # and it prices the same as the file written with it
    full = physical_from_dict(copy.deepcopy(doc), "new.yaml")
    assert np.array_equal(back.plan("all_reduce", 8, 4).time_us(SIZES), full.plan("all_reduce", 8, 4).time_us(SIZES))
