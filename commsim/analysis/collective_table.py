"""The numbers of ``commsim collective``: predicted all-reduce rows per message size.

Two sources:

- :func:`calibration_rows`: a calibration's own curve (its measured table where the world size
  and size were measured, its fitted alpha-beta model elsewhere);
- :func:`algorithm_rows`: the closed form of each named algorithm on a fabric (the scenario's
  links, or a calibration's fitted ones, per message size).

Bandwidths follow nccl-tests (doc/PERFORMANCE.md): algbw = size / time, busbw = algbw times
the collective's bus factor (2(n-1)/n for an all-reduce). The printing (nccl-tests columns)
is the CLI's.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

from commsim import calibration as calib
from commsim.network.fabric import Fabric


def calibration_rows(cal: "calib.Calibration", n: int, sizes: Sequence[int], level: Optional[str]) -> List[Dict]:
    """One row per size from the calibration's curve at world size `n` on link `level`:
    size_bytes, time_us, algbw_GBps, busbw_GBps and source ("table": the measured curve,
    "model": the fitted alpha-beta model)."""
    rows = []
    for size in sizes:
        t, source = calib.predict_with_source(cal, size, n, level)
        alg = size / t / 1e9 if t > 0 else float("inf")
        rows.append({
            "size_bytes": int(size),
            "time_us": t * 1e6,
            "algbw_GBps": alg,
            "busbw_GBps": alg * calib.allreduce_factor(n),
            "source": source,
        })
    return rows


def algorithm_rows(names: Sequence[str], fabric_for: Callable[[int], Fabric], sizes: Sequence[int],
                   model: str) -> List[Dict]:
    """One row per (size, algorithm), sizes outermost: size_bytes, algorithm, chosen (what
    runs: auto's pick, or NCCL's algorithm/protocol), time_us, algbw_GBps, busbw_GBps, fastest
    (the quickest all-reduce of its size). `fabric_for(size)` gives the links that price a
    message of that size (a calibration's fit depends on the size range)."""
    from commsim.collectives import table

    raw = []
    for size in sizes:
        raw.extend(table(list(names), fabric_for(size), [size], model))
    return [{"size_bytes": r["size"], "algorithm": r["algorithm"], "chosen": r["chosen"], "time_us": r["time_s"] * 1e6,
             "algbw_GBps": r["algbw"] / 1e9, "busbw_GBps": r["busbw"] / 1e9, "fastest": bool(r["fastest"])}
            for r in raw]
