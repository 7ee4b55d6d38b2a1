"""Tests for commsim.calibration.records: nccl-tests' bandwidth conventions, the ring model's
formula, and the package's module layout."""

import pytest

from commsim import calibration as cal_mod
from commsim.calibration import Measurement, model_time
from commsim.calibration import model as cal_model
from commsim.collectives.busbw import algbw, busbw


def test_nccl_tests_factors():
    # A100 log row: 134217728 B in 1295.41 us -> algbw 103.61 GB/s, busbw 181.32 GB/s (n=8)
    assert algbw(134217728, 1295.41e-6) / 1e9 == pytest.approx(103.61, abs=0.005)
    assert busbw("all_reduce", 134217728, 1295.41e-6, 8) / 1e9 == pytest.approx(181.32, abs=0.005)
    # two ranks: busbw equals algbw; one rank: no traffic
    assert busbw("all_reduce", 1000, 1.0, 2) == algbw(1000, 1.0)
    assert busbw("all_reduce", 1000, 1.0, 1) == 0.0
    assert Measurement(134217728, 1295.41e-6, 8).busbw / 1e9 == pytest.approx(181.32, abs=0.005)



def test_model_time_is_the_simulators_ring_formula(monkeypatch):
    # one formula for the ring (commsim.network.costs), not a copy that could drift from it
    from commsim.network import costs

    from commsim.calibration import records

    assert records.ring_allreduce_time is costs.ring_allreduce_time
    for args in [(2e-6, 3e9, 2**20, 8), (0.0, 1e9, 8, 2), (1e-5, 5e10, 2**30, 1)]:
        alpha, beta, size, n = args
        assert model_time(*args) == costs.ring_allreduce_time(size, n, alpha, beta)
    calls = []
    monkeypatch.setattr(records, "ring_allreduce_time", lambda *a: calls.append(a) or 1.0)
    assert model_time(2e-6, 3e9, 1024, 4) == 1.0 and calls == [(1024.0, 4, 2e-6, 3e9)]


def test_file_format_wrappers_without_callers_are_gone():
    # the file format's home is commsim.calibration.file; the records module holds no wrappers
    # (it would import the file module back), the package's public surface re-exports the file API
    for name in ("dump_calibration", "calibration_to_dict", "calibration_from_dict", "load_calibration",
                 "save_calibration", "utc_now_iso"):
        assert not hasattr(cal_model, name)
    for name in ("load_calibration", "save_calibration", "utc_now_iso"):
        assert callable(getattr(cal_mod, name))
