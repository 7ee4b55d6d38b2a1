"""PyTorch Flight Recorder dumps -> :class:`commsim.traces.records.RankTrace`.

A process group with a Flight Recorder (``TORCH_FR_BUFFER_SIZE`` > 0; NCCL, and gloo in recent
releases) keeps a ring buffer of its last collectives and dumps it, per rank, as a pickle
(``torch._C._distributed_c10d._dump_fr_trace``; written to ``TORCH_FR_DUMP_TEMP_FILE<rank>``
on a timeout) or as JSON (``_dump_fr_trace_json``). Its documented layout (pytorch
``tools/flight_recorder``, format version 2.x)::

    {"version": "2.10", "pg_config": {PG: {"name", "desc", "ranks": "[0, 1]"}},
     "pg_status": {...}, "entries": [
        {"collective_seq_id", "p2p_seq_id", "is_p2p", "process_group": (PG, desc),
         "profiling_name": "nccl:all_reduce", "time_created_ns",
         "time_discovered_started_ns", "time_discovered_completed_ns", "duration_ms",
         "input_sizes": [[n, ...]], "input_dtypes": ["Float"], "output_sizes", "output_dtypes",
         "state": "scheduled" | "started" | "completed", "retired", ...}, ...]}

The dump names no rank: the rank comes from the file name (``...rank3...``, else its last
number), as the Flight Recorder's own analyzer takes it from the dump file's suffix.

A pickle can run code when loaded, so a dump is never read with ``pickle.load``: the
restricted unpickler here resolves no global at all (no class, no function), which is all a
dump needs (dicts, lists, tuples, strings, numbers, None), and refuses anything else with one
line naming what the pickle asked for. A dump has no compute timeline (no forward, backward,
optimizer): it serves ``blame`` (who arrived last at each collective) and, next to the
profiler traces, sequence numbers; ``import`` needs the profiler traces.
"""

from __future__ import annotations

import io
import math
import pickle
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from commsim.traces.errors import TraceError
from commsim.traces.kinds import DTYPE_BYTES, collective_kind, dtype_name
from commsim.traces.records import CommEvent, RankTrace


class _Refusing(pickle.Unpickler):
    """An unpickler that builds plain containers and scalars only: every global is refused."""

    source = ""

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle's hook
        raise TraceError(self.source, None,
                         f"refusing to load this pickle: it asks for {module}.{name}, and a Flight Recorder dump holds "
                         "only plain containers and scalars (a pickle that names a class or function can run code)")

    def persistent_load(self, pid):
        raise TraceError(self.source, None, "refusing to load this pickle: it uses persistent ids, which a "
                                            "Flight Recorder dump never does")


def safe_unpickle(data: bytes, source: str) -> Any:
    """Unpickle `data` allowing only dicts, lists, tuples, sets, strings, bytes, numbers,
    booleans and None. Anything else, and a damaged pickle, is a one-line TraceError."""
    u = _Refusing(io.BytesIO(data))
    u.source = source
    try:
        return u.load()
    except TraceError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, MemoryError, RecursionError) as err:
        truncated = isinstance(err, EOFError) or "truncated" in str(err)
        what = "truncated pickle" if truncated else f"damaged pickle ({type(err).__name__}: {err})"
        raise TraceError(source, None, f"not a readable Flight Recorder dump: {what}") from None


def rank_from_name(path: str) -> Optional[int]:
    """The rank a dump file is named for: ``rank<N>`` (also rank_N, rank-N), else the last number."""
    name = Path(path).name
    m = re.search(r"rank[_-]?(\d+)", name, re.IGNORECASE)
    if m:
        return int(m.group(1))
    nums = re.findall(r"\d+", name)
    return int(nums[-1]) if nums else None


def _ranks(raw: Any, source: str, where: str) -> Tuple[int, ...]:
    """A process group's ranks: a list of integers >= 0, or the text of one ("[0, 1]"; text that
    is no list of integers says nothing, as before). A NaN, an infinity, a mapping or a negative
    rank was a traceback (int() of it, or an index from the end of the ranks' list)."""
    if isinstance(raw, (list, tuple)):
        items = list(raw)
    elif isinstance(raw, str):
        try:
            items = [int(x.strip()) for x in raw.strip().strip("[]").split(",") if x.strip()]
        except ValueError:
            return ()
    else:
        return ()
    for x in items:
        if isinstance(x, bool) or not isinstance(x, int) or x < 0:
            raise TraceError(source, where, f"expected a list of ranks (integers >= 0), got {raw!r:.80}")
    return tuple(items)


