"""The one YAML reader for every input file: scenarios, --set values, sweep grids, calibrations.

Safe loading only (yaml.SafeLoader), duplicate keys refused, and each problem reported as one
:class:`commsim.errors.InputError` line naming the source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Type, Union

import yaml

from commsim.errors import InputError


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> Dict[Any, Any]:
    loader.flatten_mapping(node)
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # unhashable: construct_mapping below reports it with a line number
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, source: str, what: str = "", error: Type[InputError] = InputError) -> Any:
    """Parse YAML text with the strict safe loader; a problem is one ``error(source, None, ...)``
    line (with the line and column where YAML gives them). ``what`` is appended to the message
    (e.g. " in the value '...'" for a --set override)."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = err.problem or err.context or "syntax error"
        raise error(source, None, f"invalid YAML{where}: {problem}{what}") from None
    except yaml.YAMLError as err:
        raise error(source, None, f"invalid YAML: {err}{what}") from None
    except RecursionError:
        raise error(source, None, f"invalid YAML: nested too deeply{what}") from None


def read_text_file(path: Union[str, Path], expected: str, error: Type[InputError] = InputError) -> str:
    """The UTF-8 text of the file at ``path`` (a BOM is dropped); ``expected`` names what the
    file should be in the messages ("a scenario YAML file")."""
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise error(source, None, f"file not found, expected {expected}") from None
    except IsADirectoryError:
        raise error(source, None, f"is a directory, expected {expected}") from None
    except PermissionError:
        raise error(source, None, "cannot read the file: permission denied") from None
    except OSError as err:
        raise error(source, None, f"cannot read the file: {err.strerror or err}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise error(
            source, None, f"cannot read the file: expected UTF-8 text, got byte 0x{raw[err.start]:02x} at offset {err.start}"
        ) from None
