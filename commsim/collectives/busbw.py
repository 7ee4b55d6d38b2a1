"""Bus bandwidth in nccl-tests' convention.

nccl-tests (NVIDIA/nccl-tests, doc/PERFORMANCE.md): algbw = S / t, where S is the size column
of the table (for all-gather and reduce-scatter the total buffer of n shards); busbw scales
algbw so that it is comparable with the hardware's link bandwidth whatever n is:

- all-reduce:                     busbw = algbw * 2(n-1)/n
- reduce-scatter, all-gather:     busbw = algbw * (n-1)/n
- broadcast, reduce:              busbw = algbw
"""

from __future__ import annotations

BUSBW_FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def busbw_factor(collective: str, n: int) -> float:
    """The factor busbw / algbw of a collective over ``n`` ranks."""
    try:
        return BUSBW_FACTORS[collective](n)
    except KeyError:
        raise ValueError(f"unknown collective {collective!r}; expected one of {sorted(BUSBW_FACTORS)}") from None


def algbw(size: float, time: float) -> float:
    """Algorithm bandwidth S / t in bytes/s (inf for t == 0)."""
    return float("inf") if time <= 0 else size / time


def busbw(collective: str, size: float, time: float, n: int) -> float:
    """Bus bandwidth in bytes/s of a ``collective`` of ``size`` bytes over ``n`` ranks taking ``time`` s."""
    return algbw(size, time) * busbw_factor(collective, n)
