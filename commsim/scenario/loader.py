"""Load a scenario YAML file into a validated, frozen :class:`commsim.scenario.spec.Scenario`.

Reading the file and applying ``--set`` overrides happen here; which keys exist and how each is
checked is :mod:`commsim.scenario.schema` (``parse_scenario`` is re-exported). Every problem raises
:class:`commsim.errors.ScenarioError` with one line naming the file, the key path in YAML
notation (``stragglers[1].ranks[0]``), what was expected and what was given. The format is
documented key by key in docs/scenario-format.md.

Public API::

    load_document(path) -> dict                  # the raw YAML mapping
    apply_overrides(doc, ["a.b.c=VALUE", ...])   # --set, VALUE parsed as YAML; returns a new dict
    parse_scenario(doc, source) -> Scenario      # validate a mapping; source names it in errors
    load_scenario(path, overrides=(), steps=None, seed=None, calibration=None, force=False) -> Scenario
    load_scenario_document(path, ...) -> (Scenario, dict)   # the same, with the mapping it was read from
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union


from commsim.scenario import budget, spec
from commsim.errors import ScenarioError
from commsim.scenario.schema import (  # noqa: F401 - re-exported: the loader is the public entry point
    ALGORITHMS,
    DEFAULT_INTER_NODE_LATENCY,
    DEFAULT_INTRA_NODE_LATENCY,
    GRAD_DTYPES,
    JITTER_DISTRIBUTIONS,
    MAX_WORLD_SIZE,
    STRAGGLER_KINDS,
    parse_scenario,
)
from commsim.scenario.schema_fields import CrossKeyError
from commsim.units import describe
from commsim.yamlio import parse_yaml, read_text_file

__all__ = [
    "load_document",
    "apply_overrides",
    "parse_scenario",
    "load_scenario",
    "load_scenario_document",
    "named_source",
    "ALGORITHMS",
    "GRAD_DTYPES",
    "JITTER_DISTRIBUTIONS",
    "STRAGGLER_KINDS",
    "DEFAULT_INTRA_NODE_LATENCY",
    "DEFAULT_INTER_NODE_LATENCY",
    "MAX_WORLD_SIZE",
]


# --------------------------------------------------------------------------------------------
# Reading the file


def load_document(path: Union[str, Path]) -> Dict[Any, Any]:
    """Read a scenario file and return its top-level YAML mapping, unvalidated.

    Raises ScenarioError for a missing or unreadable file, invalid YAML (with the line number),
    an empty document or one that is not a mapping.
    """
    source = str(path)
    text = read_text_file(path, "a scenario YAML file", ScenarioError)
    doc = parse_yaml(text, source, "", ScenarioError)
    if doc is None:
        raise ScenarioError(
            source, None, "empty document, expected a mapping with at least cluster, model and compute"
        )
    if not isinstance(doc, dict):
        raise ScenarioError(
            source, None, f"expected a mapping at the top level (cluster, model, compute, ...), got {describe(doc)}"
        )
    return doc


# --------------------------------------------------------------------------------------------
# --set overrides

# Indexes are ASCII digits ([0-9], not \d: int() reads full-width digits too) of a sane length
# (Python cannot even print an integer of more than 4300 digits).
_MAX_INDEX_DIGITS = 18
_KEY_PATH = re.compile(r"^[^.\[\]=\s]+(?:\[[0-9]+\])*(?:\.[^.\[\]=\s]+(?:\[[0-9]+\])*)*$")
_TOKEN = re.compile(r"([^.\[\]]+)|\[([0-9]+)\]")


def _key_tokens(key: str) -> List[Union[str, int]]:
    return [name if name else int(index) for name, index in _TOKEN.findall(key)]


def _format_path(tokens: Sequence[Union[str, int]]) -> str:
    out = ""
    for tok in tokens:
        if isinstance(tok, int):
            out += f"[{tok}]"
        else:
            out += f".{tok}" if out else str(tok)
    return out


def _split_override(override: object) -> Tuple[str, str, List[Union[str, int]]]:
    source = f"--set {override!r}"
    if not isinstance(override, str):
        raise ScenarioError("--set", None, f"expected KEY=VALUE text, got {describe(override)}")
    if "=" not in override:
        raise ScenarioError(
            source, None, "expected KEY=VALUE (e.g. ddp.overlap=false), got no '='"
        )
    key, value = override.split("=", 1)
    key = key.strip()
    if not key:
        raise ScenarioError(source, None, "expected KEY=VALUE (e.g. ddp.overlap=false), got an empty key")
    if not _KEY_PATH.match(key):
        raise ScenarioError(
            source, None, f"expected a key path like ddp.bucket_cap or stragglers[0].factor, got {key!r}"
        )
    longest = max((len(index) for _, index in _TOKEN.findall(key)), default=0)
    if longest > _MAX_INDEX_DIGITS:
        raise ScenarioError(
            source, None, f"expected a list index of at most {_MAX_INDEX_DIGITS} digits, got one of {longest} digits"
        )
    return key, value, _key_tokens(key)


# YAML's spellings of null (the core schema's): an override written so removes its key
_NULL_WORDS = ("null", "Null", "NULL", "~")


def apply_overrides(doc: Dict[Any, Any], overrides: Iterable[str]) -> Dict[Any, Any]:
    """Return a copy of ``doc`` with each ``"a.b.c=VALUE"`` applied in order.

    VALUE is parsed as YAML (``stragglers=[]``, ``'ddp.bucket_cap=4 GB'``, ``ddp.overlap=false``);
    ``KEY=null`` removes the key (``ddp.first_bucket=null``: its default, or a layout given by
    ``ddp.bucket_sizes`` instead); list items are addressed as ``stragglers[0].factor``. Missing intermediate mappings are
    created; the result is validated later exactly like the file. Raises ScenarioError for bad
    syntax, invalid YAML in VALUE, or a path through something that is not a mapping or list.
    """
    result = copy.deepcopy(doc)
    for override in overrides:
        _, text, tokens = _split_override(override)
        source = f"--set {override!r}"
        value = parse_yaml(text, source, f" in the value {text.strip()!r}", ScenarioError)
        node: Any = result
        for depth, tok in enumerate(tokens):
            here = _format_path(tokens[: depth + 1])
            last = depth == len(tokens) - 1
            if isinstance(tok, str):
                if not isinstance(node, dict):
                    parent = _format_path(tokens[:depth])
                    raise ScenarioError(source, here, f"expected {parent} to be a mapping, got {describe(node)}")
                if last and value is None and text.strip() in _NULL_WORDS:
                    # KEY=null takes the key out (back to its default): no key accepts null, and
                    # ddp.bucket_sizes over a file's first_bucket/bucket_cap needs them gone. An
                    # empty value (KEY=) stays a null, so a forgotten value is an error, not a default
                    node.pop(tok, None)
                elif last:
                    node[tok] = value
                elif node.get(tok) is None:  # missing (or an empty `ddp:`): create the mapping,
                    # or the list an index goes into (then an empty one: "the list is empty", not
                    # "expected a list, got {}" for a list the file leaves out)
                    node[tok] = [] if isinstance(tokens[depth + 1], int) else {}
            else:
                parent = _format_path(tokens[:depth])
                if not isinstance(node, list):
                    raise ScenarioError(source, here, f"expected {parent} to be a list, got {describe(node)}")
                if tok >= len(node):
                    valid = f"an index in 0..{len(node) - 1}" if node else "no index (the list is empty)"
                    raise ScenarioError(
                        source, here, f"expected {valid} ({parent} has {len(node)} item(s)), got {tok}"
                    )
                if last:
                    node[tok] = value
            if not last:
                node = node[tok]
    return result


def load_scenario(
    path: Union[str, Path],
    overrides: Iterable[str] = (),
    steps: Optional[int] = None,
    seed: Optional[int] = None,
    calibration: Optional[Union[str, Path]] = None,
    force: bool = False,
    grid_overrides: Iterable[str] = (),
) -> spec.Scenario:
    """Load, override (``--set``, then ``--steps``/``--seed``/``--calibration``) and validate a scenario file.

    `grid_overrides` (a sweep's grid point, ``k=v`` as ``--set`` takes them) apply after
    `overrides` and are named ``--grid`` in an error.

    A ``calibration`` path given here is relative to the current directory (one in the file
    is relative to the file).

    A scenario whose estimated memory or run time exceeds the limits of
    :mod:`commsim.scenario.budget` is refused (:class:`commsim.scenario.budget.BudgetError`, at
    the key to change) unless ``force`` (the CLI's ``--force``).

    A bad value that came from the command line is reported against the file with the flag
    named, e.g. ``run.yaml (after --set 'ddp.bucket_cap=0'): ddp.bucket_cap: ...``.
    """
    return load_scenario_document(path, overrides, steps, seed, calibration, force,
                                  grid_overrides=grid_overrides)[0]


def load_scenario_document(
    path: Union[str, Path],
    overrides: Iterable[str] = (),
    steps: Optional[int] = None,
    seed: Optional[int] = None,
    calibration: Optional[Union[str, Path]] = None,
    force: bool = False,
    trace_ranks: int = 0,
    grid_overrides: Iterable[str] = (),
) -> Tuple[spec.Scenario, Dict[Any, Any]]:
    """:func:`load_scenario`, and the mapping the scenario was validated from (the file after
    the overrides and flags), so that a caller reading a key the scenario leaves out (the
    ``mitigation:`` section) needs no second read and parse of the file. `trace_ranks` > 0:
    the budget counts ``run --trace``'s run and spans on that many ranks too."""
    source = str(path)
    overrides, grid_overrides = list(overrides), list(grid_overrides)
    doc = apply_overrides(load_document(path), overrides + grid_overrides)
    origins = _flag_origins(overrides, grid_overrides)
    if steps is not None:
        doc["steps"] = steps
        origins["steps"] = f"--steps {steps!r}"
    if seed is not None:
        doc["seed"] = seed
        origins["seed"] = f"--seed {seed!r}"
    if calibration is not None:
        doc["calibration"] = str(Path(calibration).resolve())
        origins["calibration"] = f"--calibration {str(calibration)!r}"
    try:
        scenario = parse_scenario(doc, source)
        if not force:
            budget.check(scenario, source, trace_ranks=trace_ranks)
        return scenario, doc
    except ScenarioError as err:
        related = getattr(err, "related", ())  # a check across keys: any of them may be the flag's
        flag = next((f for f in (_origin(p, origins) for p in (err.path, *related)) if f is not None), None)
        if flag is None:
            raise
        if isinstance(err, CrossKeyError):
            raise CrossKeyError(f"{source} (after {flag})", err.path, err.message, related) from None
        kind = budget.BudgetError if isinstance(err, budget.BudgetError) else ScenarioError
        raise kind(f"{source} (after {flag})", err.path, err.message) from None


def named_source(source: str, path: Optional[str], overrides: Iterable[str]) -> str:
    """How a bad value at key ``path`` is attributed: ``source``, or ``source (after --set 'k=v')``
    when one of ``overrides`` set that key (or a mapping above it, or a key inside it), as
    :func:`load_scenario` names its own errors; for a caller that refuses a loaded scenario."""
    flag = _origin(path, _flag_origins(overrides))
    return source if flag is None else f"{source} (after {flag})"


def _flag_origins(overrides: Iterable[str], grid_overrides: Iterable[str] = ()) -> Dict[str, str]:
    """Which flag set which key path (``--set 'k=v'``, then a sweep's ``--grid 'k=v'``), the last
    one winning, to name it in a validation error."""
    origins: Dict[str, str] = {}
    for flag, given in (("--set", overrides), ("--grid", grid_overrides)):
        for override in given:
            _, _, tokens = _split_override(override)
            origins[_format_path(tokens)] = f"{flag} {override!r}"
    return origins


def _origin(path: Optional[str], origins: Dict[str, str]) -> Optional[str]:
    """The flag that set the key at ``path``, a mapping or list above it, or a key inside it."""
    if not path:
        return None
    best = None
    for key, flag in origins.items():
        # The error is at the overridden key, inside it, or at a mapping that contains it
        # (stragglers[0] has both `every` and `probability` after a --set).
        if any(a == b or a.startswith(b + ".") or a.startswith(b + "[") for a, b in ((path, key), (key, path))):
            if best is None or len(key) > len(best[0]):
                best = (key, flag)
    if best is None:  # a preset fills its mapping's other keys: one set or removed by a flag is theirs too
        for key, flag in origins.items():
            parent, _, leaf = key.rpartition(".")
            if leaf == "preset" and parent and path.startswith(parent + "."):
                best = (key, flag)
    return best[1] if best else None
