"""The scenario schema: which keys a scenario file has, their types, defaults and checks.

:func:`parse_scenario` turns a YAML mapping into a frozen :class:`commsim.scenario.spec.Scenario`, or
raises :class:`commsim.errors.ScenarioError` with one line naming the source, the key path in YAML
notation (``stragglers[1].ranks[0]``), what was expected and what was given. Each section has
its module: :mod:`.schema_fields` (the field readers and the mapping checker),
:mod:`.schema_cluster`, :mod:`.schema_training` (model, compute, ddp, collective, calibration)
and :mod:`.schema_stragglers`; this one reads the top level and checks what spans sections.
The top-level ``mitigation:`` section (remedies for ``commsim compare`` and ``commsim sweep``) is
accepted here and left out of the Scenario: its reader,
:func:`commsim.mitigations.spec.parse_section`, sits above this layer
(:func:`commsim.mitigations.section.mitigation_section` reads it from the same file and overrides).
Reading files and ``--set`` overrides live in :mod:`commsim.scenario.loader`. The format is
documented key by key in docs/scenario-format.md; keep the two in step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from commsim.errors import ScenarioError
from commsim.scenario import spec
from commsim.scenario.schema_cluster import (
    DEFAULT_INTER_NODE_LATENCY,
    DEFAULT_INTRA_NODE_LATENCY,
    MAX_WORLD_SIZE,
    read_cluster,
)
from commsim.scenario.schema_fields import (
    MAX_TIME,
    MIN_RATE,
    SECTION_KEYS,
    CrossKeyError,
    Section,
    read_count,
    read_count_or_zero,
    read_name,
    read_text,
)
from commsim.scenario.schema_stragglers import (
    JITTER_DISTRIBUTIONS,
    MAX_CV,
    MAX_SLOWDOWN,
    MIN_FRACTION,
    STRAGGLER_KINDS,
    read_stragglers,
)
from commsim.scenario.schema_training import (
    ALGORITHMS,
    GRAD_DTYPES,
    SHARDINGS,
    check_nccl_selection,
    read_calibration,
    read_collective,
    read_compute,
    read_ddp,
    read_model,
)

__all__ = [
    "parse_scenario",
    "check_comm_streams",
    "ALGORITHMS",
    "GRAD_DTYPES",
    "SHARDINGS",
    "JITTER_DISTRIBUTIONS",
    "STRAGGLER_KINDS",
    "DEFAULT_INTRA_NODE_LATENCY",
    "DEFAULT_INTER_NODE_LATENCY",
    "MAX_WORLD_SIZE",
    "MAX_RANK_STEPS",
    "MAX_BUCKETS",
    "MAX_TIME",
    "MIN_RATE",
    "MIN_FRACTION",
    "MAX_SLOWDOWN",
    "MAX_CV",
]

# A top-level section this layer accepts but does not read (module docstring).
MITIGATION_KEY = "mitigation"

# Plausibility limits across sections, whatever --force says (commsim.scenario.budget holds the
# memory and time a run may take): beyond them the records cannot even be indexed sanely.
MAX_RANK_STEPS = 2**30  # steps x world size: the engine keeps per-rank, per-step records
MAX_BUCKETS = 1_000_000  # gradient buckets per step (gradient bytes / bucket_cap)


def check_cost_model_arch(source: str, model: str, gpu_arch: str) -> None:
    """NCCL's cost models (nccl-2.7/2.19/2.30) have no Blackwell row: a CrossKeyError naming
    ``cluster.gpu_arch`` for such a cluster there (at load, or where a command's --model sets the
    model), rather than a price from another generation's tables. The alpha-beta model has none."""
    if model == "alpha-beta":
        return
    from commsim.collectives.nccl_model import tables_arch  # only an NCCL cost model needs it

    try:
        tables_arch(model, gpu_arch)
    except ValueError as err:
        raise CrossKeyError(source, "cluster.gpu_arch",
                            f"{err} (collective.algorithm: nccl with the alpha-beta model prices it)",
                            related=("collective.model",)) from None


def _default_name(source: str) -> str:
    path = Path(source)
    return path.stem if path.suffix in (".yaml", ".yml") and path.stem else spec.Scenario.name


# ddp.comm_streams > 1 is simulated event by event, rank by rank (commsim/sim/concurrent_streams.py):
# O(buckets x ranks x log ranks) per step, every step of both runs. At 8,192 ranks the scale
# scenario's 78 buckets take 2.1-2.8 s a step (benchmarks/streams_speed.py, 2-core VM), so its
# 100 steps and their baseline (7-9 min) fit the run-time budget's 10 minutes; at 16,384 a step
# takes 4.7 s (16 min), and the engine's one-stream schedule (a vector per collective, no
# per-rank events) is the tool for such worlds
MAX_STREAMS_WORLD_SIZE = 8192


