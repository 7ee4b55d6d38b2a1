"""The training sections of a scenario: ``model``, ``compute``, ``ddp``, ``collective`` and
``calibration`` (what is trained, how long a step computes, how gradients are bucketed and
reduced, and with which algorithm and cost model).

The allowed choices live in spec.py's Literal types: adding "tree" to spec.Algorithm is all it
takes for the loader to accept it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Tuple, get_args

from commsim.collectives import algorithms_for
from commsim.errors import InputError, ScenarioError
from commsim.scenario import spec
from commsim.scenario.schema_fields import (
    SECTION_KEYS,
    TIME_HINT,
    CrossKeyError,
    Section,
    choice,
    read_bool,
    read_count,
    read_rate,
    read_size,
    read_time,
    read_time_or_zero,
    ranged,
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
    "read_ddp_costs",
    "DDP_COST_KEYS",
    "PRESET_MEMORY_BANDWIDTH",
    "read_collective",
    "read_calibration",
]

ALGORITHMS: Tuple[str, ...] = get_args(spec.Algorithm)
COST_MODELS: Tuple[str, ...] = get_args(spec.CostModel)
GRAD_DTYPES: Tuple[str, ...] = get_args(spec.GradDtype)
SHARDINGS: Tuple[str, ...] = get_args(spec.Sharding)
COMM_SHARED: Tuple[str, ...] = get_args(spec.CommShared)


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


# DDP's own costs (commsim/sim/ddp_costs.py says what each charges and where its default comes from)
DDP_COST_KEYS: Tuple[str, ...] = ("bucket_overhead", "memory_bandwidth", "gradient_as_bucket_view", "overlap_slowdown")

# GPU memory bandwidth (bytes/s) of the GPUs a cluster preset (commsim/scenario/topology.py)
# names: the default of ddp.memory_bandwidth there, instead of spec.DDPCosts' A100 figure.
# Presets without a GPU of their own (ethernet-*) keep that figure.
PRESET_MEMORY_BANDWIDTH = {
    "dgx-a100": 1555e9,          # A100 SXM4 40 GB HBM2: 1,555 GB/s (NVIDIA A100 datasheet)
    "dgx-h100": 3.35e12,         # H100 SXM5 80 GB HBM3: 3.35 TB/s (NVIDIA H100 datasheet)
    "hgx-h100-8x400g": 3.35e12,  # H100 SXM5 (NVIDIA H100 datasheet)
    "dgx-b200": 8e12,            # B200 HBM3e: 8 TB/s (NVIDIA DGX B200 datasheet: 64 TB/s for 8 GPUs)
    "pcie-8gpu": 320e9,          # T4 16 GB GDDR6: 320 GB/s (NVIDIA T4 datasheet)
    "dgx1-v100": 900e9,          # V100 SXM2 HBM2: 900 GB/s (NVIDIA V100 datasheet)
}


def read_ddp_costs(raw: Mapping[str, Any], source: str, where: str = "ddp",
                   memory_bandwidth: Optional[float] = None) -> spec.DDPCosts:
    """The DDP costs of a scenario's raw ``ddp:`` mapping (keys :data:`DDP_COST_KEYS`; the
    section's other keys are :func:`read_ddp`'s). ScenarioError naming ``ddp.KEY`` for a bad
    value. ``memory_bandwidth``: the default of that key (the cluster's GPUs), else the spec's."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ScenarioError(source, where, f"expected a mapping, got {describe(raw)}")
    kw = {} if memory_bandwidth is None else {"memory_bandwidth": float(memory_bandwidth)}
    # the bounded readers every other time and rate of a scenario uses: a bare unit parser let
    # 1e-300 B/s through (NaN copy times) and a 1e300 s overhead (a 2e300 s step)
    for key, parse in (("bucket_overhead", read_time_or_zero), ("memory_bandwidth", read_rate)):
        if key in raw:
            try:
                kw[key] = parse(raw[key])
            except ValueError as exc:  # the reader's message says what was expected and given
                raise ScenarioError(source, f"{where}.{key}", str(exc)) from None
    if "gradient_as_bucket_view" in raw:
        v = raw["gradient_as_bucket_view"]
        if not isinstance(v, bool):
            raise ScenarioError(source, f"{where}.gradient_as_bucket_view", f"expected true or false, got {describe(v)}")
        kw["gradient_as_bucket_view"] = v
    if "overlap_slowdown" in raw:
        v = raw["overlap_slowdown"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v <= 10):
            raise ScenarioError(source, f"{where}.overlap_slowdown",
                                f"expected a fraction in [0, 10] (0.1 = 10% slower), got {describe(v)}")
        kw["overlap_slowdown"] = float(v)
    return spec.DDPCosts(**kw)


def read_ddp(source: str, value: Any, *, model: Optional[spec.Model] = None, cluster: Any = None) -> spec.DDP:
    """The ``ddp`` mapping; `model` (when given) checks an explicit bucket layout's total;
    ``cluster`` is the document's raw ``cluster`` mapping, whose ``preset`` (if any) gives the
    default memory bandwidth (:data:`PRESET_MEMORY_BANDWIDTH`)."""
    m = Section(source, "ddp", value, SECTION_KEYS["ddp"])  # DDP_COST_KEYS among them
    accumulation = m.get("gradient_accumulation", read_count, spec.DDP.gradient_accumulation)
    sharding = m.get("sharding", choice(SHARDINGS), spec.DDP.sharding)
    if sharding != "none" and accumulation > 1:
        # DeepSpeed refuses no_sync() under ZeRO-2/3 and FSDP's no_sync keeps full gradients:
        # per-micro-batch communication is not modeled (commsim/sim/sharding.py)
        raise ScenarioError(source, "ddp.sharding",
                            f"expected gradient_accumulation 1 with sharding {sharding} (accumulation is modeled "
                            f"for sharding none only), got gradient_accumulation {accumulation}")
    streams = m.get("comm_streams", read_count, spec.DDP.comm_streams)
    if streams > 1 and sharding != "none":
        # ZeRO-2's and FSDP's gathers and reduce-scatters share one stream in the engine's schedule
        raise ScenarioError(source, "ddp.comm_streams",
                            f"expected comm_streams 1 with sharding {sharding} (concurrent collective streams are "
                            f"modeled for DDP's bucket all-reduces, sharding none), got comm_streams {streams}")
    capacity = m.get("comm_capacity", ranged(1.0, 1e6, low_open=False, high_open=False,
                                              what="collectives' worth of bandwidth (1: one shared link)"),
                     spec.DDP.comm_capacity)
    shared = m.get("comm_shared", choice(COMM_SHARED), spec.DDP.comm_shared)
    bucket_sizes, bucket_ready = _read_bucket_layout(m, model)
    preset = cluster.get("preset") if isinstance(cluster, Mapping) else None
    bandwidth = PRESET_MEMORY_BANDWIDTH.get(preset) if isinstance(preset, str) else None
    return spec.DDP(
        bucket_cap=m.get("bucket_cap", read_size, float(spec.DDP.bucket_cap)),
        first_bucket=m.get("first_bucket", read_size, float(spec.DDP.first_bucket)),
        overlap=m.get("overlap", read_bool, spec.DDP.overlap),
        gradient_accumulation=accumulation,
        sharding=sharding,
        bucket_sizes=bucket_sizes,
        bucket_ready=bucket_ready,
        costs=read_ddp_costs(m.value, source, "ddp", bandwidth),
        comm_streams=streams,
        comm_capacity=float(capacity),
        comm_shared=shared,
    )


# -- an explicit bucket layout: ddp.bucket_sizes and ddp.bucket_ready ----------------------------
# Gradient bytes may differ from the buckets' total by rounding: a bucket written in a unit
# ("25 MiB") or a model's parameter count rounded to a few digits.
BUCKET_TOTAL_TOLERANCE = 1e-3


def _read_bucket_layout(m: Section, model: Optional[spec.Model]):
    """(bucket_sizes, bucket_ready) as tuples, or None each: a real job's layout, as DDP built it
    (``commsim import`` writes both). Sizes replace first_bucket/bucket_cap, so they may not
    be given together; ready points need sizes, one per bucket, non-decreasing in (0, 1]."""
    source = m.source
    sizes = ready = None
    if m.has("bucket_sizes"):
        raw = m.value["bucket_sizes"]
        if not isinstance(raw, list) or not raw:
            raise ScenarioError(source, "ddp.bucket_sizes",
                                f"expected a non-empty list of bucket sizes in bytes (all-reduce order), got {describe(raw)}")
        out = []
        for i, v in enumerate(raw):
            try:
                out.append(float(read_size(v)))
            except ValueError as err:
                raise ScenarioError(source, f"ddp.bucket_sizes[{i}]", str(err)) from None
        for key in ("first_bucket", "bucket_cap"):
            if m.has(key):
                raise ScenarioError(source, f"ddp.{key}",
                                    "expected either ddp.bucket_sizes or ddp.first_bucket/bucket_cap, got both "
                                    "(bucket_sizes is the whole layout: remove first_bucket and bucket_cap, "
                                    "e.g. --set ddp.first_bucket=null --set ddp.bucket_cap=null)")
        if model is not None:
            total, grad = sum(out), float(model.grad_bytes)
            slack = max(BUCKET_TOTAL_TOLERANCE * grad, spec.BYTES_PER_ELEMENT[model.grad_dtype] * len(out))
            if abs(total - grad) > slack:
                raise CrossKeyError(source, "ddp.bucket_sizes",
                                    f"expected bucket sizes summing to the model's gradient bytes, {grad:.0f} B "
                                    f"(model.parameters x {model.grad_dtype}, within 0.1%), got {total:.0f} B",
                                    related=("model.parameters", "model.grad_dtype"))
        sizes = tuple(out)
    if m.has("bucket_ready"):
        raw = m.value["bucket_ready"]
        if sizes is None:
            raise ScenarioError(source, "ddp.bucket_ready",
                                "expected ddp.bucket_sizes too (one ready point per bucket), got bucket_ready alone")
        if not isinstance(raw, list) or len(raw) != len(sizes):
            raise ScenarioError(source, "ddp.bucket_ready",
                                f"expected a list of {len(sizes)} fractions of the backward (one per bucket of "
                                f"bucket_sizes), got {describe(raw)}")
        fraction = ranged(0.0, 1.0, low_open=True, high_open=False, what="a fraction of the backward")
        out = []
        for i, v in enumerate(raw):
            try:
                out.append(float(fraction(v)))
            except ValueError as err:
                raise ScenarioError(source, f"ddp.bucket_ready[{i}]", str(err)) from None
            if i and out[i] < out[i - 1]:
                raise ScenarioError(source, f"ddp.bucket_ready[{i}]",
                                    f"expected ready points non-decreasing (bucket {i} cannot be ready before bucket "
                                    f"{i - 1}), got {out[i]:g} after {out[i - 1]:g}")
        ready = tuple(out)
    return sizes, ready


def read_collective(source: str, value: Any) -> spec.Collective:
    m = Section(source, "collective", value, SECTION_KEYS["collective"])
    algorithm = m.get("algorithm", choice(ALGORITHMS), spec.Collective.algorithm)
    model = m.get("model", choice(COST_MODELS), spec.Collective.model)
    covered = [a for a in algorithms_for(model) if a in ALGORITHMS]  # all-reduce algorithms only
    if algorithm not in covered:
        raise ScenarioError(source, "collective.algorithm",
                            f"expected one of {', '.join(covered)} under model {model}, got {algorithm!r}")
    selections = {"nccl_algo": m.get("nccl_algo", read_selection("NCCL_ALGO's (ring, ring,tree or ^nvls)"), None),
                  "nccl_proto": m.get("nccl_proto", read_selection("NCCL_PROTO's (LL, LL,LL128 or ^Simple)"), None)}
    for key, text in selections.items():
        if text is not None and algorithm != "nccl":
            raise CrossKeyError(source, f"collective.{key}",
                                f"restricts NCCL's own choice: expected collective.algorithm nccl, got {algorithm!r}",
                                related=("collective.algorithm",))
    if algorithm == "nccl" and any(v is not None for v in selections.values()):
        # the NCCL model's names, read only where the keys are used (most scenarios never need them)
        from commsim.collectives.nccl.runnable import parse_selection
        from commsim.collectives.nccl.scale import ALGORITHMS as NCCL_ALGORITHMS, PROTOCOLS

        for key, names in (("nccl_algo", NCCL_ALGORITHMS), ("nccl_proto", PROTOCOLS)):
            try:
                parse_selection(selections[key], names, key, source)
            except InputError as exc:
                raise ScenarioError(source, f"collective.{key}", exc.message) from None
    return spec.Collective(algorithm=algorithm, model=model, **selections)


def read_selection(like: str):
    """A reader of an NCCL_ALGO / NCCL_PROTO style selection ("ring", "ring,tree", "^nvls"):
    non-empty text; `like` says whose names, in the message."""

    def parse(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"expected names like {like}, got {describe(value)}")
        return value.strip()

    return parse


def calibration_file(source: str, value: str) -> Path:
    """The file a scenario's ``calibration: PATH`` names: relative to the scenario file."""
    path = Path(value)
    if not path.is_absolute() and Path(source).parent.is_dir():
        path = Path(source).parent / path
    return path


def read_calibration(source: str, value: Any, collective: spec.Collective):
    """`calibration: PATH` (relative to the scenario file): a file from `commsim calibrate`.

    Its link levels price the ring (``collective.algorithm: ring``, ``model: alpha-beta``); its
    physical fit (``calibrate --physical``) prices NCCL's own collectives
    (``collective.algorithm: nccl``) at the scenario's scale."""
    if not isinstance(value, str) or not value:
        raise ScenarioError(source, "calibration", f"expected the path of a calibration file, got {describe(value)}")
    nccl = collective.algorithm == "nccl"
    if not nccl and (collective.algorithm, collective.model) != ("ring", "alpha-beta"):
        raise ScenarioError(
            source, "calibration",
            "a calibration measured the library's own all-reduce and replaces the ring's link costs: "
            "expected collective.algorithm ring with model alpha-beta (or nccl, with a physical fit), "
            f"got {collective.algorithm} / {collective.model}",
        )
    # the file reader (with its physical-fit and NCCL-table modules) is imported only for a
    # scenario that names a calibration: most runs have none and should not pay for it
    from commsim.calibration.file import load_calibration

    path = calibration_file(source, value)
    try:
        cal = load_calibration(path)
    except ScenarioError as err:  # the calibration file's own one-line error, reported at this key
        raise ScenarioError(source, "calibration", str(err) if err.source else f"{path}: {err}") from None
    if nccl:
        if cal.physical is None:
            raise CrossKeyError(source, "calibration",
                                f"{path}: collective.algorithm nccl is priced by a physical fit, and this calibration "
                                "has only link levels (write one with commsim calibrate --from-nccl-tests LOG ... "
                                "--physical --system PRESET)", related=("collective.algorithm",))
    elif not cal.levels:
        # the ring is priced by a link level: a file with only a physical fit failed later, in
        # the run, as "calibration has no link level ... (it has )", naming neither file nor key
        raise CrossKeyError(source, "calibration",
                            f"{path}: the calibration has only a physical fit, which prices NCCL's own collectives: "
                            "expected collective.algorithm nccl (collective.nccl_algo: ring runs NCCL's ring), "
                            f"got {collective.algorithm}", related=("collective.algorithm",))
    return cal


def check_nccl_selection(source: str, collective: spec.Collective, cluster: spec.Cluster, calibration,
                         sharding: str = "none") -> None:
    """What `collective.algorithm: nccl` can price, checked when the scenario is read, not mid-run:

    - ``collective.nccl_algo`` / ``nccl_proto`` that leave NCCL nothing it can run at the
      scenario's scale (NVLS across nodes without SHARP; PAT, which runs all_gather and
      reduce_scatter only) are refused at their key;
    - a calibration's physical fit holds the scale it can: a cluster with more GPUs per node than
      the fitted system is refused at ``cluster.gpus_per_node``;
    - a sharded run (``ddp.sharding`` zero2 / fsdp) has no all-reduce: its reduce-scatters and
      all-gathers are the ring halves of the cluster's links, which neither a physical fit nor
      those keys price, so the combination is refused at ``ddp.sharding``."""
    if collective.algorithm != "nccl":
        return
    fit = calibration.physical if calibration is not None else None
    selected = collective.nccl_algo is not None or collective.nccl_proto is not None
    if sharding != "none" and (fit is not None or selected):
        what = "a calibration's physical fit" if fit is not None else "collective.nccl_algo / nccl_proto"
        raise CrossKeyError(source, "ddp.sharding",
                            f"{what} prices NCCL's all-reduces, and a {sharding} run has none (its reduce-scatters "
                            "and all-gathers are the ring halves of the cluster's links): expected ddp.sharding none, "
                            f"got {sharding}", related=("collective.nccl_algo", "collective.nccl_proto", "calibration"))
    if cluster.world_size < 2 or not (selected or fit is not None):
        return
    from commsim.collectives.nccl_tuner import plan
    from commsim.network.system import system_of_fabric
    from commsim.scenario.topology import cluster_fabric

    system = fit.system if fit is not None else system_of_fabric(cluster_fabric(cluster))
    try:
        plan("all_reduce", system, cluster.nodes, cluster.gpus_per_node, algorithm=collective.nccl_algo,
             protocol=collective.nccl_proto, source=source)
    except InputError as exc:
        if exc.path in ("nodes", "gpus_per_node"):  # the fitted system cannot hold the cluster
            raise CrossKeyError(source, f"cluster.{exc.path}", f"{exc.message}: the calibration's physical fit is "
                                f"of {system.name}", related=("calibration",)) from None
        key = "nccl_proto" if exc.path == "protocol" else "nccl_algo"
        raise CrossKeyError(source, f"collective.{key}", exc.message,
                            related=("cluster.nodes", "cluster.gpus_per_node", "cluster.preset")) from None
