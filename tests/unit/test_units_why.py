"""What is wrong with a quantity is said: the sign before an unknown unit, NaN and infinities
whatever the unit, an empty string, a unit or a sign without a number; for sizes, rates and
times alike."""

import pytest

from commsim.units import NotFiniteError, SignError, UnitError, parse_count, parse_rate, parse_size, parse_time

PARSERS = {"size": parse_size, "rate": parse_rate, "time": parse_time}


@pytest.mark.parametrize("kind", sorted(PARSERS))
@pytest.mark.parametrize("text, error, why", [
    ("-5 XB", SignError, "(and unknown unit 'XB')"),  # read "unknown unit" alone: the sign is the first fault
    ("0 XB", SignError, "(and unknown unit 'XB')"),
    ("nan", NotFiniteError, "(NaN: not a number)"),
    ("NaN MB", NotFiniteError, "(NaN: not a number)"),
    ("-inf Gbps", NotFiniteError, "(infinite)"),
    ("Infinity", NotFiniteError, "(infinite)"),
    ("", UnitError, "(empty)"),
    ("  ", UnitError, "(empty)"),
    ("MB", UnitError, "(no number before the unit 'MB')"),
    ("-us", UnitError, "(no number before the unit 'us')"),
    ("-", UnitError, "(a sign '-' without a number)"),
])
def test_the_reason_a_string_is_no_quantity_is_named(kind, text, error, why):
    with pytest.raises(error) as exc:
        PARSERS[kind](text)
    assert str(exc.value).endswith(f"got {text!r} {why}")


@pytest.mark.parametrize("kind", sorted(PARSERS))
def test_negative_zero_is_zero(kind):
    assert str(PARSERS[kind]("-0", allow_zero=True)) == "0.0"


def test_sign_and_finiteness_reasons_are_machine_readable():
    with pytest.raises(SignError) as neg:
        parse_rate("-5 Gbps")
    with pytest.raises(SignError) as zero:
        parse_time(0)
    with pytest.raises(NotFiniteError) as nan:
        parse_count("nan")
    assert (neg.value.reason, zero.value.reason, nan.value.reason) == ("negative", "zero", "NaN")
