"""The scenario schema: which keys a scenario file has, their types, defaults and checks.

:func:`parse_scenario` turns a YAML mapping into a frozen :class:`commsim.scenario.spec.Scenario`, or
raises :class:`commsim.errors.ScenarioError` with one line naming the source, the key path in YAML
notation (``stragglers[1].ranks[0]``), what was expected and what was given. Reading files and
``--set`` overrides live in :mod:`commsim.scenario.loader`. The format is documented key by key in
README.md ("Scenario format"); keep the two in step.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, get_args

from commsim.scenario import spec

from commsim.scenario import topology
from commsim.collectives import algorithms_for
from commsim.errors import ScenarioError
from commsim.units import describe, parse_count, parse_number, parse_rate, parse_size, parse_time

__all__ = [
    "parse_scenario",
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

# The allowed choices live in spec.py's Literal types: adding "tree" to spec.Algorithm is all it
# takes for the loader to accept it.
ALGORITHMS: Tuple[str, ...] = get_args(spec.Algorithm)
COST_MODELS: Tuple[str, ...] = get_args(spec.CostModel)
INTRA_KINDS: Tuple[str, ...] = get_args(spec.IntraKind)
GRAD_DTYPES: Tuple[str, ...] = get_args(spec.GradDtype)
SHARDINGS: Tuple[str, ...] = get_args(spec.Sharding)
JITTER_DISTRIBUTIONS: Tuple[str, ...] = get_args(spec.JitterDistribution)

# Per-hop link latency when a file gives none: NCCL's own cost model for Ring/Simple
# (src/graph/tuning.cc hwLat, v2.19.3 and v2.30.7: NVLink 3.4 us, network 14.0 us; see
# /work/shared/data/nccl_tuning_constants.md). Write `latency:` explicitly to model anything else.
DEFAULT_INTRA_NODE_LATENCY = 3.4e-6
DEFAULT_INTER_NODE_LATENCY = 14.0e-6

# Plausibility limits. Far beyond any real job, they turn a typo (nodes: 1e9, bandwidth: 1e-300)
# into an input error instead of an engine that overflows to inf, runs out of memory or never ends.
MAX_WORLD_SIZE = 2**20  # ranks; about 64 times the largest jobs run today
MAX_RANK_STEPS = 2**30  # steps x world size: the engine keeps per-rank, per-step records
MAX_BUCKETS = 1_000_000  # gradient buckets per step (gradient bytes / bucket_cap)
MAX_TIME = 1e6  # seconds (11.6 days), for every duration in a scenario
MIN_RATE = 1.0  # bytes/s
MIN_FRACTION = 1e-6  # clock_fraction and slow_link factor: a million times slower is dead
MAX_SLOWDOWN = 1e6  # slow_rank factor
MAX_CV = 10.0  # jitter's coefficient of variation

_MISSING = object()

Parser = Callable[[Any], Any]


# --------------------------------------------------------------------------------------------
# Validation helpers


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {describe(value)}")
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty name, got {describe(value)}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {describe(value)}")
    return value


def _choice(options: Sequence[str]) -> Parser:
    def parse(value: Any) -> str:
        if not isinstance(value, str) or value not in options:
            hint = _did_you_mean(value, options)
            raise ValueError(f"expected one of {', '.join(options)}, got {describe(value)}{hint}")
        return value

    return parse


def _size(value: Any) -> float:
    return parse_size(value)


def _rate(value: Any) -> float:
    rate = parse_rate(value)
    if rate < MIN_RATE:
        raise ValueError(f"expected a rate of at least {MIN_RATE:g} B/s, got {describe(value)}")
    return rate


def _time(value: Any, allow_zero: bool = False) -> float:
    seconds = parse_time(value, allow_zero=allow_zero)
    if seconds > MAX_TIME:
        raise ValueError(f"expected a time up to {MAX_TIME:g} s (11.6 days), got {describe(value)}")
    return seconds


def _time_or_zero(value: Any) -> float:
    return _time(value, allow_zero=True)


def _count(value: Any) -> int:
    return parse_count(value)


def _count_or_zero(value: Any) -> int:
    return parse_count(value, allow_zero=True)


def _ranged(low: float, high: float, *, low_open: bool, high_open: bool, what: str) -> Parser:
    """A plain number in an interval, e.g. (0, 1] for a fraction of the clock."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def parse(value: Any) -> float:
        try:
            number = parse_number(value)
        except ValueError:
            number = None
        if number is None or (number <= low if low_open else number < low) or (
            number >= high if high_open else number > high
        ):
            raise ValueError(f"expected {what} in {interval}, got {describe(value)}")
        return number

    return parse


