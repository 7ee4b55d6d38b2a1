"""Parse human quantities ("25 MB", "100 Gbps", "5 us", "1e9") into base units.

Inside commsim every quantity is in base units: bytes, bytes per second, seconds, plain
integers. Users write either a plain number (already in the base unit) or a string with a unit.

Prefixes (the IEC 80000-13 convention; see docs/scenario-format.md):

* SI, powers of 1000: k/K, M, G, T, P. ``25 MB`` = 25,000,000 bytes. Link speeds are always SI
  (a "100 Gb/s" NIC moves 100e9 bits per second).
* Binary, powers of 1024: Ki, Mi, Gi, Ti, Pi. ``25 MiB`` = 26,214,400 bytes, which is what
  PyTorch's ``bucket_cap_mb=25`` really means.
* Lower-case ``b`` is a bit, upper-case ``B`` a byte: ``Gbps`` = ``Gb/s`` = ``Gbit/s`` (bits),
  ``GBps`` = ``GB/s`` (bytes). Unit names are case-sensitive for exactly that reason.

Strings are parsed with :mod:`decimal`, so ``"0.1 GB"`` is exactly 1e8 and ``"1e9"`` exactly
10**9. Every parser raises a :class:`UnitError` (a ``ValueError``) whose text says what was
expected and what was given; the loader adds the file and key path.
"""

from __future__ import annotations

import datetime
import math
import re
import reprlib
from decimal import Decimal, DecimalException, localcontext
from typing import Dict, Optional, Tuple, Union

__all__ = [
    "UnitError",
    "UnknownUnitError",
    "WrongUnitKindError",
    "SignError",
    "NotFiniteError",
    "parse_size",
    "parse_rate",
    "parse_time",
    "parse_count",
    "parse_number",
    "describe",
    "counted",
    "SIZE_UNITS",
    "RATE_UNITS",
    "TIME_UNITS",
    "MAX_TIME",
    "MIN_RATE",
    "MIN_FRACTION",
]

Number = Union[int, float]

# Plausibility limits of single fields, shared by the scenario and the calibration readers. Far
# beyond any real job, they turn a typo (1e-300 bytes/s, a year-long forward pass) into an input
# error instead of an engine that overflows.
MAX_TIME = 1e6  # seconds (11.6 days), for every duration
MIN_RATE = 1.0  # bytes/s
MIN_FRACTION = 1e-6  # a fraction of a clock or a bandwidth: a million times slower is dead


class UnitError(ValueError):
    """A value that is not a valid quantity of the expected kind."""


class UnknownUnitError(UnitError):
    """A string whose unit is not known at all ("25 XB")."""


class WrongUnitKindError(UnitError):
    """A string whose unit is of another kind ("5 us" where a size belongs)."""


class SignError(UnitError):
    """A negative quantity, or zero where only a positive one will do; ``reason`` is
    "negative" or "zero" (for a caller that words its own message)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class NotFiniteError(UnitError):
    """NaN, an infinity, or a number too large to hold; ``reason`` says which."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def _prefixed(base: str, scale: Decimal, *, si: bool = True, binary: bool = True,
              suffixes: Tuple[str, ...] = ("",)) -> Dict[str, Decimal]:
    """Unit table for one base symbol: ``B`` -> B, kB, KB, MB, ..., KiB, MiB, ..."""
    table: Dict[str, Decimal] = {}
    si_prefixes = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
    bin_prefixes = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
    prefixes = dict(si_prefixes if si else {"": 1})
    if binary:
        prefixes.update(bin_prefixes)
    for prefix, factor in prefixes.items():
        for suffix in suffixes:
            table[prefix + base + suffix] = scale * factor
    return table


# Bytes.
SIZE_UNITS: Dict[str, Decimal] = {
    **_prefixed("B", Decimal(1)),
    "byte": Decimal(1),
    "bytes": Decimal(1),
}

