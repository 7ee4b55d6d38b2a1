"""commsim.benchsizes: nccl-tests size ranges, bounded where every caller reads them."""

import pytest

from commsim.benchsizes import MAX_TABLE_BYTES, parse_size_range


def test_the_bound_is_inclusive():
    sizes = parse_size_range("8:1024T")
    assert sizes[-1] == MAX_TABLE_BYTES == 2**50
    assert len(sizes) == 48  # 2**3 .. 2**50


@pytest.mark.parametrize("text, given", [
    ("8:1e300", "1e+300"),
    ("8:1025T", "1,126,999,418,470,400"),
    ("1e300:1e301:2", "1e+301"),
    (f"1:{2**50 + 1}", "1,125,899,906,842,625"),
])
def test_a_range_past_2_50_bytes_is_refused_by_the_library(text, given):
    # Library callers (validate/, benchmarks) reach the bound without the CLI's type.
    with pytest.raises(ValueError) as info:
        parse_size_range(text)
    assert str(info.value) == (f"--sizes {text!r}: expected sizes up to 2**50 bytes (1,125,899,906,842,624), "
                               f"got MAX = {given} bytes")


@pytest.mark.parametrize("text, sizes", [
    ("1.5M:3M", [1572864, 3145728]),  # read "unknown unit 'M'" before, while 1M worked
    ("0.5K:1K", [512, 1024]),
    (".5K:1K", [512, 1024]),
    ("8:32:2", [8, 16, 32]),
])
def test_a_fraction_with_a_suffix_is_a_size_when_it_is_whole_bytes(text, sizes):
    assert parse_size_range(text) == sizes


@pytest.mark.parametrize("text, message", [
    ("1.3K:1M", "size '1.3K' is not a whole number of bytes (1331.2)"),
    ("\u0668:1K", "expected a size like"),  # an Arabic-Indic digit 8: \\d took it
    ("8:1K:\u00b3", "expected 1 <= MIN <= MAX and an integer FACTOR >= 2"),  # int('³') raised its own text
])
def test_what_is_no_size_says_so(text, message):
    with pytest.raises(ValueError) as info:
        parse_size_range(text)
    assert message in str(info.value)


@pytest.mark.parametrize("text, sizes", [("1G", [1 << 30]), ("8", [8]), ("25 MB", [25_000_000])])
def test_one_size_alone_is_that_size_only(text, sizes):
    # nccl-tests' -b 1G -e 1G; "--sizes 1G" was refused as no MIN:MAX before.
    assert parse_size_range(text) == sizes


def test_one_size_alone_is_still_bounded_and_checked():
    with pytest.raises(ValueError, match="expected sizes up to 2"):
        parse_size_range("2000T")
    with pytest.raises(ValueError, match="expected 1 <= MIN"):
        parse_size_range("0")