def _check_comm_streams(source: str, streams: int, cluster, collective, stragglers, mitigation: bool) -> None:
    """What ``ddp.comm_streams`` > 1 does not model, refused at that key (one line each)."""
    given = f"got comm_streams {streams}"
    if cluster.world_size > MAX_STREAMS_WORLD_SIZE:
        raise ScenarioError(source, "ddp.comm_streams",
                            f"expected comm_streams 1 above {MAX_STREAMS_WORLD_SIZE} ranks (concurrent streams are "
                            f"simulated event by event, rank by rank), {given} at {cluster.world_size} ranks")
    if collective.model != "alpha-beta":
        raise ScenarioError(source, "ddp.comm_streams",
                            f"expected comm_streams 1 under collective.model {collective.model} (concurrent streams "
                            f"split each collective's alpha-beta time into a fixed and a bandwidth part), {given}")
    throttled = [i for i, s in enumerate(stragglers) if isinstance(s, spec.Throttle)]
    if throttled:
        raise ScenarioError(source, "ddp.comm_streams",
                            f"expected comm_streams 1 with a throttle straggler (stragglers[{throttled[0]}]: thermal "
                            f"clocks are not modeled with concurrent streams), {given}")
    if mitigation:
        raise ScenarioError(source, "ddp.comm_streams",
                            f"expected comm_streams 1 with a mitigation section (the remedies' schedules have one "
                            f"collective stream), {given}")


def check_comm_streams(source: str, scenario: spec.Scenario) -> None:
    """The reader's ``ddp.comm_streams`` refusals for a scenario a command changed after reading
    it (its node count, its cost model: ``commsim algorithms --nodes/--model``)."""
    if scenario.ddp.comm_streams > 1:
        _check_comm_streams(source, scenario.ddp.comm_streams, scenario.cluster, scenario.collective,
                            scenario.stragglers, False)


def parse_scenario(doc: Any, source: str) -> spec.Scenario:
    """Validate a scenario mapping (as from :func:`load_document`) into a frozen Scenario.

    ``source`` names the input in error messages (normally the file path); it also gives the
    default ``name`` (the file's stem). Raises ScenarioError on the first problem found.
    """
    top = Section(
        source, "", doc, SECTION_KEYS[""] + (MITIGATION_KEY,), required=("cluster", "model", "compute"),
        hints={
            "cluster": "a mapping with nodes, gpus_per_node, intra_node, inter_node",
            "model": "a mapping with parameters (and grad_dtype)",
            "compute": "a mapping with forward and backward (times per micro-batch)",
        },
    )
    cluster = read_cluster(source, doc["cluster"])
    model = read_model(source, doc["model"])
    compute = read_compute(source, doc["compute"])
    ddp = read_ddp(source, doc.get("ddp", {}), model=model, cluster=doc["cluster"])  # absent: every default (cluster: its preset's GPU)
    collective = read_collective(source, doc.get("collective", {}))
    buckets = model.grad_bytes / ddp.bucket_cap
    if buckets > MAX_BUCKETS:
        raise CrossKeyError(
            source, "ddp.bucket_cap",
            f"expected at most {MAX_BUCKETS} buckets per step (gradient bytes / bucket_cap), "
            f"got {model.grad_bytes:g} B / {ddp.bucket_cap:g} B = {buckets:.3g} buckets "
            f"(model.parameters {model.parameters} x {model.grad_dtype})",
            related=("model.parameters", "model.grad_dtype"),
        )
    stragglers = read_stragglers(source, doc["stragglers"], cluster) if "stragglers" in doc else ()
    steps = top.get("steps", read_count, spec.Scenario.steps)
    if steps * cluster.world_size > MAX_RANK_STEPS:
        raise CrossKeyError(
            source, "steps",
            f"expected steps x world size up to {MAX_RANK_STEPS} (the engine keeps per-rank, per-step "
            f"records), got {steps} x {cluster.world_size}",
            related=("cluster.nodes", "cluster.gpus_per_node"),
        )
    check_cost_model_arch(source, collective.model, cluster.gpu_arch)
    calibration = read_calibration(source, doc["calibration"], collective) if "calibration" in doc else None
    check_nccl_selection(source, collective, cluster, calibration, ddp.sharding)
    if ddp.comm_streams > 1:
        _check_comm_streams(source, ddp.comm_streams, cluster, collective, stragglers, MITIGATION_KEY in doc)
    return spec.Scenario(
        cluster=cluster,
        model=model,
        compute=compute,
        calibration=calibration,
        name=top.get("name", read_name, _default_name(source)),
        description=top.get("description", read_text, spec.Scenario.description),
        seed=top.get("seed", read_count_or_zero, spec.Scenario.seed),
        steps=steps,
        ddp=ddp,
        collective=collective,
        stragglers=stragglers,
    )
