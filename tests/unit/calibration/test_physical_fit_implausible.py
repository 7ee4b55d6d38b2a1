"""A constant the fit would move beyond a factor 64 of the hardware description stays nominal:
it would carry the whole misfit of a model that cannot represent the logs, not a measurement."""

import math

from dataclasses import replace

import numpy as np

from commsim.calibration.physical_fit import IMPLAUSIBLE_SIGMAS, PRIOR_FACTOR, Measurement, fit_physical
from commsim.collectives.nccl.scale import bus_factor
from commsim.network.system import preset


def _one_figure(busbw_GBps: float, nodes=2, gpus=8, size=float(1 << 30)):
    """One published busbw at one size (AWS p3dn, 2 x 8 V100: ~10 GB/s at 1 GiB)."""
    t_us = size * bus_factor("all_reduce", nodes * gpus) / (busbw_GBps * 1e3)
    return Measurement("p3dn-2x8", "all_reduce", nodes, gpus, np.array([size]), np.array([t_us]), "p3dn")


def test_one_large_message_figure_is_not_read_as_an_nvlink_hop_of_hundreds_of_microseconds():
    nominal = replace(preset("p3dn"), nccl_version="2.4")  # the release of the report
    fit = fit_physical([_one_figure(10.0)], nominal)
    # without the guard intra_hop_us came out at 868 us (nominal 3.4): the first determinable
    # constant in FIT_NAMES order took the whole misfit
    assert not fit.constants["intra_hop_us"].determined
    assert any("intra_hop_us" in n and "cannot represent" in n for n in fit.notes)
    # a bandwidth takes it instead, within the bound of the description
    assert fit.constants["nic_bw_GBps"].determined
    for name in fit.free:
        ratio = fit.constants[name].value / getattr(nominal, name)
        assert abs(math.log(ratio)) <= IMPLAUSIBLE_SIGMAS * math.log(PRIOR_FACTOR)


def test_a_plausible_move_is_still_fitted():
    # 80% of nominal busbw: a modest correction, fitted as before
    nominal = preset("p3dn")
    from commsim.collectives.nccl_tuner import plan

    t = plan("all_reduce", nominal, 2, 8).time_us(np.array([float(1 << 30)]))[0]
    busbw = (1 << 30) * bus_factor("all_reduce", 16) / (t * 1e3)
    fit = fit_physical([_one_figure(0.8 * busbw)], nominal)
    assert fit.free and not any("cannot represent" in n for n in fit.notes)
