"""Tests for commsim.units: human quantities -> base units, and the error text for bad ones."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commsim.units import (
    RATE_UNITS,
    SIZE_UNITS,
    TIME_UNITS,
    UnitError,
    UnknownUnitError,
    WrongUnitKindError,
    parse_count,
    parse_number,
    parse_rate,
    parse_size,
    parse_time,
)

# --- sizes: SI (powers of 1000) vs binary (powers of 1024) ---------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("512 B", 512),
        ("3 bytes", 3),
        ("1 kB", 1000),
        ("1 KB", 1000),
        ("25 MB", 25_000_000),
        ("4 GB", 4_000_000_000),
        ("1 TB", 10**12),
        ("1 KiB", 1024),
        ("25 MiB", 25 * 1024**2),
        ("2 GiB", 2 * 1024**3),
        ("1 TiB", 1024**4),
        ("25MB", 25_000_000),
        ("  0.5 GB ", 500_000_000),
        ("1e3 B", 1000),
    ],
)
def test_parse_size_si_and_binary(text, expected):
    assert parse_size(text) == expected


def test_si_and_binary_prefixes_differ():
    assert parse_size("25 MiB") / parse_size("25 MB") == pytest.approx(1.048576, rel=1e-12)


def test_parse_size_plain_numbers_are_bytes():
    assert parse_size(1000) == 1000
    assert parse_size(2.5e6) == 2.5e6
    assert parse_size("1e9") == 1e9


def test_decimal_strings_are_exact():
    # 0.1 * 1e9 in binary floating point is 100000000.00000001; the parser must not be.
    assert parse_size("0.1 GB") == 100_000_000.0
    assert parse_time("5 us") == 5e-6
    assert parse_time("0.3 s") == 0.3


# --- rates: bits vs bytes ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("100 Gbps", 12.5e9),
        ("100 Gb/s", 12.5e9),
        ("100 Gbit/s", 12.5e9),
        ("25 Gbps", 3.125e9),
        ("400 Gbps", 50e9),
        ("1 Mbps", 125_000),
        ("1 kbps", 125),
        ("8 bps", 1),
        ("1 Tbps", 125e9),
        ("12.5 GB/s", 12.5e9),
        ("12.5 GBps", 12.5e9),
        ("300 GB/s", 300e9),
        ("10 GiB/s", 10 * 1024**3),
        ("1 MiB/s", 1024**2),
        ("5 B/s", 5),
    ],
)
def test_parse_rate(text, expected):
    assert parse_rate(text) == pytest.approx(expected, rel=1e-15)


def test_bits_and_bytes_differ_by_eight():
    assert parse_rate("100 GBps") == 8 * parse_rate("100 Gbps")


def test_parse_rate_plain_numbers_are_bytes_per_second():
    assert parse_rate(12.5e9) == 12.5e9
    assert parse_rate("1.25e10") == 1.25e10


# --- times -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("3 ns", 3e-9),
        ("5 us", 5e-6),
        ("5 \u00b5s", 5e-6),  # MICRO SIGN
        ("5 \u03bcs", 5e-6),  # GREEK SMALL LETTER MU
        ("2 ms", 2e-3),
        ("0.5 s", 0.5),
        ("2 min", 120),
        ("1 h", 3600),
        ("0.25", 0.25),
    ],
)
def test_parse_time(text, expected):
    assert parse_time(text) == pytest.approx(expected, rel=1e-15)


def test_parse_time_plain_numbers_are_seconds():
    assert parse_time(2) == 2
    assert parse_time(0.5) == 0.5


def test_allow_zero():
    assert parse_time(0, allow_zero=True) == 0
    assert parse_time("0 us", allow_zero=True) == 0
    assert parse_count("0", allow_zero=True) == 0
    with pytest.raises(UnitError, match=r"expected a positive time \(> 0\), got 0"):
        parse_time(0)
    with pytest.raises(UnitError, match=r"expected a non-negative time \(>= 0\), got '-1 us'"):
        parse_time("-1 us", allow_zero=True)


# --- counts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        (8, 8),
        ("1e9", 10**9),  # PyYAML leaves these as strings (YAML 1.1 floats need '.' and a signed exponent)
        ("1.0e9", 10**9),
        ("1.5e9", 1_500_000_000),
        ("1_000", 1000),
        ("1E3", 1000),
        (1e9, 10**9),
        (4.0, 4),
        ("175e9", 175 * 10**9),
    ],
)
def test_parse_count(value, expected):
    result = parse_count(value)
    assert result == expected and isinstance(result, int)


def test_parse_count_is_exact_for_large_values():
    assert parse_count("123456789012345678") == 123456789012345678


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("1.5", "(not a whole number)"),
        (2.5, "(not a whole number)"),
        ("1e30", "up to 2**63-1"),
        ("abc", "got 'abc'"),
        ("", "got ''"),
    ],
)
def test_parse_count_rejects(value, fragment):
    with pytest.raises(UnitError) as err:
        parse_count(value)
    assert "expected a whole number" in str(err.value)
    assert fragment in str(err.value)


# --- bad input: each message says what was expected and what was given --------------------------


@pytest.mark.parametrize(
    "parse, value, kind, expected",
    [
        (parse_size, "5 us", "time", "a size like '25 MB'"),
        (parse_size, "100 Gbps", "rate", "a size like '25 MB'"),
        (parse_rate, "25 MB", "size", "a rate like '100 Gbps'"),
        (parse_rate, "2 ms", "time", "a rate like '100 Gbps'"),
        (parse_time, "25 MB", "size", "a time like '5 us'"),
        (parse_time, "10 GB/s", "rate", "a time like '5 us'"),
        (parse_count, "5 us", "time", "a whole number like 1000"),
        (parse_number, "3 GB", "size", "a plain number"),
    ],
)
def test_wrong_unit_kind(parse, value, kind, expected):
    with pytest.raises(WrongUnitKindError) as err:
        parse(value)
    assert str(err.value).startswith(f"{value!r} is a {kind}, expected {expected}")


def test_the_documented_wrong_kind_message():
    with pytest.raises(WrongUnitKindError, match=r"^'5 us' is a time, expected a size like '25 MB'"):
        parse_size("5 us")


@pytest.mark.parametrize(
    "parse, value, fragment",
    [
        (parse_size, "25 XB", "(unknown unit 'XB')"),
        (parse_size, "25 mb", "(unknown unit 'mb'; did you mean 'MB'?)"),
        (parse_rate, "100 gbps", "did you mean 'GBps' or 'Gbps'?"),
        (parse_rate, "100 Gibps", "(unknown unit 'Gibps'"),  # bit rates are SI only
        (parse_time, "5 sec", "(unknown unit 'sec')"),
        (parse_time, "5 m", "(unknown unit 'm')"),  # minutes or metres: ambiguous, rejected
    ],
)
def test_unknown_unit(parse, value, fragment):
    with pytest.raises(UnknownUnitError) as err:
        parse(value)
    text = str(err.value)
    assert text.startswith("expected a ")
    assert f"got {value!r}" in text
    assert fragment in text


@pytest.mark.parametrize("parse", [parse_size, parse_rate, parse_time, parse_count, parse_number])
@pytest.mark.parametrize(
    "value, given",
    [
        (True, "got true (a boolean)"),
        (False, "got false (a boolean)"),
        (None, "got null"),
        ([1, 2], "got [1, 2] (a list)"),
        ({"a": 1}, "got {'a': 1} (a mapping)"),
        ("fast", "got 'fast'"),
        ("inf", "got 'inf'"),
        ("nan", "got 'nan'"),
    ],
)
def test_not_a_number(parse, value, given):
    with pytest.raises(UnitError) as err:
        parse(value)
    assert str(err.value).startswith("expected ")
    assert given in str(err.value)


@pytest.mark.parametrize("parse", [parse_size, parse_rate, parse_time, parse_count, parse_number])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_floats(parse, value):
    with pytest.raises(UnitError, match=r"expected a finite .*, got (nan|inf|-inf)"):
        parse(value)


@pytest.mark.parametrize(
    "parse, value, kind",
    [
        (parse_size, "-5 MB", "size"),
        (parse_size, 0, "size"),
        (parse_size, "0 B", "size"),
        (parse_rate, -1, "rate"),
        (parse_rate, "0 Gbps", "rate"),
        (parse_time, "-1 s", "time"),
        (parse_time, 0.0, "time"),
        (parse_count, 0, "count"),
        (parse_count, "-3", "count"),
    ],
)
def test_zero_and_negative(parse, value, kind):
    with pytest.raises(UnitError) as err:
        parse(value)
    assert str(err.value).startswith(f"expected a positive {kind} (> 0), got ")


@pytest.mark.parametrize("parse", [parse_size, parse_rate, parse_time])
def test_too_large(parse):
    with pytest.raises(UnitError, match="too large"):
        parse("1e999999999")
    with pytest.raises(UnitError, match="too large"):
        parse(10**400)


def test_parse_number():
    assert parse_number("1e-3") == 0.001
    assert parse_number(-2) == -2.0  # range checks are the caller's job
    assert parse_number(0.5) == 0.5


# --- properties --------------------------------------------------------------------------------

_UNIT_TABLES = [(parse_size, SIZE_UNITS), (parse_rate, RATE_UNITS), (parse_time, TIME_UNITS)]


@settings(max_examples=150, deadline=None)
@given(
    table=st.sampled_from(_UNIT_TABLES),
    data=st.data(),
    mantissa=st.decimals(min_value=Decimal("0.001"), max_value=Decimal("1e6"), places=3),
)
def test_unit_strings_scale_the_number(table, data, mantissa):
    parse, units = table
    unit = data.draw(st.sampled_from(sorted(units)))
    assert parse(f"{mantissa} {unit}") == pytest.approx(float(mantissa * units[unit]), rel=1e-15)


@settings(max_examples=300, deadline=None)
@given(
    value=st.one_of(
        st.text(max_size=20),
        st.from_regex(r"-?\d{1,4}(\.\d{0,3})?(e-?\d{1,3})? ?[a-zA-Z/\u00b5]{0,6}", fullmatch=True),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.none(),
        st.lists(st.integers(), max_size=3),
    )
)
def test_parsers_raise_only_unit_errors(value):
    # Whatever a user types, a parser either returns a finite, non-negative number or raises a
    # UnitError (which the loader turns into a one-line ScenarioError), nothing else.
    for parse in (parse_size, parse_rate, parse_time, parse_count):
        try:
            result = parse(value)
        except UnitError as err:
            assert "\n" not in str(err)
        else:
            assert math.isfinite(result) and result > 0


# --- digits and magnitudes Python's number parsers would take --------------------------------------

ALL_PARSERS = [parse_size, parse_rate, parse_time, parse_count, parse_number]


@pytest.mark.parametrize("parse", ALL_PARSERS)
@pytest.mark.parametrize("value", ["\uff12", "\uff11\uff10", "\uff12.5", "\u0663", "1\uff12", "\uff12 MB", "\uff11e9"])
def test_non_ascii_digits_are_not_numbers(parse, value):
    # int("２") == 2 and Decimal("２") == 2: the regex must not take them (nodes: ２)
    with pytest.raises(UnitError) as err:
        parse(value)
    assert "digits must be ASCII 0-9" in str(err.value)


@pytest.mark.parametrize("parse", ALL_PARSERS)
@pytest.mark.parametrize("value", ["1e99999999999999999999", "-1e99999999999999999999", "1e999999999999999999"])
def test_exponents_beyond_decimal(parse, value):
    # Decimal() raises InvalidOperation past ~1e18 and abs() raises Overflow past 1e999999:
    # both are ArithmeticErrors, not ValueErrors, and escaped as tracebacks
    with pytest.raises(UnitError) as err:
        parse(value)
    assert "\n" not in str(err.value) and value in str(err.value)


@pytest.mark.parametrize("parse", [parse_size, parse_rate, parse_time, parse_number])
def test_exponents_far_below_one(parse):
    try:
        result = parse("1e-99999999999999999999")
    except UnitError as err:
        assert "positive" in str(err)
    else:
        assert result == 0.0


@pytest.mark.parametrize("parse", ALL_PARSERS)
def test_integers_python_cannot_print(parse):
    with pytest.raises(UnitError) as err:
        parse(10**5000)
    assert str(err.value).endswith("got an integer of about 5,001 digits (too large)")


def test_describe_huge_integers():
    from commsim.units import describe

    assert describe(10**5000) == "an integer of about 5,001 digits"
    assert describe(12345) == "12345"


@settings(max_examples=300, deadline=None)
@given(
    value=st.one_of(
        st.from_regex(r"[+-]?[0-9]{1,30}(\.[0-9]{0,5})?[eE][+-]?[0-9]{1,25}( ?(B|MB|Gbps|s|us))?", fullmatch=True),
        st.integers(min_value=-(10**6000), max_value=10**6000),
        st.text(alphabet=st.characters(categories=["Nd", "Zs", "Po"]), max_size=8),
    )
)
def test_any_magnitude_is_a_number_or_a_unit_error(value):
    for parse in ALL_PARSERS:
        try:
            result = parse(value)
        except UnitError as err:
            assert "\n" not in str(err)
        else:
            assert math.isfinite(result)


def test_counted_is_singular_for_one_only():
    from commsim.units import counted

    assert [counted(n, "point") for n in (0, 1, 2)] == ["0 points", "1 point", "2 points"]
    assert counted(1024, "GPU", ",") == "1,024 GPUs" and counted(1, "GPU", ",") == "1 GPU"


def test_describe_dates_and_binary_read_as_values():
    # They read "datetime.date(2020, 1, 1) (a date)" and "b'..' (a bytes)".
    import datetime

    from commsim.units import describe

    assert describe(datetime.date(2020, 1, 1)) == "2020-01-01 (a date; quote it for text)"
    assert describe(datetime.datetime(2020, 1, 1, 12, 0)) == "2020-01-01T12:00:00 (a date; quote it for text)"
    assert describe(b"\x00" * 2048) == "2,048 bytes of binary data"