def _did_you_mean(word: Any, options: Iterable[str]) -> str:
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Mapping:
    """One mapping of the document: checks its type, unknown keys and required keys, then hands
    out parsed fields, turning each parser's ValueError into a ScenarioError at the field's path."""

    def __init__(
        self,
        source: str,
        path: str,
        value: Any,
        keys: Sequence[str],
        required: Sequence[str] = (),
        hints: Optional[Dict[str, str]] = None,
        what: str = "",
    ) -> None:
        self.source, self.path, self.value = source, path, value
        if not isinstance(value, dict):
            expected = what or f"a mapping with keys {', '.join(keys)}"
            raise ScenarioError(source, path or None, f"expected {expected}, got {describe(value)}")
        for key in value:
            if key not in keys:
                name = key if isinstance(key, str) else describe(key)
                hint = _did_you_mean(key, keys) or _elsewhere(key, path)
                raise ScenarioError(
                    source, self.child(name), f"unknown key{hint}; expected one of {', '.join(keys)}"
                )
        for key in required:
            if key not in value:
                expected = (hints or {}).get(key, "a value")
                raise ScenarioError(source, self.child(key), f"required key is missing, expected {expected}")

    def child(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.value

    def get(self, key: str, parse: Parser, default: Any = _MISSING) -> Any:
        if key not in self.value:
            return default
        try:
            return parse(self.value[key])
        except ValueError as err:
            raise ScenarioError(self.source, self.child(key), str(err)) from None


# Where each key lives, to point a misplaced key (bucket_cap at the top level) to its section.
_SECTION_KEYS: Dict[str, Tuple[str, ...]] = {
    "": ("name", "description", "seed", "steps", "cluster", "model", "compute", "ddp", "collective", "stragglers",
         "calibration"),
    "cluster": ("nodes", "gpus_per_node", "intra_node", "inter_node", "preset", "intra_kind", "nics_per_node",
                "nic_bandwidth", "oversubscription"),
    "cluster.intra_node": ("bandwidth", "latency"),
    "cluster.inter_node": ("bandwidth", "latency"),
    "model": ("parameters", "grad_dtype"),
    "compute": ("forward", "backward", "optimizer", "batch_size"),
    "ddp": ("bucket_cap", "first_bucket", "overlap", "gradient_accumulation", "sharding"),
    "collective": ("algorithm", "model"),
}


def _elsewhere(key: Any, path: str) -> str:
    if not isinstance(key, str):
        return ""
    homes = [section for section, keys in _SECTION_KEYS.items() if key in keys and section != path]
    if len(homes) == 1 and not path.startswith("stragglers"):
        home = f"{homes[0]}.{key}" if homes[0] else key
        return f" (did you mean {home!r}?)"
    return ""


# --------------------------------------------------------------------------------------------
# Sections

_RATE_HINT = "a rate like '100 Gbps' or '12.5 GB/s'"
_TIME_HINT = "a time like '5 us' or '0.5 s'"
_COUNT_HINT = "a whole number like 8"


def _link(source: str, path: str, value: Any, default_latency: float) -> spec.Link:
    m = _Mapping(
        source, path, value, _SECTION_KEYS[path], required=("bandwidth",),
        hints={"bandwidth": _RATE_HINT},
        what=f"a mapping with bandwidth ({_RATE_HINT}) and latency",
    )
    return spec.Link(
        bandwidth=m.get("bandwidth", _rate),
        latency=m.get("latency", _time_or_zero, default_latency),
    )


def _cluster(source: str, value: Any) -> spec.Cluster:
    if isinstance(value, dict):  # a named preset fills in what the file leaves out
        value = topology.expand_cluster(value, source, "cluster")
    m = _Mapping(
        source, "cluster", value, _SECTION_KEYS["cluster"],
        required=("nodes", "gpus_per_node", "intra_node", "inter_node"),
        hints={
            "nodes": _COUNT_HINT,
            "gpus_per_node": _COUNT_HINT,
            "intra_node": f"a mapping with bandwidth ({_RATE_HINT})",
            "inter_node": f"a mapping with bandwidth ({_RATE_HINT})",
        },
    )
    nodes = m.get("nodes", _count)
    gpus = m.get("gpus_per_node", _count)
    if nodes * gpus > MAX_WORLD_SIZE:
        raise ScenarioError(
            source, "cluster",
            f"expected a world size (nodes x gpus_per_node) up to {MAX_WORLD_SIZE}, got {nodes} x {gpus} = {nodes * gpus}",
        )
    if "oversubscription" in m.value:  # only meaningful through a preset's NIC arithmetic
        over = m.get("oversubscription", parse_number)
        if over < 1:
            raise ScenarioError(source, "cluster.oversubscription", topology.OVERSUBSCRIPTION_EXPECTED.format(over))
    if "nic_bandwidth" in m.value:
        m.get("nic_bandwidth", _rate)
    return spec.Cluster(
        nodes=nodes,
        gpus_per_node=gpus,
        intra_node=_link(source, "cluster.intra_node", m.value["intra_node"], DEFAULT_INTRA_NODE_LATENCY),
        inter_node=_link(source, "cluster.inter_node", m.value["inter_node"], DEFAULT_INTER_NODE_LATENCY),
        intra_kind=m.get("intra_kind", _choice(INTRA_KINDS), spec.Cluster.intra_kind),
        nics_per_node=m.get("nics_per_node", _count, None),
    )


def _model(source: str, value: Any) -> spec.Model:
    m = _Mapping(
        source, "model", value, _SECTION_KEYS["model"], required=("parameters",),
        hints={"parameters": "a whole number like 1e9"},
    )
    return spec.Model(
        parameters=m.get("parameters", _count),
        grad_dtype=m.get("grad_dtype", _choice(GRAD_DTYPES), spec.Model.grad_dtype),
    )


def _compute(source: str, value: Any) -> spec.Compute:
    m = _Mapping(
        source, "compute", value, _SECTION_KEYS["compute"], required=("forward", "backward"),
        hints={"forward": _TIME_HINT, "backward": _TIME_HINT},
    )
    return spec.Compute(
        forward=m.get("forward", _time),
        backward=m.get("backward", _time),
        optimizer=m.get("optimizer", _time_or_zero, spec.Compute.optimizer),
        batch_size=m.get("batch_size", _count, spec.Compute.batch_size),
    )


def _ddp(source: str, value: Any) -> spec.DDP:
    m = _Mapping(source, "ddp", value, _SECTION_KEYS["ddp"])
    accumulation = m.get("gradient_accumulation", _count, spec.DDP.gradient_accumulation)
    sharding = m.get("sharding", _choice(SHARDINGS), spec.DDP.sharding)
    if sharding != "none" and accumulation > 1:
        # DeepSpeed refuses no_sync() under ZeRO-2/3 and FSDP's no_sync keeps full gradients:
        # per-micro-batch communication is not modeled (commsim/sim/sharding.py)
        raise ScenarioError(source, "ddp.sharding",
                            f"expected gradient_accumulation 1 with sharding {sharding} (accumulation is modeled "
                            f"for sharding none only), got gradient_accumulation {accumulation}")
    return spec.DDP(
        bucket_cap=m.get("bucket_cap", _size, float(spec.DDP.bucket_cap)),
        first_bucket=m.get("first_bucket", _size, float(spec.DDP.first_bucket)),
        overlap=m.get("overlap", _bool, spec.DDP.overlap),
        gradient_accumulation=accumulation,
        sharding=sharding,
    )


def _calibration(source: str, value: Any, collective: spec.Collective):
    """`calibration: PATH` (relative to the scenario file): a file from `commsim calibrate`."""
    from commsim.calibration.file import load_calibration

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


def _collective(source: str, value: Any) -> spec.Collective:
    m = _Mapping(source, "collective", value, _SECTION_KEYS["collective"])
    algorithm = m.get("algorithm", _choice(ALGORITHMS), spec.Collective.algorithm)
    model = m.get("model", _choice(COST_MODELS), spec.Collective.model)
    covered = [a for a in algorithms_for(model) if a in ALGORITHMS]  # all-reduce algorithms only
    if algorithm not in covered:
        raise ScenarioError(source, "collective.algorithm",
                            f"expected one of {', '.join(covered)} under model {model}, got {algorithm!r}")
    return spec.Collective(algorithm=algorithm, model=model)


# --------------------------------------------------------------------------------------------
# Stragglers


def _world_text(cluster: spec.Cluster) -> str:
    return f"world size {cluster.world_size} = {cluster.nodes} nodes x {cluster.gpus_per_node} GPUs"


def _rank_index(source: str, path: str, value: Any, cluster: spec.Cluster) -> int:
    top = cluster.world_size - 1
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise ScenarioError(
            source, path, f"expected a rank in 0..{top} ({_world_text(cluster)}), got {describe(value)}"
        )
    return value


def _ranks(m: _Mapping, cluster: spec.Cluster, *, all_is_none: bool = False) -> Optional[Tuple[int, ...]]:
    """`ranks`: one rank, a list of ranks, or "all"."""
    path = m.child("ranks")
    value = m.value["ranks"]
    if value == "all":
        return None if all_is_none else tuple(range(cluster.world_size))
    if not isinstance(value, list):
        return (_rank_index(m.source, path, value, cluster),)
    if not value:
        raise ScenarioError(m.source, path, "expected at least one rank (or 'all'), got [] (an empty list)")
    ranks: List[int] = []
    seen = set()
    for i, item in enumerate(value):
        rank = _rank_index(m.source, f"{path}[{i}]", item, cluster)
        if rank in seen:
            raise ScenarioError(m.source, f"{path}[{i}]", f"expected each rank once, got rank {rank} twice")
        seen.add(rank)
        ranks.append(rank)
    return tuple(ranks)


_RANKS_HINT = "a rank, a list of ranks, or 'all'"
def _fraction(value: Any) -> float:
    number = _ranged(0, 1, low_open=True, high_open=False, what="a fraction")(value)
    if number < MIN_FRACTION:
        raise ValueError(f"expected a fraction in (0, 1] of at least {MIN_FRACTION:g}, got {describe(value)}")
    return number


def _slow_rank(m: _Mapping, cluster: spec.Cluster) -> spec.SlowRank:
    return spec.SlowRank(
        ranks=_ranks(m, cluster),
        # A factor below 1 would make the rank faster; it is almost always a clock fraction
        # written where a slowdown belongs.
        factor=m.get("factor", _ranged(1, MAX_SLOWDOWN, low_open=False, high_open=False,
                                       what="a slowdown factor (compute time is multiplied by it)")),
    )


def _throttle(m: _Mapping, cluster: spec.Cluster) -> spec.Throttle:
    return spec.Throttle(
        ranks=_ranks(m, cluster),
        heat_up=m.get("heat_up", _time),
        throttled_time=m.get("throttled_time", _time),
        clock_fraction=m.get("clock_fraction", _fraction),
        phase=m.get("phase", _time_or_zero, spec.Throttle.phase),
    )


def _jitter(m: _Mapping, cluster: spec.Cluster) -> spec.Jitter:
    distribution = m.get("distribution", _choice(JITTER_DISTRIBUTIONS), spec.Jitter.distribution)
    if distribution == "exponential":
        # Mean 1 and spread cv from a shifted exponential, 1 - cv + cv * Exp(1), which would go
        # negative for cv > 1 (commsim.sim.stragglers.jitter_draws).
        cv = m.get("cv", _ranged(0, 1, low_open=False, high_open=False,
                                 what="a coefficient of variation (exponential jitter)"))
    else:
        cv = m.get("cv", _ranged(0, MAX_CV, low_open=False, high_open=False, what="a coefficient of variation"))
    return spec.Jitter(
        cv=cv,
        distribution=distribution,
        ranks=_ranks(m, cluster, all_is_none=True) if m.has("ranks") else None,
    )


def _exactly_one(m: _Mapping, a: str, b: str, what: str) -> None:
    given = [key for key in (a, b) if m.has(key)]
    if len(given) != 1:
        got = "both" if given else "neither"
        raise ScenarioError(m.source, m.path, f"expected exactly one of {a} or {b} ({what}), got {got}")


def _stall(m: _Mapping, cluster: spec.Cluster) -> spec.Stall:
    _exactly_one(m, "every", "probability", "how often the stall happens")
    return spec.Stall(
        ranks=_ranks(m, cluster),
        duration=m.get("duration", _time),
        every=m.get("every", _count, None),
        probability=m.get("probability", _ranged(0, 1, low_open=False, high_open=False, what="a probability"), None),
    )


def _slow_link(m: _Mapping, cluster: spec.Cluster) -> spec.SlowLink:
    _exactly_one(m, "rank", "node", "the hop leaving a rank, or a node's network link")
    rank = node = None
    if m.has("rank"):
        rank = _rank_index(m.source, m.child("rank"), m.value["rank"], cluster)
    else:
        value, top = m.value["node"], cluster.nodes - 1
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
            raise ScenarioError(
                m.source, m.child("node"), f"expected a node in 0..{top} ({cluster.nodes} nodes), got {describe(value)}"
            )
        node = value
    return spec.SlowLink(factor=m.get("factor", _fraction), rank=rank, node=node)


# kind -> (keys besides `kind`, required keys, hints for missing keys, builder)
_STRAGGLERS: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...], Dict[str, str], Callable[[_Mapping, spec.Cluster], Any]]] = {
    "slow_rank": (
        ("ranks", "factor"), ("ranks", "factor"),
        {"ranks": _RANKS_HINT, "factor": "a slowdown factor >= 1 like 1.5"},
        _slow_rank,
    ),
    "throttle": (
        ("ranks", "heat_up", "throttled_time", "clock_fraction", "phase"),
        ("ranks", "heat_up", "throttled_time", "clock_fraction"),
        {"ranks": _RANKS_HINT, "heat_up": _TIME_HINT, "throttled_time": _TIME_HINT,
         "clock_fraction": "a fraction in (0, 1] like 0.5"},
        _throttle,
    ),
    "jitter": (
        ("ranks", "distribution", "cv"), ("cv",),
        {"cv": "a coefficient of variation >= 0 like 0.05"},
        _jitter,
    ),
    "stall": (
        ("ranks", "duration", "every", "probability"), ("ranks", "duration"),
        {"ranks": _RANKS_HINT, "duration": _TIME_HINT},
        _stall,
    ),
    "slow_link": (
        ("factor", "rank", "node"), ("factor",),
        {"factor": "a fraction of the bandwidth in (0, 1] like 0.5"},
        _slow_link,
    ),
}
STRAGGLER_KINDS: Tuple[str, ...] = tuple(_STRAGGLERS)


