"""Gradient shapes and PowerSGD's plan."""

import numpy as np
import pytest

from commsim.mitigations.compression import PowerSGDHook, plan_powersgd
from commsim.mitigations.hooked import run_hooked
from commsim.mitigations.shapes import resnet50, square
from commsim.mitigations.spec import PowerSGD

from tests.unit.mitigations.helpers import tiny


def test_resnet50_has_torchvisions_parameter_count():
    s = resnet50()
    assert s.elements == 25_557_032  # torchvision.models.resnet50()
    assert len(s.matrices) == 54  # 53 convolutions + fc


def test_square_plan_sends_m_plus_n_times_r_per_matrix():
    shapes = square(3 * 100 * 100 + 7, 100)
    plan = plan_powersgd(shapes, PowerSGD(r=4, kernel_overhead=0.0))
    assert plan.matrices == 3 and plan.uncompressed == 7
    assert plan.p_elements == plan.q_elements == 3 * 100 * 4
    assert plan.min_dimension == 100


def test_matrices_that_compress_less_than_twice_stay_uncompressed():
    # (m + n) r * 2 >= m n: 10 x 10 with r = 3 saves 100 / 60 < 2
    plan = plan_powersgd(square(100, 10), PowerSGD(r=3))
    assert plan.matrices == 0 and plan.uncompressed == 100


def test_powersgd_bytes_per_step_are_the_three_all_reduces():
    sc = tiny(nodes=2, gpus=1, params=4 * 1024 * 1024 + 10, steps=3)
    hook = PowerSGDHook(sc, PowerSGD(r=2, width=1024))
    run = run_hooked(sc, hook)
    expect = (10 + 4 * 2 * 1024 * 2) * 4  # uncompressed + P + Q, fp32
    np.testing.assert_allclose(run.reduced_bytes, expect, rtol=1e-12)
    assert hook.compression_ratio() == pytest.approx(sc.model.grad_bytes / expect)