# Bytes per second. Bit rates are SI only (nobody sells a "Gib/s" link); byte rates take both.
_BIT = Decimal(1) / Decimal(8)
RATE_UNITS: Dict[str, Decimal] = {
    **_prefixed("bps", _BIT, binary=False),
    **_prefixed("b/s", _BIT, binary=False),
    **_prefixed("bit/s", _BIT, binary=False),
    **_prefixed("B/s", Decimal(1)),
    **_prefixed("Bps", Decimal(1)),
}

# Seconds. "µs" comes in two code points: U+00B5 MICRO SIGN and U+03BC GREEK SMALL LETTER MU.
TIME_UNITS: Dict[str, Decimal] = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "\u00b5s": Decimal("1e-6"),
    "\u03bcs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "min": Decimal(60),
    "h": Decimal(3600),
}

_KINDS = {
    "size": (SIZE_UNITS, "a size like '25 MB' or '25 MiB' (a plain number is bytes)"),
    "rate": (RATE_UNITS, "a rate like '100 Gbps' or '12.5 GB/s' (a plain number is bytes/s)"),
    "time": (TIME_UNITS, "a time like '5 us' or '0.5 s' (a plain number is seconds)"),
    "count": ({}, "a whole number like 1000 or '1e9'"),
    "number": ({}, "a plain number like 0.5"),
}

# A decimal number (underscores between digits allowed, as in Python and YAML), then an optional
# unit that starts with something that cannot continue the number.
# Digits are ASCII 0-9 only: Python's \d (and Decimal) also read full-width and other Unicode
# digits, so "２" would be 2.
_QUANTITY = re.compile(
    r"""^\s*
    (?P<number>[+-]?(?:[0-9](?:_?[0-9])*(?:\.(?:[0-9](?:_?[0-9])*)?)?|\.[0-9](?:_?[0-9])*)(?:[eE][+-]?[0-9]+)?)
    \s*(?P<unit>[^\s0-9.+\-_].*?)?\s*$""",
    re.VERBOSE,
)

# What is not a number, diagnosed so that the message says why: NaN or an infinity (Python's
# float() and Decimal read them, the quantity syntax does not), no number at all, a sign alone.
_NON_FINITE = re.compile(r"^\s*(?P<sign>[+-]?)\s*(?P<word>nan|inf(?:inity)?)\s*(?P<unit>.*?)\s*$", re.IGNORECASE)
_NO_NUMBER = re.compile(r"^\s*(?P<sign>[+-]?)\s*(?P<unit>[^\s0-9.+\-_].*?)?\s*$")

# Python refuses to print (or parse) integers of more digits than this (sys.int_info).
_MAX_INT_DIGITS = 4300

# Counts above this are surely a typo, and numpy cannot hold them.
MAX_COUNT = 2**63 - 1


def describe(value: object) -> str:
    """How a given value reads in an error message: ``'25 XB'``, ``true (a boolean)``, ``null``..."""
    short = reprlib.Repr()
    short.maxstring = 60
    short.maxother = 60
    short.maxlist = short.maxdict = short.maxtuple = short.maxset = 4
    short.maxlevel = 2
    if value is None:
        return "null"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * _MAX_INT_DIGITS:
        # repr() of such an integer raises ValueError (Python's int-to-text digit limit)
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1:,} digits"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, dict):
        return f"{short.repr(value)} (a mapping)"
    if isinstance(value, (list, tuple)):
        return f"{short.repr(list(value))} (a list)"
    if isinstance(value, (str, int, float)):
        return short.repr(value)
    if isinstance(value, (datetime.date, datetime.datetime)):  # YAML reads 2020-01-01 as a date
        return f"{value.isoformat()} (a date; quote it for text)"
    if isinstance(value, (bytes, bytearray)):  # YAML's !!binary
        return f"{len(value):,} bytes of binary data"
    return f"{short.repr(value)} (a {type(value).__name__})"


def counted(n: int, noun: str, spec: str = "") -> str:
    """``n`` and ``noun`` as a summary reads them: "1 point", "0 points", "1,024 GPUs" (``spec``
    formats the number, "," for thousands); the plural adds an s, which every noun the summaries
    count takes."""
    return f"{n:{spec}} {noun if n == 1 else noun + 's'}"


