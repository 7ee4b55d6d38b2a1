"""The one YAML reader for every input file: scenarios, --set values, sweep grids, calibrations.

Every problem is one :class:`commsim.errors.InputError` line naming the source (with the line
and column where YAML gives them); nothing else escapes, whatever the bytes. The limits, each
far beyond any real input (a scenario is a few KB and 4 levels deep):

* regular files only: a FIFO, a device (``/dev/zero``), a socket or a directory is refused
  before it is opened, so nothing can block on a pipe without a writer or read forever;
* at most :data:`MAX_INPUT_BYTES` (1 MiB) of text: the pure-Python parser reads about
  0.25-1 MiB/s, so the cap bounds the worst case to seconds;
* UTF-8 text only (a BOM is dropped); UTF-16/UTF-32 and binary files are named as such;
* at most :data:`MAX_DEPTH` (50) levels of nesting, checked while composing, so that a
  50,000-deep ``[[[[...`` is refused at level 51 instead of exhausting the stack;
* aliases may add at most :data:`MAX_ALIAS_NODES` (100,000) nodes to the document once expanded
  (a 544-byte "billion laughs" alias bomb is refused after a few hundred), and an alias
  inside its own anchor (a recursive structure) is refused;
* duplicate keys in a mapping are refused (PyYAML silently keeps the last one); keys brought
  in by a merge key (``<<: *defaults``) may be overridden, as YAML's merge type specifies;
* safe tags only (yaml.SafeLoader): ``!!python/...`` is refused; an explicit tag with bad
  content (``!!int abc``, ``!!float x``, ``!!timestamp 2020-13-45``, ``!!bool maybe``) and an
  invalid date (``2020-13-45`` reads as a timestamp) are one-line errors;
* integers of at most :data:`MAX_INT_DIGITS` (4,300) digits, Python's own limit for converting
  text to int (which otherwise raises deep inside the parser); ``!!int``/``!!float`` content
  must be ASCII (Python's ``int("２")`` is 2, YAML's digits are 0-9).
"""

from __future__ import annotations

import codecs
import os
import stat
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Type, Union

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from commsim.errors import InputError

__all__ = [
    "MAX_INPUT_BYTES",
    "MAX_DEPTH",
    "MAX_ALIAS_NODES",
    "MAX_INT_DIGITS",
    "parse_yaml",
    "read_text_file",
    "read_regular_bytes",
    "load_yaml_file",
    "file_kind",
]

MAX_INPUT_BYTES = 1024 * 1024  # bytes of a file (characters of a text) handed to the parser
MAX_DEPTH = 50  # nested mappings/lists; each level costs ~10 Python frames in PyYAML and callers
MAX_ALIAS_NODES = 100_000  # nodes that aliases add to the document once expanded
MAX_INT_DIGITS = 4300  # sys.int_info.default_max_str_digits: Python's own int-from-text limit
_MAX_INT = 10**MAX_INT_DIGITS

_TAG_PREFIX = "tag:yaml.org,2002:"
_MERGE_TAG = _TAG_PREFIX + "merge"


def _short(text: object, limit: int = 40) -> str:
    """A value as it reads in a message: repr, cut to about `limit` characters."""
    shown = repr(text[:limit] if isinstance(text, str) else text)
    return shown if not isinstance(text, str) or len(text) <= limit else f"{shown[:-1]}...' ({len(text)} characters)"


