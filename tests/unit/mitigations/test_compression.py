"""Gradient shapes and PowerSGD's plan."""

import numpy as np
import pytest

from commsim.mitigations.compression import PowerSGDHook, plan_powersgd
from commsim.mitigations.hooked import Work, run_hooked
from commsim.mitigations.shapes import GradientShapes, resnet50, square
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


def test_powersgd_work_of_one_matrix_is_every_pass_of_the_hook():
    # one 200 x 300 matrix at r = 4, compute-bound products (a low flops, a high memory bandwidth)
    m, n, r = 200, 300, 4
    remedy = PowerSGD(r=r, flops=1e9, mem_bw=1e10, kernel_overhead=1e-6)
    plan = plan_powersgd(GradientShapes(((m, n),), 0), remedy)
    product = 2.0 * m * n * r / 1e9
    assert product > 4.0 * m * n / 1e10  # each product compute-bound here
    # M += error (12 B), M_in = M.clone() (8 B), orthogonalize Q (n x r), P = M Q, 5 kernels
    assert plan.work_p == pytest.approx(20.0 * m * n / 1e10 + 2.0 * n * r * r / 1e9 + product + 5e-6, rel=1e-12)
    # orthogonalize P (m x r), Q = M^T P, 3 kernels
    assert plan.work_q == pytest.approx(2.0 * m * r * r / 1e9 + product + 3e-6, rel=1e-12)
    # M = P Q^T, error = M_in - M (12 B), 2 kernels
    assert plan.work_out == pytest.approx(product + 12.0 * m * n / 1e10 + 2e-6, rel=1e-12)


# ---------------------------------------------------------------- fp16's all-reduce rate

FAST_CASTS = 1e30  # memory bandwidth at which the casts take no time worth a comparison


def one_bucket(params, **kw):
    # one bucket (the cap above the gradient), ready at the end of backward: the step's all-reduce
    # is the bucket's whatever its bytes, so runs of different byte counts compare exactly
    return tiny(nodes=2, gpus=1, params=params, steps=3, bucket_cap=1e9, first_bucket=1e9, **kw)


@pytest.mark.parametrize("reduce_bytes, fp32_params", [(None, 500_000), (4.0, 1_000_000), (3.0, 750_000)])
def test_fp16_all_reduce_takes_the_time_of_its_reduce_bytes(reduce_bytes, fp32_params):
    from commsim.mitigations.compression import CompressionHook
    from commsim.mitigations.hooked import PlainHook
    from commsim.mitigations.spec import Compression

    sc = one_bucket(1_000_000)
    hook = CompressionHook(sc, Compression("fp16", mem_bw=FAST_CASTS, reduce_bytes=reduce_bytes))
    run = run_hooked(sc, hook)
    # the time: a plain fp32 all-reduce of reduce_bytes (default 2) bytes per element
    plain = run_hooked(one_bucket(fp32_params), PlainHook())
    np.testing.assert_allclose(run.rank_end, plain.rank_end, rtol=1e-12)
    # the bytes: 2 per element on the wire, whatever the time
    np.testing.assert_allclose(run.reduced_bytes, 2 * 1_000_000, rtol=1e-12)


def test_fp16_wrapper_of_powersgd_prices_its_all_reduces_at_reduce_bytes():
    from commsim.mitigations.hooked import Reduce
    from commsim.mitigations.spec import Compression

    sc = tiny(nodes=2, gpus=1, params=4 * 1024 * 1024 + 10, steps=3)
    remedy = PowerSGD(r=2, width=1024)
    default = PowerSGDHook(sc, remedy, Compression("fp16")).stages(0, 0, float(sc.model.grad_bytes))
    slow = PowerSGDHook(sc, remedy, Compression("fp16", reduce_bytes=4.0)).stages(0, 0, float(sc.model.grad_bytes))
    sent = [(st.size, st.priced_bytes) for st in default if isinstance(st, Reduce)]
    assert sent == [(10 * 2, None), (4 * 1024 * 2 * 2, None), (4 * 1024 * 2 * 2, None)]  # 4 matrices, r = 2
    assert [(st.size, st.priced_bytes) for st in slow if isinstance(st, Reduce)] == [
        (s, s * 2) for s, _ in sent]  # 4 bytes per 2-byte element


