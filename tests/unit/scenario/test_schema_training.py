"""Tests for commsim.scenario.schema_training: model, compute, ddp, collective and calibration."""

from __future__ import annotations

import pytest

from commsim.errors import ScenarioError
from commsim.scenario import spec
from commsim.scenario.schema_training import (
    ALGORITHMS,
    COST_MODELS,
    PRESET_MEMORY_BANDWIDTH,
    read_calibration,
    read_collective,
    read_compute,
    read_ddp,
    read_model,
)

SRC = "t.yaml"


def error(read, *args) -> str:
    with pytest.raises(ScenarioError) as err:
        read(SRC, *args)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_model():
    assert read_model(SRC, {"parameters": "1e9", "grad_dtype": "bf16"}) == spec.Model(10**9, "bf16")
    assert read_model(SRC, {"parameters": 10}).grad_dtype == "fp32"
    assert error(read_model, {}) == "t.yaml: model.parameters: required key is missing, expected a whole number like 1e9"
    assert error(read_model, {"parameters": 1, "grad_dtype": "fp8"}).startswith(
        "t.yaml: model.grad_dtype: expected one of fp32, bf16, fp16, got 'fp8'"
    )


def test_compute():
    assert read_compute(SRC, {"forward": "1 ms", "backward": 0.002}) == spec.Compute(0.001, 0.002)
    assert read_compute(SRC, {"forward": 1, "backward": 1, "optimizer": 0, "batch_size": 3}).batch_size == 3
    assert error(read_compute, {"forward": 1}) == (
        "t.yaml: compute.backward: required key is missing, expected a time like '5 us' or '0.5 s'"
    )
    assert error(read_compute, {"forward": "1 MB", "backward": 1}).startswith("t.yaml: compute.forward: '1 MB' is a size")


def test_ddp_defaults_are_pytorchs():
    assert read_ddp(SRC, {}) == spec.DDP(bucket_cap=25 * 2**20, first_bucket=2**20)


def test_ddp_costs_keys_defaults_on_and_off():
    assert read_ddp(SRC, {}).costs == spec.DDPCosts() and spec.DDPCosts().overlap_slowdown > 0
    got = read_ddp(SRC, {"bucket_overhead": "50 us", "memory_bandwidth": "2 TB/s", "gradient_as_bucket_view": True,
                         "overlap_slowdown": 0.2, "bucket_cap": "4 MiB"})
    assert got.bucket_cap == 4 * 2**20
    assert (got.costs.bucket_overhead, got.costs.memory_bandwidth, got.costs.gradient_as_bucket_view,
            got.costs.overlap_slowdown) == (pytest.approx(50e-6), pytest.approx(2e12), True, 0.2)
    off = read_ddp(SRC, {"bucket_overhead": 0, "overlap_slowdown": 0, "gradient_as_bucket_view": True}).costs
    assert (off.bucket_overhead, off.overlap_slowdown, off.gradient_as_bucket_view) == (0.0, 0.0, True)


def test_ddp_costs_memory_bandwidth_from_the_cluster_preset():
    assert read_ddp(SRC, {}, cluster={"preset": "dgx-h100", "nodes": 2}).costs.memory_bandwidth == 3.35e12
    assert read_ddp(SRC, {}, cluster={"preset": "pcie-8gpu"}).costs.memory_bandwidth == PRESET_MEMORY_BANDWIDTH["pcie-8gpu"]
    assert read_ddp(SRC, {}, cluster={"preset": "dgx1-v100"}).costs.memory_bandwidth == 900e9
    # every preset that names its GPUs has their memory bandwidth
    from commsim.scenario.topology import PRESETS
    assert set(PRESET_MEMORY_BANDWIDTH) == {name for name in PRESETS if not name.startswith("ethernet-")}
    # no GPU named (or a preset without one): the spec's A100 figure; the key wins over the preset
    assert read_ddp(SRC, {}, cluster={"nodes": 2}).costs.memory_bandwidth == spec.DDPCosts().memory_bandwidth
    assert read_ddp(SRC, {}, cluster={"preset": "ethernet-25g"}).costs.memory_bandwidth == spec.DDPCosts().memory_bandwidth
    assert read_ddp(SRC, {"memory_bandwidth": "1 TB/s"}, cluster={"preset": "dgx-h100"}).costs.memory_bandwidth == 1e12


@pytest.mark.parametrize("raw, key, expected", [
    ({"bucket_overhead": "20 GB"}, "bucket_overhead", ""),
    ({"bucket_overhead": -1}, "bucket_overhead", ""),
    ({"memory_bandwidth": 0}, "memory_bandwidth", ""),
    ({"memory_bandwidth": "5 ms"}, "memory_bandwidth", ""),
    ({"gradient_as_bucket_view": "yes"}, "gradient_as_bucket_view", "expected true or false, got 'yes'"),
    ({"overlap_slowdown": -0.1}, "overlap_slowdown", "expected a fraction in [0, 10] (0.1 = 10% slower), got -0.1"),
    ({"overlap_slowdown": "10%"}, "overlap_slowdown", "expected a fraction in [0, 10]"),
    ({"overlap_slowdown": True}, "overlap_slowdown", "expected a fraction in [0, 10]"),
])
def test_ddp_costs_bad_values_name_the_key(raw, key, expected):
    msg = error(read_ddp, raw)
    assert msg.startswith(f"t.yaml: ddp.{key}: ") and expected in msg


