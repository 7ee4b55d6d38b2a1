"""Tests for validate.numerics: the four checks pass on 2 gloo ranks, with meaningful errors."""

import math

import pytest

pytest.importorskip("torch")

from validate.numerics import format_result  # noqa: E402


@pytest.fixture(scope="module")
def results(numerics_run):
    out = numerics_run  # launch(rank_numerics, 2, "gloo", ...), shared with the CLI's test (conftest.py)
    return {r["check"]: r for r in out[0]}, out


def test_all_checks_pass(results):
    by_name, out = results
    assert list(by_name) == ["sync_sgd_equals_big_batch", "same_seed_same_result", "fp16_sum_vs_avg", "no_sync_accumulation"]
    for r in by_name.values():
        assert r["passed"], format_result(r)
        assert format_result(r).startswith("PASS")
    # every rank came to the same verdicts
    assert [r["passed"] for r in out[1]] == [r["passed"] for r in out[0]]


def test_errors_are_rounding_not_zero(results):
    by_name, _ = results
    # different summation orders: tiny but (almost surely) non-zero differences
    assert 0 <= by_name["sync_sgd_equals_big_batch"]["error"] < 1e-5
    assert by_name["same_seed_same_result"]["error"] == 0.0


def test_fp16_sum_overflows_where_avg_does_not(results):
    r = results[0]["fp16_sum_vs_avg"]
    assert math.isinf(r["large"]["sum_then_divide"])
    assert r["large"]["average"] < 2.0**-8
    assert 0 < r["ordinary"]["sum_then_divide"] < 2.0**-8


def test_scaling_twice_is_off_by_world_size(results):
    r = results[0]["no_sync_accumulation"]
    assert r["scaled_twice_ratio"] == pytest.approx(2.0, rel=1e-5)
