"""Pure cost formulas: closed forms, DDP bucket layout, per-hop link parameters.

No SimPy, no state: every function here is a formula with its source, tested against
hand-computed values in tests/test_costs.py.
"""

from __future__ import annotations

import numpy as np



def ring_allreduce_time(size_bytes: float, n: int, alpha: float, bandwidth: float) -> float:
    """Uniform ring all-reduce: T = 2(n-1) alpha + 2(n-1)/n * S/B.

    Reduce-scatter then all-gather, each n-1 steps moving S/n bytes per hop
    (Patarasuk & Yuan 2009; docs/collectives.md). One rank: no communication.
    """
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * size_bytes / bandwidth


def ring_traffic_bytes(size_bytes: float, n: int) -> float:
    """Bytes each rank sends in a ring all-reduce: 2(n-1)/n * S (not the rule of thumb 2S)."""
    return 2 * (n - 1) / n * size_bytes if n > 1 else 0.0


def ddp_buckets(grad_bytes: float, first_bucket: float, bucket_cap: float) -> np.ndarray:
    """Bucket sizes in bytes, in the order DDP all-reduces them.

    PyTorch DDP fills buckets in reverse parameter order (the order backward produces
    gradients); the first bucket is capped at `first_bucket` (1 MiB by default) so that
    communication starts early, the others at `bucket_cap` (25 MiB); the last holds the rest.
    Gradient bytes are treated as divisible at any byte (parameter tensor boundaries ignored).
    """
    if grad_bytes <= 0:
        return np.zeros(0)
    first = min(float(first_bucket), float(grad_bytes))
    rest = float(grad_bytes) - first
    full, remainder = divmod(rest, float(bucket_cap))
    sizes = [first] + [float(bucket_cap)] * int(full)
    if remainder > 0:
        sizes.append(remainder)
    return np.asarray(sizes)