def test_ddp_sharding_without_accumulation():
    assert read_ddp(SRC, {"sharding": "fsdp"}).sharding == "fsdp"
    assert error(read_ddp, {"sharding": "zero2", "gradient_accumulation": 2}) == (
        "t.yaml: ddp.sharding: expected gradient_accumulation 1 with sharding zero2 (accumulation is modeled for "
        "sharding none only), got gradient_accumulation 2"
    )
    assert error(read_ddp, {"overlap": 1}) == "t.yaml: ddp.overlap: expected true or false, got 1"


def test_collective():
    assert read_collective(SRC, {}) == spec.Collective("ring", "alpha-beta")
    assert set(ALGORITHMS) >= {"ring", "tree", "auto"} and "alpha-beta" in COST_MODELS
    assert error(read_collective, {"algorithm": "halving_doubling", "model": "nccl-2.19"}).startswith(
        "t.yaml: collective.algorithm: expected one of "
    )
    assert error(read_collective, {"algorithm": "rign"}).endswith("got 'rign' (did you mean 'ring'?)")


def test_calibration_checks_before_reading():
    ring = spec.Collective()
    assert error(read_calibration, 3, ring) == "t.yaml: calibration: expected the path of a calibration file, got 3"
    assert error(read_calibration, "c.yaml", spec.Collective("tree")).endswith(
        "expected collective.algorithm ring with model alpha-beta (or nccl, with a physical fit), got tree / alpha-beta"
    )


def test_calibration_path_is_relative_to_the_scenario(tmp_path):
    scenario = tmp_path / "run.yaml"
    scenario.write_text("")
    with pytest.raises(ScenarioError) as err:
        read_calibration(str(scenario), "cal.yaml", spec.Collective())
    assert str(err.value).startswith(f"{scenario}: calibration: {tmp_path / 'cal.yaml'}: ")


def test_ddp_comm_streams_default_one_and_read():
    assert read_ddp(SRC, {}).comm_streams == 1
    assert read_ddp(SRC, {"comm_streams": 2}).comm_streams == 2
    assert read_ddp(SRC, {"comm_streams": "3"}).comm_streams == 3


@pytest.mark.parametrize("value, given", [(0, "got 0"), (1.5, "got 1.5"), (True, "got true"), ("two", "'two'")])
def test_ddp_comm_streams_bad_values_name_the_key(value, given):
    msg = error(read_ddp, {"comm_streams": value})
    assert msg.startswith("t.yaml: ddp.comm_streams: expected") and given in msg.lower()


@pytest.mark.parametrize("sharding", ["zero2", "fsdp"])
def test_ddp_comm_streams_refused_with_sharding(sharding):
    msg = error(read_ddp, {"comm_streams": 2, "sharding": sharding})
    assert msg.startswith("t.yaml: ddp.comm_streams: expected comm_streams 1 with sharding " + sharding)
    assert "got comm_streams 2" in msg
    assert read_ddp(SRC, {"comm_streams": 1, "sharding": sharding}).comm_streams == 1


def test_ddp_spec_refuses_a_bad_stream_count():
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="comm_streams"):
            spec.DDP(comm_streams=bad)


def test_ddp_comm_capacity_default_one_read_and_checked():
    assert read_ddp(SRC, {}).comm_capacity == 1.0
    assert read_ddp(SRC, {"comm_streams": 2, "comm_capacity": 1.5}).comm_capacity == 1.5
    for bad, given in ((0.5, "got 0.5"), ("x", "got 'x'"), (True, "got true")):
        msg = error(read_ddp, {"comm_capacity": bad})
        assert msg.startswith("t.yaml: ddp.comm_capacity: expected") and given in msg
    with pytest.raises(ValueError, match="comm_capacity"):
        spec.DDP(comm_capacity=0.9)


def test_ddp_comm_shared_default_bandwidth_read_and_checked():
    assert read_ddp(SRC, {}).comm_shared == "bandwidth"
    assert read_ddp(SRC, {"comm_shared": "all"}).comm_shared == "all"
    msg = error(read_ddp, {"comm_shared": "some"})
    assert msg == "t.yaml: ddp.comm_shared: expected one of bandwidth, all, got 'some'"
    with pytest.raises(ValueError, match="comm_shared"):
        spec.DDP(comm_shared="links")


@pytest.mark.parametrize("key, value, message", [
    # bare unit parsers let both through: NaN copy times, a 2e300 s step
    ("memory_bandwidth", "1e-300", "ddp.memory_bandwidth: expected a rate of at least 1 B/s, got '1e-300'"),
    ("memory_bandwidth", 0.5, "ddp.memory_bandwidth: expected a rate of at least 1 B/s, got 0.5"),
    ("bucket_overhead", "1e300", "ddp.bucket_overhead: expected a time up to 1e+06 s (11.6 days), got '1e300'"),
    ("bucket_overhead", "2e6 s", "ddp.bucket_overhead: expected a time up to 1e+06 s (11.6 days), got '2e6 s'"),
])
def test_ddp_costs_are_bounded_like_every_time_and_rate(key, value, message):
    assert error(read_ddp, {key: value}) == f"t.yaml: {message}"


def test_ddp_costs_at_their_bounds_are_read():
    costs = read_ddp(SRC, {"memory_bandwidth": 1, "bucket_overhead": "1e6 s"}).costs
    assert (costs.memory_bandwidth, costs.bucket_overhead) == (1.0, 1e6)
    assert read_ddp(SRC, {"bucket_overhead": 0}).costs.bucket_overhead == 0.0
