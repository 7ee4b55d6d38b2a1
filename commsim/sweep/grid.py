"""Sweep grids: ``--grid KEY=V1,V2,...`` options and grid YAML files, and their cartesian product.

A grid maps scenario key paths (the same dotted paths as ``commsim run --set``) to non-empty
lists of distinct values. All YAML (a grid file, each ``--grid`` value) is read through
:mod:`commsim.yamlio`, the project's one strict reader, so its limits (size, aliases, nesting,
duplicate keys, tags) hold here too; whatever still escapes PyYAML's constructors is turned into
the same one-line :class:`~commsim.sweep.errors.SweepError`.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Tuple

from commsim.errors import InputError
from commsim.sweep.errors import SweepError
from commsim.yamlio import MAX_DEPTH, parse_yaml, read_text_file

# Key syntax proper (stragglers[0].cv) is the loader's to check, through apply_overrides.
_KEY_RE = re.compile(r"^[^\s=,]+$")

# A swept value is a scenario value (a number, a unit string, a straggler list): a few levels
# deep and a few dozen items. These bounds are far above that and far below what would make
# serialising the value (to compare, fingerprint and write it) exhaust memory or the stack,
# as a YAML alias bomb or a deeply nested list would.
MAX_VALUE_ITEMS = 100_000
MAX_VALUE_DEPTH = MAX_DEPTH  # the one reader's limit (commsim.yamlio): a deeper value never parses

# A source longer than this (a 4,301-digit --grid value) is shortened in messages.
_MAX_SOURCE_CHARS = 80


@dataclass(frozen=True)
class Grid:
    """Keys (dotted scenario paths) and, per key, the non-empty tuple of values to sweep."""

    keys: Tuple[str, ...]
    values: Tuple[Tuple[Any, ...], ...]

    def __len__(self) -> int:
        return math.prod(len(v) for v in self.values) if self.keys else 0

    def points(self) -> List[Dict[str, Any]]:
        """Every point of the cartesian product, in order (the last key varies fastest)."""
        return [dict(zip(self.keys, combo)) for combo in itertools.product(*self.values)]

    def as_dict(self) -> Dict[str, List[Any]]:
        return {k: list(v) for k, v in zip(self.keys, self.values)}


def canonical(value: Any) -> str:
    """A value as compact, key-sorted JSON: equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def value_text(value: Any) -> str:
    """How a swept value is written in a CSV cell, a point label or a plot label."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return ", ".join(f"{k}={value_text(v)}" for k, v in value.items())
    return json.dumps(value, separators=(",", ":"), default=str)


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_SOURCE_CHARS else text[: _MAX_SOURCE_CHARS - 3] + "..."


def _load_yaml(text: str, source: str, what: str = "") -> Any:
    """``yamlio.parse_yaml`` with the grid's error type; constructor failures PyYAML raises bare
    (``!!int abc``, ``!!timestamp x``, an integer over Python's 4,300-digit limit) become the
    same one line instead of a traceback."""
    try:
        return parse_yaml(text, source, what, error=SweepError)
    except InputError:
        raise
    except RecursionError:
        raise SweepError(source, None, f"invalid YAML: nested too deeply{what}") from None
    except MemoryError:
        raise SweepError(source, None, f"invalid YAML: too large to load{what}") from None
    except (ValueError, TypeError, AttributeError, OverflowError) as exc:
        reason = str(exc).split(";")[0] if isinstance(exc, (ValueError, OverflowError)) else type(exc).__name__
        raise SweepError(
            source, None,
            f"invalid YAML: expected values their tags can take (e.g. !!int 3), got one that fails ({reason}){what}",
        ) from None


def split_top_level(text: str) -> List[str]:
    """Split on commas that are not inside brackets, braces or quotes, so a value may be a
    YAML flow list (`stragglers=[],[{kind: jitter, cv: 0.05}]`) or a quoted string."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _check_key(key: str, where: str) -> str:
    if not _KEY_RE.match(key):
        raise SweepError(where, None, f"expected a scenario key like cluster.nodes or stragglers[0].cv, got {key!r}")
    return key


def _check_value_size(key: str, value: Any, where: str) -> None:
    """Refuse a value too big or too deep to serialise (shared references count once per use,
    which is how serialising expands them). Iterative, so depth itself cannot overflow the stack."""
    stack = [(value, 1)]
    items = 0
    while stack:
        node, depth = stack.pop()
        items += 1
        if items > MAX_VALUE_ITEMS:
            raise SweepError(where, key, f"expected a value of at most {MAX_VALUE_ITEMS:,} items, got more")
        if isinstance(node, (list, tuple, dict)):
            if depth > MAX_VALUE_DEPTH:
                raise SweepError(where, key, f"expected a value nested at most {MAX_VALUE_DEPTH} levels deep, got deeper")
            children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)


