"""Field readers and the mapping checker every section of the scenario schema is built from.

A field reader takes the raw YAML value of one key and returns it parsed, or raises a
``ValueError`` whose text says what was expected and what was given; :class:`Section` checks one
mapping of the document (its type, unknown and required keys) and turns a reader's ValueError
into a :class:`commsim.errors.ScenarioError` at the key's path. :data:`SECTION_KEYS` says where
each key lives, so that a misplaced key (``bucket_cap`` at the top level) is pointed home.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Tuple

from commsim.errors import ScenarioError
from commsim.units import (MAX_TIME, MIN_RATE, describe, parse_count, parse_number, parse_rate, parse_size,
                           parse_time)

__all__ = [
    "MAX_TIME",
    "MIN_RATE",
    "MISSING",
    "SECTION_KEYS",
    "CrossKeyError",
    "RATE_HINT",
    "TIME_HINT",
    "COUNT_HINT",
    "Parser",
    "Section",
    "did_you_mean",
    "read_text",
    "read_name",
    "read_bool",
    "choice",
    "read_size",
    "read_rate",
    "read_time",
    "read_time_or_zero",
    "read_count",
    "read_count_or_zero",
    "ranged",
]

# MAX_TIME and MIN_RATE, the plausibility limits of single fields, are commsim.units' (the
# calibration readers hold their files to them too); exported here for the scenario's readers.

MISSING = object()  # the default of Section.get: "no default, the key is optional"


class CrossKeyError(ScenarioError):
    """A check across keys, refused at ``path`` and caused as much by each key of ``related``
    (``model.parameters`` for the buckets ``ddp.bucket_cap`` makes of them): the loader names
    the ``--set`` flag that wrote any of them, as it does for ``path``'s own."""

    def __init__(self, source: str, path: Optional[str], message: str, related: Sequence[str] = ()) -> None:
        super().__init__(source, path, message)
        self.related = tuple(related)

RATE_HINT = "a rate like '100 Gbps' or '12.5 GB/s'"
TIME_HINT = "a time like '5 us' or '0.5 s'"
COUNT_HINT = "a whole number like 8"

Parser = Callable[[Any], Any]


def read_text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {describe(value)}")
    return value


def read_name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty name, got {describe(value)}")
    return value


def read_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {describe(value)}")
    return value


def choice(options: Sequence[str]) -> Parser:
    """A reader for one of ``options`` (with a did-you-mean hint for a near miss)."""

    def parse(value: Any) -> str:
        if not isinstance(value, str) or value not in options:
            hint = did_you_mean(value, options)
            raise ValueError(f"expected one of {', '.join(options)}, got {describe(value)}{hint}")
        return value

    return parse


def read_size(value: Any) -> float:
    return parse_size(value)


def read_rate(value: Any) -> float:
    rate = parse_rate(value)
    if rate < MIN_RATE:
        raise ValueError(f"expected a rate of at least {MIN_RATE:g} B/s, got {describe(value)}")
    return rate


def read_time(value: Any, allow_zero: bool = False) -> float:
    seconds = parse_time(value, allow_zero=allow_zero)
    if seconds > MAX_TIME:
        raise ValueError(f"expected a time up to {MAX_TIME:g} s (11.6 days), got {describe(value)}")
    return seconds


def read_time_or_zero(value: Any) -> float:
    return read_time(value, allow_zero=True)


def read_count(value: Any) -> int:
    return parse_count(value)


def read_count_or_zero(value: Any) -> int:
    return parse_count(value, allow_zero=True)


def ranged(low: float, high: float, *, low_open: bool, high_open: bool, what: str) -> Parser:
    """A reader for a plain number in an interval, e.g. (0, 1] for a fraction of the clock."""
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


def did_you_mean(word: Any, options: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for a word close to one of ``options``, else ''."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# Where each key lives, to point a misplaced key (bucket_cap at the top level) to its section.
SECTION_KEYS: Dict[str, Tuple[str, ...]] = {
    "": ("name", "description", "seed", "steps", "cluster", "model", "compute", "ddp", "collective", "stragglers",
         "calibration"),
    "cluster": ("nodes", "gpus_per_node", "intra_node", "inter_node", "preset", "intra_kind", "nics_per_node",
                "nic_bandwidth", "oversubscription", "gpu_arch"),
    "cluster.intra_node": ("bandwidth", "latency"),
    "cluster.inter_node": ("bandwidth", "latency"),
    "model": ("parameters", "grad_dtype"),
    "compute": ("forward", "backward", "optimizer", "batch_size"),
    "ddp": ("bucket_cap", "first_bucket", "overlap", "gradient_accumulation", "sharding", "bucket_sizes",
            "bucket_ready", "bucket_overhead", "memory_bandwidth", "gradient_as_bucket_view", "overlap_slowdown",
            "comm_streams", "comm_capacity", "comm_shared"),
    "collective": ("algorithm", "model", "nccl_algo", "nccl_proto"),
}


def _elsewhere(key: Any, path: str) -> str:
    if not isinstance(key, str):
        return ""
    homes = [section for section, keys in SECTION_KEYS.items() if key in keys and section != path]
    if len(homes) == 1 and not path.startswith("stragglers"):
        home = f"{homes[0]}.{key}" if homes[0] else key
        return f" (did you mean {home!r}?)"
    return ""


class Section:
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
                hint = did_you_mean(key, keys) or _elsewhere(key, path)
                raise ScenarioError(
                    source, self.child(name), f"unknown key{hint}; expected one of {', '.join(keys)}"
                )
        for key in required:
            if key not in value:
                expected = (hints or {}).get(key, "a value")
                raise ScenarioError(source, self.child(key), f"required key is missing, expected {expected}")

    def child(self, key: str) -> str:
        """The YAML path of ``key`` in this mapping."""
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.value

    def get(self, key: str, parse: Parser, default: Any = MISSING) -> Any:
        """``parse(value)`` of ``key``, or ``default`` when the key is absent."""
        if key not in self.value:
            return default
        try:
            return parse(self.value[key])
        except ValueError as err:
            raise ScenarioError(self.source, self.child(key), str(err)) from None
