"""Tests for commsim.scenario.schema_stragglers: the stragglers list."""

from __future__ import annotations

import pytest

from commsim.errors import ScenarioError
from commsim.scenario import spec
from commsim.scenario.schema_stragglers import MAX_CV, MIN_FRACTION, STRAGGLER_KINDS, STRAGGLERS, read_stragglers

SRC = "g.yaml"
CLUSTER = spec.Cluster(2, 4, spec.Link(1e9, 0), spec.Link(1e9, 0))  # ranks 0..7, nodes 0..1


def read(*entries):
    return read_stragglers(SRC, list(entries), CLUSTER)


def error(*entries) -> str:
    with pytest.raises(ScenarioError) as err:
        read(*entries)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_every_kind():
    assert STRAGGLER_KINDS == tuple(STRAGGLERS) == ("slow_rank", "throttle", "jitter", "stall", "slow_link")
    got = read(
        {"kind": "slow_rank", "ranks": 3, "factor": 1.5},
        {"kind": "throttle", "ranks": [1, 2], "heat_up": 1, "throttled_time": 2, "clock_fraction": 0.5},
        {"kind": "jitter", "cv": 0.1},
        {"kind": "stall", "ranks": "all", "duration": "1 s", "every": 10},
        {"kind": "slow_link", "node": 1, "factor": 0.5},
    )
    assert got == (
        spec.SlowRank((3,), 1.5),
        spec.Throttle((1, 2), 1.0, 2.0, 0.5),
        spec.Jitter(0.1),
        spec.Stall(tuple(range(8)), 1.0, every=10),
        spec.SlowLink(0.5, node=1),
    )


def test_rank_forms_and_checks():
    assert read({"kind": "jitter", "cv": 0, "ranks": "all"})[0].ranks is None
    assert error({"kind": "slow_rank", "ranks": 8, "factor": 2}) == (
        "g.yaml: stragglers[0].ranks: expected a rank in 0..7 (world size 8 = 2 nodes x 4 GPUs), got 8"
    )
    assert error({"kind": "slow_rank", "ranks": [1, 1], "factor": 2}) == (
        "g.yaml: stragglers[0].ranks[1]: expected each rank once, got rank 1 twice"
    )
    assert error({"kind": "slow_rank", "ranks": [], "factor": 2}).endswith("got [] (an empty list)")
    assert error({"kind": "slow_rank", "ranks": True, "factor": 2}).endswith("got true (a boolean)")


def test_kind_checks():
    assert error(3) == "g.yaml: stragglers[0]: expected a mapping with a kind (slow_rank, throttle, jitter, stall, slow_link), got 3"
    assert error({"ranks": 1}).startswith("g.yaml: stragglers[0].kind: required key is missing")
    assert error({"kind": "jiter", "cv": 1}).endswith("got 'jiter' (did you mean 'jitter'?)")
    assert error({"kind": "jitter", "cv": 1, "factor": 2}).startswith("g.yaml: stragglers[0].factor: unknown key")
    with pytest.raises(ScenarioError, match="expected a list of mappings"):
        read_stragglers(SRC, {"kind": "jitter"}, CLUSTER)


def test_value_ranges():
    assert "expected a slowdown factor (compute time is multiplied by it) in [1, 1e+06]" in error(
        {"kind": "slow_rank", "ranks": 0, "factor": 0.5})
    assert f"of at least {MIN_FRACTION:g}" in error({"kind": "slow_link", "rank": 0, "factor": 1e-9})
    assert f"in [0, {MAX_CV:g}]" in error({"kind": "jitter", "cv": 11})
    assert "(exponential jitter) in [0, 1]" in error({"kind": "jitter", "cv": 1.5, "distribution": "exponential"})


def test_exactly_one_of():
    assert error({"kind": "stall", "ranks": 0, "duration": 1}) == (
        "g.yaml: stragglers[0]: expected exactly one of every or probability (how often the stall happens), got neither"
    )
    assert error({"kind": "slow_link", "rank": 0, "node": 0, "factor": 0.5}).endswith("got both")
    assert error({"kind": "slow_link", "node": 2, "factor": 0.5}) == (
        "g.yaml: stragglers[0].node: expected a node in 0..1 (2 nodes), got 2"
    )


def test_one_thermal_clock_per_rank():
    throttle = {"kind": "throttle", "ranks": [1, 2], "heat_up": 1, "throttled_time": 1, "clock_fraction": 0.5}
    assert error(throttle, dict(throttle, ranks=[2])) == (
        "g.yaml: stragglers[1].ranks: expected each rank in at most one throttle entry, got rank 2, already in stragglers[0]"
    )


def test_slow_rank_factors_of_one_rank_multiply_to_at_most_the_limit():
    # 60 entries of 1e6 on one rank overflowed its compute time to inf: exit 0 and NaN figures
    slow = {"kind": "slow_rank", "ranks": [2, 3], "factor": 1e3}
    assert len(read(slow, slow)) == 2  # 1e6 exactly: the one entry's own limit
    message = error(slow, {"kind": "slow_rank", "ranks": 5, "factor": 1e6}, slow,
                    {"kind": "slow_rank", "ranks": [4, 3], "factor": 1.5})
    assert message == ("g.yaml: stragglers[3].factor: expected the slow_rank factors of one rank to multiply to "
                       "at most 1e+06, got 1.5e+06 on rank 3 (stragglers[0] x stragglers[2] x stragglers[3])")
