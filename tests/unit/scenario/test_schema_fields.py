"""Tests for commsim.scenario.schema_fields: the field readers and the mapping checker."""

from __future__ import annotations

import pytest

from commsim.errors import ScenarioError
from commsim.scenario.schema_fields import (
    MAX_TIME,
    MIN_RATE,
    SECTION_KEYS,
    Section,
    choice,
    did_you_mean,
    ranged,
    read_bool,
    read_count,
    read_count_or_zero,
    read_name,
    read_rate,
    read_size,
    read_text,
    read_time,
    read_time_or_zero,
)

SRC = "s.yaml"


def value_error(parse, value) -> str:
    with pytest.raises(ValueError) as err:
        parse(value)
    return str(err.value)


def test_plain_readers():
    assert read_text("") == "" and read_name("x") == "x" and read_bool(False) is False
    assert value_error(read_text, 3) == "expected text, got 3"
    assert value_error(read_name, "  ") == "expected a non-empty name, got '  '"
    assert value_error(read_bool, "yes") == "expected true or false, got 'yes'"


def test_quantity_readers():
    assert read_size("25 MiB") == 25 * 2**20
    assert read_rate("100 Gbps") == 12.5e9
    assert read_time("5 us") == 5e-6 and read_time_or_zero(0) == 0.0
    assert read_count("1e9") == 10**9 and read_count_or_zero(0) == 0
    assert value_error(read_rate, 0.5) == f"expected a rate of at least {MIN_RATE:g} B/s, got 0.5"
    assert value_error(read_time, "12 d") .startswith("expected a time like")
    assert value_error(read_time, MAX_TIME * 2) == "expected a time up to 1e+06 s (11.6 days), got 2000000.0"
    assert value_error(read_time, 0) == "expected a positive time (> 0), got 0"
    assert value_error(read_count, 0) == "expected a positive count (> 0), got 0"


def test_choice_with_a_hint():
    parse = choice(("ring", "tree"))
    assert parse("tree") == "tree"
    assert value_error(parse, "rign") == "expected one of ring, tree, got 'rign' (did you mean 'ring'?)"
    assert value_error(parse, 3) == "expected one of ring, tree, got 3"


@pytest.mark.parametrize(
    "low_open, high_open, inside, outside, interval",
    [(True, False, [1.0, 0.5], [0, 1.5], "(0, 1]"), (False, True, [0, 0.5], [1, -0.1], "[0, 1)"),
     (False, False, [0, 1], [-0.1, 1.1], "[0, 1]"), (True, True, [0.5], [0, 1], "(0, 1)")],
)
def test_ranged_intervals(low_open, high_open, inside, outside, interval):
    parse = ranged(0, 1, low_open=low_open, high_open=high_open, what="a fraction")
    for value in inside:
        assert parse(value) == value
    for value in outside + ["x", True]:
        assert value_error(parse, value).startswith(f"expected a fraction in {interval}, got ")


def test_did_you_mean():
    assert did_you_mean("bucket_capp", ["bucket_cap", "overlap"]) == " (did you mean 'bucket_cap'?)"
    assert did_you_mean("zzz", ["bucket_cap"]) == "" and did_you_mean(3, ["x"]) == ""


def section_error(*args, **kwargs) -> ScenarioError:
    with pytest.raises(ScenarioError) as err:
        Section(*args, **kwargs)
    return err.value


def test_section_checks_type_unknown_and_required_keys():
    assert str(section_error(SRC, "ddp", [1], SECTION_KEYS["ddp"])) == (
        "s.yaml: ddp: expected a mapping with keys bucket_cap, first_bucket, overlap, gradient_accumulation, "
        "sharding, bucket_sizes, bucket_ready, bucket_overhead, memory_bandwidth, gradient_as_bucket_view, "
        "overlap_slowdown, comm_streams, comm_capacity, comm_shared, got [1] (a list)"
    )
    assert str(section_error(SRC, "ddp", {"overlapp": True}, SECTION_KEYS["ddp"])).startswith(
        "s.yaml: ddp.overlapp: unknown key (did you mean 'overlap'?); expected one of bucket_cap,"
    )
    assert str(section_error(SRC, "model", {}, SECTION_KEYS["model"], required=("parameters",),
                             hints={"parameters": "a whole number"})) == (
        "s.yaml: model.parameters: required key is missing, expected a whole number"
    )
    assert str(section_error(SRC, "", 3, SECTION_KEYS[""], what="a scenario mapping")) == (
        "s.yaml: expected a scenario mapping, got 3"
    )


def test_a_misplaced_key_is_pointed_home():
    err = section_error(SRC, "", {"bucket_cap": 1}, SECTION_KEYS[""])
    assert err.path == "bucket_cap" and "(did you mean 'ddp.bucket_cap'?)" in str(err)
    err = section_error(SRC, "", {"overlap_slowdown": 0.1}, SECTION_KEYS[""])
    assert "(did you mean 'ddp.overlap_slowdown'?)" in str(err)
    # a key that lives in two sections gets no guess
    err = section_error(SRC, "ddp", {"latency": 1}, SECTION_KEYS["ddp"])
    assert "did you mean" not in str(err)


def test_section_get():
    m = Section(SRC, "ddp", {"bucket_cap": "25 MB", "overlap": "no"}, SECTION_KEYS["ddp"])
    assert m.get("bucket_cap", read_size) == 25e6
    assert m.get("first_bucket", read_size, 7.0) == 7.0
    assert m.has("overlap") and not m.has("sharding") and m.child("x") == "ddp.x"
    with pytest.raises(ScenarioError) as err:
        m.get("overlap", read_bool)
    assert str(err.value) == "s.yaml: ddp.overlap: expected true or false, got 'no'"


def test_every_ddp_cost_key_is_a_ddp_key():
    from commsim.scenario.schema_training import DDP_COST_KEYS

    assert set(DDP_COST_KEYS) <= set(SECTION_KEYS["ddp"])