def _check_values(key: str, values: Sequence[Any], where: str) -> Tuple[Any, ...]:
    if len(values) == 0:
        raise SweepError(where, key, "expected a non-empty list of values, got an empty list")
    seen = set()
    for v in values:
        _check_value_size(key, v, where)
        canon = canonical(v)
        if canon in seen:
            raise SweepError(where, key, f"expected distinct values, got {value_text(v)!r} twice")
        seen.add(canon)
    return tuple(values)


def parse_grid_option(text: str) -> Grid:
    """Parse one ``--grid KEY=V1,V2,...`` option; each value is parsed as YAML, like ``--set``."""
    where = _shorten(f"--grid {text}")
    if "=" not in text:
        raise SweepError(where, None, f"expected KEY=V1,V2,... or an existing grid YAML file, got {_shorten(text)!r}")
    key, _, rest = text.partition("=")
    key = _check_key(key.strip(), where)
    values = []
    for token in split_top_level(rest) if rest.strip() else []:
        token = token.strip()
        if not token:
            raise SweepError(where, key, "expected a value between commas, got an empty one")
        values.append(_load_yaml(token, where, f" in the value {_shorten(token)!r}"))
    return Grid((key,), (_check_values(key, values, where),))


def _flatten_grid_doc(doc: Mapping[Any, Any], where: str) -> Dict[str, Tuple[Any, ...]]:
    """Nested mappings become dotted keys, in document order; every leaf must be a list.

    Iterative (a stack of mapping iterators), so a deeply nested document cannot overflow
    the Python stack."""
    out: Dict[str, Tuple[Any, ...]] = {}
    stack = [("", iter(doc.items()))]
    while stack:
        prefix, items = stack[-1]
        entry = next(items, None)
        if entry is None:
            stack.pop()
            continue
        raw_key, value = entry
        key = f"{prefix}{raw_key}"
        if isinstance(value, dict):
            if len(stack) >= MAX_VALUE_DEPTH:
                raise SweepError(where, key, f"expected keys nested at most {MAX_VALUE_DEPTH} levels deep, got deeper")
            stack.append((f"{key}.", iter(value.items())))
            continue
        _check_key(key, where)
        if not isinstance(value, list):
            raise SweepError(where, key, f"expected a list of values to sweep, got {value_text(value)!r}")
        out[key] = _check_values(key, value, where)
    return out


def load_grid_file(path: os.PathLike | str) -> Grid:
    """Load a grid YAML file: a mapping from dotted keys (or nested mappings) to value lists.

    ``cluster.nodes: [4, 16, 64]`` and ``cluster: {nodes: [4, 16, 64]}`` mean the same thing;
    a list is always the list of values to sweep, so sweeping a list-valued key takes a list
    of lists (``stragglers: [[], [{kind: jitter, cv: 0.05}]]``).
    """
    where = str(path)
    text = read_text_file(path, "a grid YAML file", error=SweepError)
    doc = _load_yaml(text, where)
    if not isinstance(doc, dict) or not doc:
        got = "an empty document" if not doc else type(doc).__name__
        raise SweepError(where, None, f"expected a mapping of scenario keys to lists of values, got {got}")
    flat = _flatten_grid_doc(doc, where)
    return Grid(tuple(flat), tuple(flat.values()))


def combine_grids(grids: Iterable[Grid]) -> Grid:
    """Join grids (from several ``--grid`` options) into one; a key given twice is an error."""
    keys: List[str] = []
    values: List[Tuple[Any, ...]] = []
    for grid in grids:
        for k, v in zip(grid.keys, grid.values):
            if k in keys:
                raise SweepError("--grid", k, "expected each key once, got it in more than one grid")
            keys.append(k)
            values.append(v)
    if not keys:
        raise SweepError("--grid", None, "expected at least one grid (KEY=V1,V2,... or a grid YAML file)")
    return Grid(tuple(keys), tuple(values))


def parse_grid_args(args: Iterable[str]) -> Grid:
    """Each ``--grid`` argument is a grid YAML file if such a file exists, else ``KEY=V1,V2,...``."""
    grids = []
    for arg in args:
        # os.path.isfile, not Path.is_file: an argument too long to be a file name (a
        # 4,301-digit value) is then simply not a file instead of an OSError.
        if os.path.isfile(arg):
            grids.append(load_grid_file(arg))
        elif "=" in arg:
            grids.append(parse_grid_option(arg))
        else:
            raise SweepError(_shorten(f"--grid {arg}"), None,
                             "expected KEY=V1,V2,... or an existing grid YAML file, got neither")
    return combine_grids(grids)