MAX_BYTES = 2**63  # a collective's bytes, as the int64 byte counts of every other trace format


def _size(shapes: Any, dtypes: Any, source: str, where: str) -> Tuple[int, str]:
    """Total bytes and dtype of a list of tensor shapes with their dtypes."""
    if not isinstance(shapes, list) or not isinstance(dtypes, list) or len(shapes) != len(dtypes):
        raise TraceError(source, where, f"expected lists of tensor sizes and of their dtypes of equal length, "
                                        f"got {shapes!r} and {dtypes!r}")
    total, dt = 0, ""
    for shape, raw in zip(shapes, dtypes):
        d = dtype_name(raw)
        if d is None:
            raise TraceError(source, where, f"unknown dtype {raw!r}")
        if not isinstance(shape, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                  for x in shape):
            raise TraceError(source, where, f"expected a tensor size (a list of integers >= 0), got {shape!r:.80}")
        # math.prod: exact (np.prod wrapped [2**32, 2**32] to 0 bytes in int64)
        total += math.prod(shape) * DTYPE_BYTES[d]
        dt = dt or d
    if total >= MAX_BYTES:
        raise TraceError(source, where, f"expected tensors of fewer than 2**63 bytes in all, got {total:.3g} bytes")
    return total, dt


_REQUIRED = {"collective_seq_id": int, "profiling_name": str, "time_created_ns": int,
             "input_sizes": list, "input_dtypes": list}


MAX_NS = 2**63  # the dump's nanosecond stamps are int64 (c10d's time_created_ns and the rest)


