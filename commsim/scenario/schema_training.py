"""The training sections of a scenario: ``model``, ``compute``, ``ddp``, ``collective`` and
``calibration`` (what is trained, how long a step computes, how gradients are bucketed and
reduced, and with which algorithm and cost model).

The allowed choices live in spec.py's Literal types: adding "tree" to spec.Algorithm is all it
takes for the loader to accept it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Tuple, get_args

from commsim.calibration.file import load_calibration
from commsim.collectives import algorithms_for
from commsim.errors import ScenarioError
from commsim.scenario import spec
from commsim.scenario.schema_fields import (
    SECTION_KEYS,
    TIME_HINT,
    Section,
    choice,
    read_bool,
    read_count,
    read_size,
    read_time,
    read_time_or_zero,
)
from commsim.units import describe

__all__ = [
    "ALGORITHMS",
    "COST_MODELS",
    "GRAD_DTYPES",
    "SHARDINGS",
    "read_model",
    "read_compute",
    "read_ddp",
    "read_collective",
    "read_calibration",
]

ALGORITHMS: Tuple[str, ...] = get_args(spec.Algorithm)
COST_MODELS: Tuple[str, ...] = get_args(spec.CostModel)
GRAD_DTYPES: Tuple[str, ...] = get_args(spec.GradDtype)
SHARDINGS: Tuple[str, ...] = get_args(spec.Sharding)


def read_model(source: str, value: Any) -> spec.Model:
    m = Section(
        source, "model", value, SECTION_KEYS["model"], required=("parameters",),
        hints={"parameters": "a whole number like 1e9"},
    )
    return spec.Model(
        parameters=m.get("parameters", read_count),
        grad_dtype=m.get("grad_dtype", choice(GRAD_DTYPES), spec.Model.grad_dtype),
    )


def read_compute(source: str, value: Any) -> spec.Compute:
    m = Section(
        source, "compute", value, SECTION_KEYS["compute"], required=("forward", "backward"),
        hints={"forward": TIME_HINT, "backward": TIME_HINT},
    )
    return spec.Compute(
        forward=m.get("forward", read_time),
        backward=m.get("backward", read_time),
        optimizer=m.get("optimizer", read_time_or_zero, spec.Compute.optimizer),
        batch_size=m.get("batch_size", read_count, spec.Compute.batch_size),
    )


def read_ddp(source: str, value: Any) -> spec.DDP:
    m = Section(source, "ddp", value, SECTION_KEYS["ddp"])
    accumulation = m.get("gradient_accumulation", read_count, spec.DDP.gradient_accumulation)
    sharding = m.get("sharding", choice(SHARDINGS), spec.DDP.sharding)
    if sharding != "none" and accumulation > 1:
        # DeepSpeed refuses no_sync() under ZeRO-2/3 and FSDP's no_sync keeps full gradients:
        # per-micro-batch communication is not modeled (commsim/sim/sharding.py)
        raise ScenarioError(source, "ddp.sharding",
                            f"expected gradient_accumulation 1 with sharding {sharding} (accumulation is modeled "
                            f"for sharding none only), got gradient_accumulation {accumulation}")
    return spec.DDP(
        bucket_cap=m.get("bucket_cap", read_size, float(spec.DDP.bucket_cap)),
        first_bucket=m.get("first_bucket", read_size, float(spec.DDP.first_bucket)),
        overlap=m.get("overlap", read_bool, spec.DDP.overlap),
        gradient_accumulation=accumulation,
        sharding=sharding,
    )


def read_collective(source: str, value: Any) -> spec.Collective:
    m = Section(source, "collective", value, SECTION_KEYS["collective"])
    algorithm = m.get("algorithm", choice(ALGORITHMS), spec.Collective.algorithm)
    model = m.get("model", choice(COST_MODELS), spec.Collective.model)
    covered = [a for a in algorithms_for(model) if a in ALGORITHMS]  # all-reduce algorithms only
    if algorithm not in covered:
        raise ScenarioError(source, "collective.algorithm",
                            f"expected one of {', '.join(covered)} under model {model}, got {algorithm!r}")
    return spec.Collective(algorithm=algorithm, model=model)


def read_calibration(source: str, value: Any, collective: spec.Collective):
    """`calibration: PATH` (relative to the scenario file): a file from `commsim calibrate`."""
    if not isinstance(value, str) or not value:
        raise ScenarioError(source, "calibration", f"expected the path of a calibration file, got {describe(value)}")
    if (collective.algorithm, collective.model) != ("ring", "alpha-beta"):
        raise ScenarioError(
            source, "calibration",
            "a calibration measured the library's own all-reduce and replaces the ring's link costs: "
            f"expected collective.algorithm ring with model alpha-beta, got {collective.algorithm} / {collective.model}",
        )
    path = Path(value)
    if not path.is_absolute() and Path(source).parent.is_dir():
        path = Path(source).parent / path
    try:
        return load_calibration(path)
    except ScenarioError as err:  # the calibration file's own one-line error, reported at this key
        raise ScenarioError(source, "calibration", str(err)) from None