# ---------------------------------------------------------------- PowerSGD's chained all-reduces


@pytest.mark.parametrize("buckets", [1, 3])
def test_powersgd_chain_overhead_is_two_hops_per_bucket(buckets):
    # the P and Q all-reduces are each started from the previous one's callback: each hop adds
    # chain_overhead once per bucket, on the stream, whatever the bucket's bytes
    params = 4 * 1024 * 1024 + 10
    cap = 1e9 if buckets == 1 else 4.0 * params / buckets + 1
    sc = tiny(nodes=2, gpus=1, params=params, steps=3, bucket_cap=cap, first_bucket=cap)
    assert len(sc.gradient_buckets()) == buckets
    fast = dict(r=2, width=1024, flops=1e30, mem_bw=1e30, kernel_overhead=0.0)
    without = run_hooked(sc, PowerSGDHook(sc, PowerSGD(**fast)))
    chained = run_hooked(sc, PowerSGDHook(sc, PowerSGD(**fast, chain_overhead=2e-3)))
    step = np.diff(np.concatenate(([0.0], chained.step_end))) - np.diff(np.concatenate(([0.0], without.step_end)))
    # one bucket: the hops sit after the backward, all of them exposed
    if buckets == 1:
        np.testing.assert_allclose(step, 2 * 2e-3, rtol=1e-9)
    else:  # several: at least the last bucket's two hops are exposed, at most every bucket's
        assert np.all(step >= 2 * 2e-3 - 1e-12) and np.all(step <= buckets * 2 * 2e-3 + 1e-12)


def test_chain_overhead_parses_as_a_time():
    from commsim.mitigations.spec import parse_mitigations

    m = parse_mitigations("powersgd:r=1:chain_overhead=2.5ms")[0]
    assert m.get(PowerSGD).chain_overhead == pytest.approx(2.5e-3)


# ---------------------------------------------------------------- PowerSGD's per-product rates and wake-up


def test_each_product_runs_at_its_own_rate():
    # one 200 x 300 matrix at r = 4, compute-bound; M^T P five times slower than the other two
    m, n, r = 200, 300, 4
    common = dict(r=r, flops=1e9, mem_bw=1e12, kernel_overhead=0.0)
    one = plan_powersgd(GradientShapes(((m, n),), 0), PowerSGD(**common))
    split = plan_powersgd(GradientShapes(((m, n),), 0),
                          PowerSGD(**common, mq_flops=2e9, mtp_flops=0.4e9, pqt_flops=4e9))
    product = 2.0 * m * n * r
    assert split.work_p - one.work_p == pytest.approx(product / 2e9 - product / 1e9, rel=1e-9)
    assert split.work_q - one.work_q == pytest.approx(product / 0.4e9 - product / 1e9, rel=1e-9)
    assert split.work_out - one.work_out == pytest.approx(product / 4e9 - product / 1e9, rel=1e-9)


def test_product_rates_default_to_flops_and_parse():
    from commsim.mitigations.spec import parse_mitigations

    assert PowerSGD(flops=3e9).product_flops() == (3e9, 3e9, 3e9)
    p = parse_mitigations("powersgd:r=1:flops=3000000000:mtp_flops=1000000000:wake_overhead=1.5ms")[0].get(PowerSGD)
    assert p.product_flops() == (3e9, 1e9, 3e9) and p.wake_overhead == pytest.approx(1.5e-3)