def _finite(value: Any) -> bool:
    """Whether a number is finite as a float (an integer past float's range is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _check_stamp(value: int, source: str, key: str) -> None:
    # past int64 a stamp is no clock reading, and past float's range the times in seconds
    # ((stamp - origin) * 1e-9) were an OverflowError traceback
    if not 0 <= value < MAX_NS:
        raise TraceError(source, key, f"expected nanoseconds from 0 to 2**63 - 1, got {value!r:.60}")


def _times(e: Dict[str, Any], source: str, where: str) -> Tuple[Optional[int], Optional[int], Optional[float]]:
    """An entry's (started_ns, completed_ns, duration_ms), each None where the dump has none.

    A collective that ends before it starts, or a negative or non-finite duration, is refused:
    it would run a span backwards (and NaN or inf cannot become a time in nanoseconds)."""
    def stamp(key: str) -> Optional[int]:
        value = e.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        _check_stamp(value, source, f"{where}.{key}")
        return value

    started, completed = stamp("time_discovered_started_ns"), stamp("time_discovered_completed_ns")
    duration = e.get("duration_ms")
    if not isinstance(duration, (int, float)) or isinstance(duration, bool):
        duration = None
    elif not _finite(duration) or duration < 0 or duration * 1e6 >= MAX_NS:
        # in nanoseconds (an end = start + duration) it must be an int64 as the stamps are
        raise TraceError(source, f"{where}.duration_ms",
                         f"expected a finite duration >= 0 (below 2**63 ns), got {duration!r:.60}")
    if started is not None and completed is not None and completed < started:
        raise TraceError(source, f"{where}.time_discovered_completed_ns",
                         f"expected a time at or after time_discovered_started_ns ({started}), got {completed}")
    return started, completed, duration


def read_flight_recorder(doc: Any, source: str, rank: Optional[int] = None) -> RankTrace:
    """One rank's Flight Recorder dump (unpickled or JSON) as a RankTrace of collectives."""
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise TraceError(source, "entries", "expected a Flight Recorder dump: a mapping with a list of 'entries'")
    rank = rank_from_name(source) if rank is None else rank
    if rank is None:
        raise TraceError(source, None, "a Flight Recorder dump does not say its rank and the file name has no "
                                       "number: name it ...rank<N>... (as TORCH_FR_DUMP_TEMP_FILE<rank> does)")
    pgs: Dict[str, Tuple[int, ...]] = {}
    config = doc.get("pg_config") if isinstance(doc.get("pg_config"), dict) else {}
    for name, pg in config.items():
        if isinstance(pg, dict):
            pgs[str(name)] = _ranks(pg.get("ranks"), source, f"pg_config[{str(name)!r}].ranks")
    # gloo dumps name the default group '' in pg_config and '0' in their entries: with one
    # group configured, an entry's group that is not in it is that one
    only = next(iter(pgs.values())) if len(pgs) == 1 else None
    notes: List[str] = []
    comms: List[CommEvent] = []
    skipped_p2p = 0
    in_flight = 0
    for i, e in enumerate(doc["entries"]):
        where = f"entries[{i}]"
        if not isinstance(e, dict):
            raise TraceError(source, where, f"expected a mapping, got {type(e).__name__}")
        for key, typ in _REQUIRED.items():
            if key not in e:  # said as missing: "got None" read as if the dump held a null
                raise TraceError(source, f"{where}.{key}", f"missing key (expected {typ.__name__})")
            if not isinstance(e.get(key), typ) or isinstance(e.get(key), bool):
                raise TraceError(source, f"{where}.{key}", f"expected {typ.__name__}, got {e.get(key)!r}")
        if e.get("is_p2p"):
            skipped_p2p += 1
            continue
        kind = collective_kind(e["profiling_name"])
        if kind is None:
            raise TraceError(source, f"{where}.profiling_name", f"unknown collective {e['profiling_name']!r}")
        pg = e.get("process_group")
        group = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(e.get("pg_id", "0"))
        if group not in pgs and only is not None:
            pgs[group] = only
        nbytes, dt = _size(e["input_sizes"], e["input_dtypes"], source, f"{where}.input_sizes")
        if kind in ("all_gather", "gather") and isinstance(e.get("output_sizes"), list):
            nbytes, _ = _size(e["output_sizes"], e.get("output_dtypes") or [], source, f"{where}.output_sizes")
        created = e["time_created_ns"]
        _check_stamp(created, source, f"{where}.time_created_ns")
        started, completed, duration = _times(e, source, where)
        if e.get("state") != "completed" and not e.get("retired"):
            in_flight += 1
        comms.append(CommEvent(
            kind=kind, group=group, nbytes=nbytes, dtype=dt, issue=created, seq=e["collective_seq_id"],
            start=started if isinstance(started, int) else None,
            end=(completed if completed is not None else
                 (started + int(duration * 1e6) if started is not None and duration is not None else None)),
            group_ranks=pgs.get(group) or None, group_size=len(pgs[group]) if pgs.get(group) else None,
            where=f"{where} ({e['profiling_name']})",
        ))
    if skipped_p2p:
        notes.append(f"{skipped_p2p} point-to-point entries left out")
    if in_flight:
        notes.append(f"{in_flight} collectives were still in flight when the dump was taken")
    if not comms:
        return RankTrace(source=source, format="flight-recorder", rank=rank, origin_ns=0,
                         groups=tuple(pgs.items()), notes=tuple(notes))
    origin = min(c.issue for c in comms)

    def sec(ns):
        return None if ns is None else (ns - origin) * 1e-9

    from dataclasses import replace

    ordered = sorted(comms, key=lambda c: (c.group, c.seq))
    counters: Dict[str, int] = {}
    out = []
    for c in ordered:
        k = counters.get(c.group, 0)
        counters[c.group] = k + 1
        out.append(replace(c, issue=sec(c.issue), start=sec(c.start), end=sec(c.end), order=k))
    out.sort(key=lambda c: c.issue)
    used = {c.group for c in out}
    pgs = {g: r for g, r in pgs.items() if g in used or not used}
    world = max((len(r) for r in pgs.values()), default=0) or None
    prefixes = {e["profiling_name"].split(":")[0] for e in doc["entries"] if ":" in e["profiling_name"]}
    backend = next(iter(prefixes)) if len(prefixes) == 1 else None
    return RankTrace(
        source=source, format="flight-recorder", rank=rank, origin_ns=int(origin), world_size=world,
        backend=backend, groups=tuple(sorted(pgs.items())), comms=tuple(out),
        device="gpu" if backend == "nccl" else "cpu", notes=tuple(notes),
    )