def _digit_hint(value: object) -> str:
    """' (digits must be ASCII 0-9)' for text with a full-width or other non-ASCII digit."""
    if isinstance(value, str) and any(ch.isdigit() and not ch.isascii() for ch in value):
        return " (digits must be ASCII 0-9)"
    return ""


def _unit_kind(unit: str) -> Optional[str]:
    for kind in ("size", "rate", "time"):
        if unit in _KINDS[kind][0]:
            return kind
    return None


def _sign_text(allow_zero: bool) -> str:
    return "non-negative" if allow_zero else "positive"


def _to_decimal(value: object, kind: str) -> Tuple[Decimal, Optional[str]]:
    """Split a value into (number, unit or None); reject what is not a number at all."""
    expected = _KINDS[kind][1]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UnitError(f"expected {expected}, got {describe(value)}")
    if isinstance(value, str):
        match = _QUANTITY.match(value)
        if match is None:
            _not_a_number(value, kind, expected)
        text = match.group("number").replace("_", "")
        try:
            number = Decimal(text)
        except DecimalException:  # an exponent beyond what Decimal can hold at all (1e99999999999999999999)
            if "e-" in text.lower():
                number = Decimal(0)  # what it rounds to anyway
            else:
                bound = "a whole number up to 2**63-1" if kind == "count" else f"a finite {kind}"
                raise NotFiniteError(f"expected {bound}, got {describe(value)} (too large)", "too large") from None
        return number, match.group("unit")
    if isinstance(value, float) and not math.isfinite(value):
        raise NotFiniteError(f"expected a finite {kind}, got {value!r}", "NaN" if math.isnan(value) else "infinite")
    if isinstance(value, int) and value.bit_length() > 3 * _MAX_INT_DIGITS:  # > 10**3900 or so
        raise NotFiniteError(f"expected a finite {kind}, got {describe(value)} (too large)", "too large")
    return Decimal(value), None  # exact for int and float


def _not_a_number(value: str, kind: str, expected: str):
    """Raise the UnitError of a string the quantity syntax does not read, saying why where it
    can: NaN or an infinity (whatever the unit), nothing at all, a unit or a sign without a
    number. "-5Mbit" read "unknown unit" before: the sign is said first where it is wrong."""
    units = _KINDS[kind][0]
    non_finite = _NON_FINITE.match(value)
    if non_finite and (not non_finite.group("unit") or _unit_kind(non_finite.group("unit"))):
        nan = non_finite.group("word").lower() == "nan"
        why = "NaN: not a number" if nan else "infinite"
        raise NotFiniteError(f"expected a finite {kind}, got {describe(value)} ({why})", "NaN" if nan else "infinite")
    if not value.strip():
        raise UnitError(f"expected {expected}, got {describe(value)} (empty)")
    no_number = None if _digit_hint(value) else _NO_NUMBER.match(value)
    if no_number:
        unit = no_number.group("unit")
        if unit is None:
            why = f"a sign {no_number.group('sign')!r} without a number"
        elif unit in units or _unit_kind(unit):
            why = f"no number before the unit {unit!r}"
        else:
            why = "no number"
        raise UnitError(f"expected {expected}, got {describe(value)} ({why})")
    raise UnitError(f"expected {expected}, got {describe(value)}{_digit_hint(value)}")


def _quantity(value: object, kind: str, allow_zero: bool) -> float:
    units, expected = _KINDS[kind]
    number, unit = _to_decimal(value, kind)
    if unit is None:
        scale = Decimal(1)
    elif unit in units:
        scale = units[unit]
    else:
        other = _unit_kind(unit)
        if other is not None:
            raise WrongUnitKindError(f"{describe(value)} is a {other}, expected {expected}")
        hint = _suggest_unit(unit, units)
        if _digit_hint(value):
            hint += "; digits must be ASCII 0-9"
        if number < 0 or (number == 0 and not allow_zero):  # whatever the unit, the sign is wrong
            _check_sign(float(number), value, kind, allow_zero, f" (and unknown unit {unit!r}{hint})")
        raise UnknownUnitError(
            f"expected {expected}, got {describe(value)} (unknown unit {unit!r}{hint})"
        )
    try:
        with localcontext() as ctx:
            ctx.prec = 50
            result = float(number * scale)
    except (DecimalException, OverflowError):
        result = math.inf
    if not math.isfinite(result):
        raise NotFiniteError(f"expected a finite {kind}, got {describe(value)} (too large)", "too large")
    _check_sign(result, value, kind, allow_zero)
    return result + 0.0  # "-0" is zero, not negative zero (which prints as "-0.0")