def _straggler(source: str, path: str, value: Any, cluster: spec.Cluster) -> Any:
    kinds = ", ".join(STRAGGLER_KINDS)
    if not isinstance(value, dict):
        raise ScenarioError(source, path, f"expected a mapping with a kind ({kinds}), got {describe(value)}")
    if "kind" not in value:
        raise ScenarioError(source, f"{path}.kind", f"required key is missing, expected one of {kinds}")
    kind = value["kind"]
    if not isinstance(kind, str) or kind not in _STRAGGLERS:
        hint = _did_you_mean(kind, STRAGGLER_KINDS)
        raise ScenarioError(source, f"{path}.kind", f"expected one of {kinds}, got {describe(kind)}{hint}")
    keys, required, hints, build = _STRAGGLERS[kind]
    m = _Mapping(source, path, value, ("kind",) + keys, required=required, hints=hints)
    return build(m, cluster)


def _stragglers(source: str, value: Any, cluster: spec.Cluster) -> Tuple[Any, ...]:
    if not isinstance(value, list):
        raise ScenarioError(
            source, "stragglers", f"expected a list of mappings, each with a kind, got {describe(value)}"
        )
    stragglers = []
    throttled: Dict[int, int] = {}  # rank -> index of the throttle entry that holds it
    for i, item in enumerate(value):
        straggler = _straggler(source, f"stragglers[{i}]", item, cluster)
        if isinstance(straggler, spec.Throttle):
            # A GPU has one thermal clock; two cycles on one rank have no meaning.
            for rank in straggler.ranks:
                if rank in throttled:
                    raise ScenarioError(
                        source, f"stragglers[{i}].ranks",
                        f"expected each rank in at most one throttle entry, got rank {rank}, "
                        f"already in stragglers[{throttled[rank]}]",
                    )
                throttled[rank] = i
        stragglers.append(straggler)
    return tuple(stragglers)


