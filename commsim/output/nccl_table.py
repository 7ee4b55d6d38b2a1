"""nccl-tests' all_reduce_perf table: the columns users already read, for predictions and sweeps."""

from __future__ import annotations

from typing import Sequence

ELEMENT_BYTES = 4  # the table is for dtype float, as all_reduce_perf's default


def time_cell(us: float) -> str:
    """nccl-tests' time format: 2 decimals below 100 us, 1 below 10 ms, none above."""
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


_HEADER = (
    "#                                                              out-of-place",
    "#       size         count      type   redop    root     time   algbw   busbw",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)",
)
# what all_reduce_perf adds after the out-of-place columns: #wrong, then the in-place group
_HEADER_IN_PLACE = (
    "                       in-place",
    " #wrong     time   algbw   busbw #wrong",
    "            (us)  (GB/s)  (GB/s)",
)


def nccl_table_header(in_place: bool = False) -> str:
    """all_reduce_perf's three header lines: the out-of-place columns (a prediction), or with
    `in_place` all of them, #wrong included (a measured sweep, validate.collective_bench)."""
    if not in_place:
        return "\n".join(_HEADER)
    return "\n".join(a + b for a, b in zip(_HEADER, _HEADER_IN_PLACE))


def format_nccl_table(rows: Sequence[dict]) -> str:
    """The rows in all_reduce_perf's out-of-place columns."""
    out = [nccl_table_header()]
    for r in rows:
        out.append(
            f"{r['size_bytes']:12d}  {r['count']:12d}  {r['type']:>8s}  {r['redop']:>6s}  {r['root']:6d}  "
            f"{time_cell(r['time_us'])}  {r['algbw_GBps']:6.2f}  {r['busbw_GBps']:6.2f}"
        )
    return "\n".join(out)
