"""The ``stragglers`` section of a scenario: a list of entries, each with a ``kind``.

Every kind has its keys, its required keys and a builder (:data:`STRAGGLERS`); ranks are
checked against the cluster's world size, so the cluster is read first.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple, get_args

from commsim.errors import ScenarioError
from commsim.scenario import spec
from commsim.scenario.schema_fields import (
    TIME_HINT,
    Section,
    choice,
    did_you_mean,
    ranged,
    read_count,
    read_time,
    read_time_or_zero,
)
from commsim.units import MIN_FRACTION, describe

__all__ = [
    "JITTER_DISTRIBUTIONS",
    "STRAGGLER_KINDS",
    "STRAGGLERS",
    "MIN_FRACTION",
    "MAX_SLOWDOWN",
    "MAX_CV",
    "read_stragglers",
]

JITTER_DISTRIBUTIONS: Tuple[str, ...] = get_args(spec.JitterDistribution)

# MIN_FRACTION (commsim.units): the least clock_fraction and slow_link factor
MAX_SLOWDOWN = 1e6  # slow_rank factor
MAX_CV = 10.0  # jitter's coefficient of variation


def _world_text(cluster: spec.Cluster) -> str:
    return f"world size {cluster.world_size} = {cluster.nodes} nodes x {cluster.gpus_per_node} GPUs"


def _rank_index(source: str, path: str, value: Any, cluster: spec.Cluster) -> int:
    top = cluster.world_size - 1
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise ScenarioError(
            source, path, f"expected a rank in 0..{top} ({_world_text(cluster)}), got {describe(value)}"
        )
    return value


def _ranks(m: Section, cluster: spec.Cluster, *, all_is_none: bool = False) -> Optional[Tuple[int, ...]]:
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
    number = ranged(0, 1, low_open=True, high_open=False, what="a fraction")(value)
    if number < MIN_FRACTION:
        raise ValueError(f"expected a fraction in (0, 1] of at least {MIN_FRACTION:g}, got {describe(value)}")
    return number


def _slow_rank(m: Section, cluster: spec.Cluster) -> spec.SlowRank:
    return spec.SlowRank(
        ranks=_ranks(m, cluster),
        # A factor below 1 would make the rank faster; it is almost always a clock fraction
        # written where a slowdown belongs.
        factor=m.get("factor", ranged(1, MAX_SLOWDOWN, low_open=False, high_open=False,
                                      what="a slowdown factor (compute time is multiplied by it)")),
    )


def _throttle(m: Section, cluster: spec.Cluster) -> spec.Throttle:
    return spec.Throttle(
        ranks=_ranks(m, cluster),
        heat_up=m.get("heat_up", read_time),
        throttled_time=m.get("throttled_time", read_time),
        clock_fraction=m.get("clock_fraction", _fraction),
        phase=m.get("phase", read_time_or_zero, spec.Throttle.phase),
    )


def _jitter(m: Section, cluster: spec.Cluster) -> spec.Jitter:
    distribution = m.get("distribution", choice(JITTER_DISTRIBUTIONS), spec.Jitter.distribution)
    if distribution == "exponential":
        # Mean 1 and spread cv from a shifted exponential, 1 - cv + cv * Exp(1), which would go
        # negative for cv > 1 (commsim.sim.stragglers.jitter_draws).
        cv = m.get("cv", ranged(0, 1, low_open=False, high_open=False,
                                what="a coefficient of variation (exponential jitter)"))
    else:
        cv = m.get("cv", ranged(0, MAX_CV, low_open=False, high_open=False, what="a coefficient of variation"))
    return spec.Jitter(
        cv=cv,
        distribution=distribution,
        ranks=_ranks(m, cluster, all_is_none=True) if m.has("ranks") else None,
    )


def _exactly_one(m: Section, a: str, b: str, what: str) -> None:
    given = [key for key in (a, b) if m.has(key)]
    if len(given) != 1:
        got = "both" if given else "neither"
        raise ScenarioError(m.source, m.path, f"expected exactly one of {a} or {b} ({what}), got {got}")


def _stall(m: Section, cluster: spec.Cluster) -> spec.Stall:
    _exactly_one(m, "every", "probability", "how often the stall happens")
    return spec.Stall(
        ranks=_ranks(m, cluster),
        duration=m.get("duration", read_time),
        every=m.get("every", read_count, None),
        probability=m.get("probability", ranged(0, 1, low_open=False, high_open=False, what="a probability"), None),
    )


def _slow_link(m: Section, cluster: spec.Cluster) -> spec.SlowLink:
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
STRAGGLERS: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...], Dict[str, str], Callable[[Section, spec.Cluster], Any]]] = {
    "slow_rank": (
        ("ranks", "factor"), ("ranks", "factor"),
        {"ranks": _RANKS_HINT, "factor": "a slowdown factor >= 1 like 1.5"},
        _slow_rank,
    ),
    "throttle": (
        ("ranks", "heat_up", "throttled_time", "clock_fraction", "phase"),
        ("ranks", "heat_up", "throttled_time", "clock_fraction"),
        {"ranks": _RANKS_HINT, "heat_up": TIME_HINT, "throttled_time": TIME_HINT,
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
        {"ranks": _RANKS_HINT, "duration": TIME_HINT},
        _stall,
    ),
    "slow_link": (
        ("factor", "rank", "node"), ("factor",),
        {"factor": "a fraction of the bandwidth in (0, 1] like 0.5"},
        _slow_link,
    ),
}
STRAGGLER_KINDS: Tuple[str, ...] = tuple(STRAGGLERS)


def _straggler(source: str, path: str, value: Any, cluster: spec.Cluster) -> Any:
    kinds = ", ".join(STRAGGLER_KINDS)
    if not isinstance(value, dict):
        raise ScenarioError(source, path, f"expected a mapping with a kind ({kinds}), got {describe(value)}")
    if "kind" not in value:
        raise ScenarioError(source, f"{path}.kind", f"required key is missing, expected one of {kinds}")
    kind = value["kind"]
    if not isinstance(kind, str) or kind not in STRAGGLERS:
        hint = did_you_mean(kind, STRAGGLER_KINDS)
        raise ScenarioError(source, f"{path}.kind", f"expected one of {kinds}, got {describe(kind)}{hint}")
    keys, required, hints, build = STRAGGLERS[kind]
    m = Section(source, path, value, ("kind",) + keys, required=required, hints=hints)
    return build(m, cluster)


def _check_slowdown(source: str, index: int, entry: spec.SlowRank,
                    slowed: Dict[int, Tuple[float, List[int]]]) -> None:
    """slow_rank entries on one rank multiply (commsim.sim.stragglers.perturbations): their
    product is held to the one entry's limit, MAX_SLOWDOWN, so that 60 entries of 1e6 do not
    overflow a rank's compute time to inf and every figure of the run to NaN."""
    for rank in entry.ranks:
        product, entries = slowed.get(rank, (1.0, []))
        product, entries = product * entry.factor, entries + [index]
        if product > MAX_SLOWDOWN:
            listed = " x ".join(f"stragglers[{j}]" for j in entries)
            raise ScenarioError(
                source, f"stragglers[{index}].factor",
                f"expected the slow_rank factors of one rank to multiply to at most {MAX_SLOWDOWN:g}, "
                f"got {product:g} on rank {rank} ({listed})",
            )
        slowed[rank] = (product, entries)


def read_stragglers(source: str, value: Any, cluster: spec.Cluster) -> Tuple[Any, ...]:
    """The ``stragglers`` list as spec records, ranks checked against ``cluster``."""
    if not isinstance(value, list):
        raise ScenarioError(
            source, "stragglers", f"expected a list of mappings, each with a kind, got {describe(value)}"
        )
    stragglers = []
    throttled: Dict[int, int] = {}  # rank -> index of the throttle entry that holds it
    slowed: Dict[int, Tuple[float, List[int]]] = {}  # rank -> (product of its slow_rank factors, entries)
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
        if isinstance(straggler, spec.SlowRank):
            _check_slowdown(source, i, straggler, slowed)
        stragglers.append(straggler)
    return tuple(stragglers)