def _tag_name(tag: str) -> str:
    return "!!" + tag[len(_TAG_PREFIX):] if tag.startswith(_TAG_PREFIX) else tag


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with the limits of the module docstring, enforced while composing and
    constructing (nothing is expanded, recursed into or converted before it is checked)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        # id(node) -> nodes it stands for once every alias in it is expanded; a node is in
        # here once it is complete, so an alias to an incomplete anchor is a recursive one.
        self._expanded: Dict[int, int] = {}
        self._alias_nodes = 0

    def compose_node(self, parent: Any, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self._expanded:
                raise ComposerError(
                    None, None,
                    f"the alias *{event.anchor} is inside its own anchor &{event.anchor} (a recursive structure)",
                    event.start_mark,
                )
            node = super().compose_node(parent, index)  # PyYAML reports an undefined alias
            # Each occurrence of an alias expands to a full copy of its anchor's node.
            self._alias_nodes += self._expanded[id(node)]
            if self._alias_nodes > MAX_ALIAS_NODES:
                raise ComposerError(
                    None, None,
                    f"aliases expand to more than {MAX_ALIAS_NODES:,} nodes (an alias bomb?)",
                    event.start_mark,
                )
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        size = 1
        if isinstance(node, yaml.SequenceNode):
            size += sum(self._expanded[id(child)] for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            size += sum(self._expanded[id(k)] + self._expanded[id(v)] for k, v in node.value)
        self._expanded[id(node)] = size
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # PyYAML's scalar constructors call int(), float(), datetime.date() and dict lookups on
        # the text as given: bad content escapes as a bare ValueError/KeyError/... with no mark.
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as err:
            tag = _tag_name(node.tag)
            # int(), float() and the bool table say nothing the message does not; a date does
            detail = f" ({err})" if tag == "!!timestamp" and isinstance(err, ValueError) else ""
            given = _short(node.value) if isinstance(node, yaml.ScalarNode) else f"a {node.id}"
            raise ConstructorError(None, None, f"expected a valid {tag} value, got {given}{detail}", node.start_mark) from None


_KEY_KINDS = {int: "an integer", float: "a number", bool: "true/false", type(None): "null", bytes: "binary data"}


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> Dict[Any, Any]:
    """A mapping whose explicit keys are unique; merged keys (``<<``) yield to explicit ones."""
    seen: set = set()
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            # every key of every commsim format is a name; YAML 1.1 reads `1:`, `~:`, `on:` as
            # an int, None or True, which no key path can name and which cannot be sorted
            # against text keys (the sweep's canonical JSON sorts them)
            if isinstance(key_node, yaml.ScalarNode):
                reads_as = _KEY_KINDS.get(type(key), type(key).__name__)
                problem = f"got {_short(key_node.value)}, which YAML reads as {reads_as}; quote it"
            else:
                problem = f"got a {key_node.id}"
            raise ConstructorError(None, None, f"a key must be text, {problem}", key_node.start_mark)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # unhashable: construct_mapping below reports it with a line number
            continue
        if duplicate:
            raise ConstructorError(None, None, f"duplicate key {_short(key)}", key_node.start_mark)
    loader.flatten_mapping(node)  # merged pairs first: the explicit ones, later, win
    return loader.construct_mapping(node, deep=True)


def _check_number_text(node: yaml.ScalarNode, text: str, tag: str) -> None:
    if not text.isascii():  # Python's int()/float() read any Unicode digit; YAML's are 0-9
        raise ConstructorError(
            None, None, f"expected a valid {tag} value (ASCII digits 0-9), got {_short(text)}", node.start_mark
        )
    digits = sum(ch.isalnum() for ch in text)
    if tag == "!!int" and digits > MAX_INT_DIGITS:
        raise ConstructorError(
            None, None, f"expected an integer of at most {MAX_INT_DIGITS} digits, got one of {digits} digits",
            node.start_mark,
        )


def _construct_int(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    _check_number_text(node, text, "!!int")
    value = yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)
    if abs(value) >= _MAX_INT:  # hexadecimal, binary or sexagesimal text can get there too
        raise ConstructorError(
            None, None, f"expected an integer of at most {MAX_INT_DIGITS} digits, got {_short(text)}", node.start_mark
        )
    return value


def _construct_float(loader: _StrictLoader, node: yaml.ScalarNode) -> float:
    _check_number_text(node, loader.construct_scalar(node), "!!float")
    return yaml.constructor.SafeConstructor.construct_yaml_float(loader, node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_StrictLoader.add_constructor(_TAG_PREFIX + "int", _construct_int)
_StrictLoader.add_constructor(_TAG_PREFIX + "float", _construct_float)


def _position(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f" at line {line}, column {column}"


def parse_yaml(text: str, source: str, what: str = "", error: Type[InputError] = InputError) -> Any:
    """Parse YAML text with the strict safe loader; a problem is one ``error(source, None, ...)``
    line (with the line and column where YAML gives them). ``what`` is appended to the message
    (e.g. " in the value '...'" for a --set override)."""
    if len(text) > MAX_INPUT_BYTES:
        raise error(source, None, f"expected at most {MAX_INPUT_BYTES:,} characters of YAML, got {len(text):,}{what}")
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = err.problem or err.context or "syntax error"
        raise error(source, None, f"invalid YAML{where}: {problem}{what}") from None
    except yaml.reader.ReaderError as err:  # a control character the YAML reader refuses
        raise error(
            source, None,
            f"invalid YAML{_position(text, err.position)}: unacceptable character U+{err.character:04X} "
            f"({err.reason}){what}",
        ) from None
    except yaml.YAMLError as err:
        raise error(source, None, f"invalid YAML: {err}{what}") from None
    except RecursionError:  # the depth limit keeps well below it; a last line of defence
        raise error(source, None, f"invalid YAML: nested too deeply{what}") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as err:
        # construction outside construct_object (PyYAML's deferred generators): no mark
        raise error(source, None, f"invalid YAML: {type(err).__name__}: {err}{what}") from None


_NOT_REGULAR = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """What a file that is neither a regular file nor a directory is, for a message ("a named
    pipe (FIFO)", "a character device", ...), from its st_mode."""
    return next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")


def _kind_refusal(mode: int, expected: str) -> Optional[str]:
    """Why a file of this st_mode is not read as `expected`; None for a regular file."""
    if stat.S_ISDIR(mode):
        return f"is a directory, expected {expected}"
    if not stat.S_ISREG(mode):
        return f"is {file_kind(mode)}, expected {expected} (a regular file)"
    return None


def read_regular_bytes(path: Union[str, Path], limit: int, expected: str,
                       refuse: Callable[[str], Exception], too_big: Callable[[int], Exception]) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them: the one bounded reader
    of the input files (scenarios, calibrations, sweep results, nccl-tests logs).

    A directory, device, FIFO or socket is refused by its kind before it is opened (reading
    /dev/zero never ends, opening a FIFO blocks until a writer comes, some devices act on open)
    and again on what was opened (the path may have been replaced since the stat); a file over
    `limit` bytes by its size and by what was read (st_size can lie: a growing file, /proc).
    The caller words the refusals: ``refuse(message)`` ("is a directory, expected `expected`")
    and ``too_big(size)`` return the exception raised. OSError, and the ValueError of a path
    with a NUL character, pass through for the caller to word too."""
    info = os.stat(path)
    why = _kind_refusal(info.st_mode, expected)
    if why:
        raise refuse(why)
    if info.st_size > limit:
        raise too_big(info.st_size)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    with os.fdopen(os.open(path, flags), "rb") as handle:
        why = _kind_refusal(os.fstat(handle.fileno()).st_mode, expected)
        if why:
            raise refuse(why)
        raw = handle.read(limit + 1)
    if len(raw) > limit:
        raise too_big(len(raw))
    return raw


def _too_big(size: int) -> str:
    return f"is {size:,} bytes, more than the {MAX_INPUT_BYTES:,}-byte limit for an input file"


# Byte-order marks of the encodings people save YAML in by accident, longest first.
_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def _decode(raw: bytes, source: str, error: Type[InputError]) -> str:
    for bom, name in _BOMS:
        if raw.startswith(bom):
            raise error(source, None, f"cannot read the file: expected UTF-8 text, got {name} text (save it as UTF-8)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise error(
            source, None, f"cannot read the file: expected UTF-8 text, got byte 0x{raw[err.start]:02x} at offset {err.start}"
        ) from None
    nul = raw.find(b"\x00")
    if nul >= 0:  # valid UTF-8, but no text file has one: UTF-16 without a BOM, or binary
        raise error(
            source, None,
            f"cannot read the file: expected UTF-8 text, got a NUL byte at offset {nul} (UTF-16 text or a binary file?)",
        )
    return text


def read_text_file(path: Union[str, Path], expected: str, error: Type[InputError] = InputError) -> str:
    """The UTF-8 text of the regular file at ``path`` (a BOM is dropped), at most
    :data:`MAX_INPUT_BYTES`; ``expected`` names what the file should be in the messages
    ("a scenario YAML file")."""
    source = str(path)

    def refuse(message: str) -> InputError:
        return error(source, None, message)

    try:
        try:
            raw = read_regular_bytes(path, MAX_INPUT_BYTES, expected, refuse, lambda size: refuse(_too_big(size)))
        except ValueError:  # os.stat and os.open refuse a path with a NUL character
            raise error(source, None, "cannot read the file: the path contains a NUL character") from None
    except FileNotFoundError:
        raise error(source, None, f"file not found, expected {expected}") from None
    except IsADirectoryError:
        raise error(source, None, f"is a directory, expected {expected}") from None
    except PermissionError:
        raise error(source, None, "cannot read the file: permission denied") from None
    except OSError as err:
        raise error(source, None, f"cannot read the file: {err.strerror or err}") from None
    return _decode(raw, source, error)


def load_yaml_file(path: Union[str, Path], expected: str, error: Type[InputError] = InputError) -> Any:
    """:func:`read_text_file` then :func:`parse_yaml`: the document of a YAML input file
    (``None`` for an empty one; the caller checks its shape)."""
    return parse_yaml(read_text_file(path, expected, error), str(path), "", error)