# --------------------------------------------------------------------------------------------
# The whole scenario


def _default_name(source: str) -> str:
    path = Path(source)
    return path.stem if path.suffix in (".yaml", ".yml") and path.stem else spec.Scenario.name


def parse_scenario(doc: Any, source: str) -> spec.Scenario:
    """Validate a scenario mapping (as from :func:`load_document`) into a frozen Scenario.

    ``source`` names the input in error messages (normally the file path); it also gives the
    default ``name`` (the file's stem). Raises ScenarioError on the first problem found.
    """
    top = _Mapping(
        source, "", doc, _SECTION_KEYS[""], required=("cluster", "model", "compute"),
        hints={
            "cluster": "a mapping with nodes, gpus_per_node, intra_node, inter_node",
            "model": "a mapping with parameters (and grad_dtype)",
            "compute": "a mapping with forward and backward (times per micro-batch)",
        },
    )
    cluster = _cluster(source, doc["cluster"])
    model = _model(source, doc["model"])
    compute = _compute(source, doc["compute"])
    ddp = _ddp(source, doc.get("ddp", {}))  # an absent section means every default
    collective = _collective(source, doc.get("collective", {}))
    buckets = model.grad_bytes / ddp.bucket_cap
    if buckets > MAX_BUCKETS:
        raise ScenarioError(
            source, "ddp.bucket_cap",
            f"expected at most {MAX_BUCKETS} buckets per step (gradient bytes / bucket_cap), "
            f"got {model.grad_bytes:g} B / {ddp.bucket_cap:g} B = {buckets:.3g} buckets",
        )
    stragglers = _stragglers(source, doc["stragglers"], cluster) if "stragglers" in doc else ()
    steps = top.get("steps", _count, spec.Scenario.steps)
    if steps * cluster.world_size > MAX_RANK_STEPS:
        raise ScenarioError(
            source, "steps",
            f"expected steps x world size up to {MAX_RANK_STEPS} (the engine keeps per-rank, per-step "
            f"records), got {steps} x {cluster.world_size}",
        )
    calibration = _calibration(source, doc["calibration"], collective) if "calibration" in doc else None
    return spec.Scenario(
        cluster=cluster,
        model=model,
        compute=compute,
        calibration=calibration,
        name=top.get("name", _name, _default_name(source)),
        description=top.get("description", _text, spec.Scenario.description),
        seed=top.get("seed", _count_or_zero, spec.Scenario.seed),
        steps=steps,
        ddp=ddp,
        collective=collective,
        stragglers=stragglers,
    )
