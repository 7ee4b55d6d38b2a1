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