@pytest.mark.parametrize("buckets", [1, 3])
def test_powersgd_wake_overhead_is_once_per_bucket_after_the_first_all_reduce(buckets):
    params = 4 * 1024 * 1024 + 10
    cap = 1e9 if buckets == 1 else 4.0 * params / buckets + 1
    sc = tiny(nodes=2, gpus=1, params=params, steps=3, bucket_cap=cap, first_bucket=cap)
    fast = dict(r=2, width=1024, flops=1e30, mem_bw=1e30, kernel_overhead=0.0)
    without = run_hooked(sc, PowerSGDHook(sc, PowerSGD(**fast)))
    woken = run_hooked(sc, PowerSGDHook(sc, PowerSGD(**fast, wake_overhead=3e-3)))
    step = woken.step_time - without.step_time
    if buckets == 1:
        np.testing.assert_allclose(step, 3e-3, rtol=1e-9)
    else:
        assert np.all(step >= 3e-3 - 1e-12) and np.all(step <= buckets * 3e-3 + 1e-12)
    stages = PowerSGDHook(sc, PowerSGD(**fast, wake_overhead=3e-3, chain_overhead=1e-3)).stages(0, 0, 1e6)
    # after the uncompressed all-reduce: the wake-up and the P hop; before Q: the Q hop only
    assert [st.seconds for st in stages if isinstance(st, Work) and st.seconds > 1e-9] == [4e-3, 1e-3]


# ---------------------------------------------------------------- PowerSGD's writes into new memory


def test_clone_and_new_error_run_at_fresh_bw_and_the_add_at_mem_bw():
    # one 200 x 300 matrix, products and kernels free: only the memory passes are left
    m, n = 200, 300
    common = dict(r=4, flops=1e30, mem_bw=1e10, kernel_overhead=0.0)
    mapped = plan_powersgd(GradientShapes(((m, n),), 0), PowerSGD(**common))
    fresh = plan_powersgd(GradientShapes(((m, n),), 0), PowerSGD(**common, fresh_bw=2e9))
    product = 4.0 * m * n / 1e10  # each product memory-bound here
    # M += error (12 B) in place at mem_bw; M_in = M.clone() (8 B) into new memory at fresh_bw
    assert fresh.work_p == pytest.approx(12.0 * m * n / 1e10 + 8.0 * m * n / 2e9 + product, rel=1e-9)
    # error = M_in - M (12 B), a new tensor, at fresh_bw
    assert fresh.work_out == pytest.approx(12.0 * m * n / 2e9 + product, rel=1e-9)
    assert fresh.work_q == mapped.work_q
    # without fresh_bw, every pass at mem_bw, as before
    assert mapped.work_p == pytest.approx(20.0 * m * n / 1e10 + product, rel=1e-9)
    assert mapped.work_out == pytest.approx(12.0 * m * n / 1e10 + product, rel=1e-9)


def test_fresh_bw_parses_and_lengthens_the_step():
    from commsim.mitigations.spec import parse_mitigations

    p = parse_mitigations("powersgd:r=1:fresh_bw=5GB/s")[0].get(PowerSGD)
    assert p.fresh_bw == pytest.approx(5e9)
    assert parse_mitigations("powersgd:r=1")[0].get(PowerSGD).fresh_bw is None
    # one bucket: its hook runs after the whole backward, each pass on the step's critical path
    sc = tiny(nodes=2, gpus=1, params=4 * 1024 * 1024 + 10, steps=3, bucket_cap=1e9, first_bucket=1e9)
    base = dict(r=1, width=1024, flops=1e30, mem_bw=1e12, kernel_overhead=0.0)
    mapped = run_hooked(sc, PowerSGDHook(sc, PowerSGD(**base)))
    fresh = run_hooked(sc, PowerSGDHook(sc, PowerSGD(**base, fresh_bw=2e9)))
    elements = 4 * 1024 * 1024  # the four 1024 x 1024 matrices; the clone and the new error, 20 B each
    np.testing.assert_allclose(fresh.step_time - mapped.step_time,
                               20.0 * elements * (1 / 2e9 - 1 / 1e12), rtol=1e-6)
