"""Benchmark sizes as nccl-tests reads its -b/-e/-f options ("8", "64K", "1G", "8:1G:2").

Shared by the CLI and validate/ (which must not import the CLI).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import List

from commsim.units import parse_size

# The largest message a size range may reach: 1 PiB, far past any all-reduce a job sends
# (nccl-tests runs go to a few GiB) and far below where float byte counts stop being exact
# (2**53). Without it "8:1e300" is a thousand sizes up to a 300-digit one.
MAX_TABLE_BYTES = 1 << 50

# ASCII digits only (\d also takes other scripts' digits); a fraction with a suffix is fine where
# it is a whole number of bytes: 1.5M = 1,572,864 B ("1.5M" read "unknown unit 'M'" before)
_NCCL_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([KMGT]?)\s*$", re.IGNORECASE | re.ASCII)
_FACTOR = re.compile(r"^\s*[0-9]+\s*$", re.ASCII)


def parse_bench_size(text: str) -> int:
    """A size in bytes. Bare numbers with a K/M/G/T suffix are binary, as nccl-tests reads
    its -b/-e options (1G = 2**30); strings with a unit ("25 MB", "1 GiB") go through
    commsim.units.parse_size."""
    m = _NCCL_SIZE.match(text)
    if m:
        value = Fraction(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper())  # exact
        if value.denominator != 1:
            raise ValueError(f"size {text!r} is not a whole number of bytes ({float(value):g})")
        return int(value)
    value = parse_size(text)
    if value != int(value):
        raise ValueError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def parse_size_range(text: str) -> List[int]:
    """"MIN:MAX[:FACTOR]" -> MIN, MIN*FACTOR, ... <= MAX (factor 2 by default, as nccl-tests -f 2);
    one size alone ("1G") is that size only, as nccl-tests' -b 1G -e 1G.

    MAX may be at most :data:`MAX_TABLE_BYTES` (2**50); anything else is a ValueError whose
    message names the range and what was expected."""
    parts = text.split(":")
    if len(parts) == 1:
        parts = [parts[0], parts[0]]  # one size: a range from it to itself
    if len(parts) not in (2, 3):
        raise ValueError(f"--sizes {text!r}: expected SIZE, MIN:MAX or MIN:MAX:FACTOR, e.g. 8:1G")
    lo, hi = parse_bench_size(parts[0]), parse_bench_size(parts[1])
    factor = int(parts[2]) if len(parts) == 3 and _FACTOR.match(parts[2]) else (2 if len(parts) == 2 else 0)
    if lo < 1 or hi < lo or factor < 2:
        raise ValueError(f"--sizes {text!r}: expected 1 <= MIN <= MAX and an integer FACTOR >= 2")
    if hi > MAX_TABLE_BYTES:
        given = f"{hi:,}" if hi < 10**18 else f"{float(hi):.3g}"  # not 300 digits for 1e300
        raise ValueError(f"--sizes {text!r}: expected sizes up to 2**50 bytes ({MAX_TABLE_BYTES:,}), "
                         f"got MAX = {given} bytes")
    sizes = []
    s = lo
    while s <= hi:
        sizes.append(s)
        s *= factor
    return sizes
