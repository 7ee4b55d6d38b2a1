"""Bucket tuning: the best point of its own curve, and the right end on clear cases."""

import pytest

from commsim.mitigations.buckets import tune_buckets, with_bucket_cap
from commsim.sim.engine import simulate

from tests.unit.mitigations.helpers import tiny


def test_latency_bound_job_wants_one_bucket():
    sc = tiny(nodes=4, gpus=1, params=20_000_000, inter_lat=5e-3, inter_bw=1e11, overlap=False, steps=3)
    t = tune_buckets(sc)
    assert t.bucket_cap == pytest.approx(sc.model.grad_bytes)
    assert t.step_time_s == min(v for _, v in t.curve)


def test_tuned_cap_is_no_worse_than_the_default_and_its_time_is_the_simulators():
    sc = tiny(nodes=4, gpus=1, params=20_000_000, inter_lat=1e-5, inter_bw=1e9, steps=3, bucket_cap=25 * 2**20)
    t = tune_buckets(sc)
    assert t.step_time_s <= simulate(sc).step_time.mean()
    assert t.step_time_s == simulate(with_bucket_cap(sc, t.bucket_cap)).step_time.mean()
    assert t.step_time_s == min(v for _, v in t.curve)