def _check_sign(result: Number, value: object, kind: str, allow_zero: bool, also: str = "") -> None:
    if result < 0 or (result == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise SignError(f"expected a {_sign_text(allow_zero)} {kind} ({bound}), got {describe(value)}{also}",
                        "negative" if result < 0 else "zero")


def _suggest_unit(unit: str, units: Dict[str, Decimal]) -> str:
    """' (did you mean ...?)' for a unit that only differs in case (b vs B matters)."""
    matches = sorted(u for u in units if u.lower() == unit.lower())
    if not matches:
        return ""
    return "; did you mean " + " or ".join(repr(m) for m in matches) + "?"


def parse_size(value: object, *, allow_zero: bool = False) -> float:
    """Bytes from ``"25 MB"`` (SI, 25e6), ``"25 MiB"`` (binary, 25·2**20) or a plain number of bytes."""
    return _quantity(value, "size", allow_zero)


def parse_rate(value: object, *, allow_zero: bool = False) -> float:
    """Bytes/s from ``"100 Gbps"`` / ``"100 Gb/s"`` / ``"100 Gbit/s"`` (bits, 12.5e9 B/s),
    ``"12.5 GB/s"`` / ``"12.5 GBps"`` (bytes), ``"10 GiB/s"`` (binary) or a plain number of bytes/s."""
    return _quantity(value, "rate", allow_zero)


def parse_time(value: object, *, allow_zero: bool = False) -> float:
    """Seconds from ``"5 us"`` (also ``µs``), ``"3 ns"``, ``"2 ms"``, ``"0.5 s"``, ``"2 min"``, ``"1 h"``
    or a plain number of seconds."""
    return _quantity(value, "time", allow_zero)


def _unitless(value: object, kind: str):
    """The Decimal of a value that must carry no unit (a count or a plain number)."""
    expected = _KINDS[kind][1]
    number, unit = _to_decimal(value, kind)
    if unit is not None:
        other = _unit_kind(unit)
        if other is not None:
            raise WrongUnitKindError(f"{describe(value)} is a {other}, expected {expected}")
        raise UnitError(f"expected {expected}, got {describe(value)}{_digit_hint(value)}")
    return number


def parse_count(value: object, *, allow_zero: bool = False) -> int:
    """A whole number from an int, an integral float, or a string such as ``"1e9"``, ``"1.0e9"``
    or ``"1_000"`` (PyYAML leaves the first two as strings: YAML 1.1 floats need a dot and a
    signed exponent)."""
    expected = _KINDS["count"][1]
    number = _unitless(value, "count")
    if number.copy_abs() > MAX_COUNT:  # not abs(): it rounds, and overflows past 1e999999
        raise UnitError(f"expected a whole number up to 2**63-1, got {describe(value)}")
    if number != number.to_integral_value():
        raise UnitError(f"expected {expected}, got {describe(value)} (not a whole number)")
    result = int(number)
    _check_sign(result, value, "count", allow_zero)
    return result


def parse_number(value: object) -> float:
    """A finite dimensionless number (an int, a float, or a numeric string such as ``"1e-3"``).
    Range checks are the caller's job."""
    number = _unitless(value, "number")
    try:
        result = float(number)
    except OverflowError:
        result = math.inf
    if not math.isfinite(result):
        raise NotFiniteError(f"expected a finite number, got {describe(value)}", "too large")
    return result
