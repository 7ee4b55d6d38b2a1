"""DDP's own costs: exact small cases, the stretched compute against a brute-force
integration, and the scenario keys' errors."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from commsim.errors import ScenarioError
from commsim.sim.ddp_costs import (
    NONE, DDPCosts, bucket_copy_in_time, bucket_launch_time, copy_back_time, parse_ddp_costs,
    step_overhead, stretched_finish,
)

MB = 1 << 20


def test_copies_move_two_bytes_per_byte_unless_the_bucket_is_a_view():
    c = DDPCosts(memory_bandwidth=1e12)
    assert bucket_copy_in_time(25 * MB, c) == pytest.approx(2 * 25 * MB / 1e12)
    assert copy_back_time(100 * MB, c) == pytest.approx(2 * 100 * MB / 1e12)
    v = DDPCosts(gradient_as_bucket_view=True)
    assert bucket_copy_in_time(25 * MB, v) == copy_back_time(25 * MB, v) == 0.0


def test_launches_are_serial_on_the_host_and_pay_the_bucket_overhead():
    c = DDPCosts(bucket_overhead=20e-6)
    assert bucket_launch_time(1.0, 0.0, c) == pytest.approx(1.0 + 20e-6)
    assert bucket_launch_time(1.0, 1.0 + 15e-6, c) == pytest.approx(1.0 + 35e-6)


def test_smaller_buckets_cost_more_when_nothing_overlaps():
    c = DDPCosts()
    grads = 100 * MB
    small = step_overhead([1 * MB] * 100, c)
    large = step_overhead([25 * MB] * 4, c)
    # the copies are the same bytes; the difference is 96 extra bucket launches
    assert small - large == pytest.approx(96 * c.bucket_overhead)
    assert step_overhead([grads], NONE) < 1e-15


def test_stretched_finish_exact_cases():
    # 1 s of work from 0; busy [0.5, 1.5] at half rate (slowdown 1): 0.5 free, then 0.5 work in 1 s busy
    assert stretched_finish(0.0, 1.0, [(0.5, 1.5)], 1.0) == pytest.approx(1.5)
    # busy interval shorter than needed: 0.5 + 0.25 work in [0.5, 1.0], 0.25 left after
    assert stretched_finish(0.0, 1.0, [(0.5, 1.0)], 1.0) == pytest.approx(1.25)
    assert stretched_finish(0.0, 1.0, [], 1.0) == 1.0
    assert stretched_finish(2.0, 1.0, [(0.0, 1.0)], 1.0) == 3.0  # the interval ended before
    assert stretched_finish(0.0, 1.0, [(0.0, 10.0)], 0.0) == 1.0


@settings(max_examples=60, deadline=None)
@given(start=st.floats(0, 1), work=st.floats(0.01, 2), slow=st.floats(0.01, 2),
       busy=st.lists(st.tuples(st.floats(0, 3), st.floats(0.01, 1)), max_size=4))
def test_stretched_finish_equals_brute_force_integration(start, work, slow, busy):
    intervals = [(b, b + d) for b, d in busy]
    got = stretched_finish(start, work, intervals, slow)
    dt, t, done = 1e-4, start, 0.0
    while done < work:
        inside = any(b <= t < e for b, e in intervals)
        done += dt / (1 + slow) if inside else dt
        t += dt
    assert got == pytest.approx(t, abs=3e-4 * (1 + slow))


def test_scenario_keys_and_their_errors():
    c = parse_ddp_costs({"bucket_overhead": "50 us", "memory_bandwidth": "2 TB/s", "gradient_as_bucket_view": True,
                         "overlap_slowdown": 0.2, "bucket_cap": "25 MiB"}, "s.yaml")
    assert (c.bucket_overhead, c.memory_bandwidth, c.gradient_as_bucket_view, c.overlap_slowdown) == (
        pytest.approx(50e-6), pytest.approx(2e12), True, 0.2)
    assert parse_ddp_costs({}, "s.yaml") == DDPCosts()
    for raw, key in (({"bucket_overhead": "20 GB"}, "ddp.bucket_overhead"),
                     ({"memory_bandwidth": 0}, "ddp.memory_bandwidth"),
                     ({"gradient_as_bucket_view": "yes"}, "ddp.gradient_as_bucket_view"),
                     ({"overlap_slowdown": -0.1}, "ddp.overlap_slowdown"),
                     ({"overlap_slowdown": math.nan}, "ddp.overlap_slowdown")):
        with pytest.raises(ScenarioError, match=f"^s.yaml: {key}: "):
            parse_ddp_costs(raw, "s.yaml")
