"""Tests for commsim.scenario.schema_training: model, compute, ddp, collective and calibration."""

from __future__ import annotations

import pytest

from commsim.errors import ScenarioError
from commsim.scenario import spec
from commsim.scenario.schema_training import (
    ALGORITHMS,
    COST_MODELS,
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
        "expected collective.algorithm ring with model alpha-beta, got tree / alpha-beta"
    )


def test_calibration_path_is_relative_to_the_scenario(tmp_path):
    scenario = tmp_path / "run.yaml"
    scenario.write_text("")
    with pytest.raises(ScenarioError) as err:
        read_calibration(str(scenario), "cal.yaml", spec.Collective())
    assert str(err.value).startswith(f"{scenario}: calibration: {tmp_path / 'cal.yaml'}: ")
