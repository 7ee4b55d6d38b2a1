"""The calibration file: YAML in, YAML out (format documented key by key in docs/calibration.md).

Writing is atomic (a temporary sibling, then os.replace). Reading is strict: an unknown or
missing key, a value of the wrong kind or range, or a table row whose bandwidth columns do
not follow from its size, time and world size raises a one-line CalibrationError naming the
file and the key path. The records live in :mod:`commsim.calibration.records`.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import reprlib
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import yaml

from commsim.atomic import atomic_write_text
from commsim.errors import InputError
from commsim.units import MAX_TIME, MIN_RATE
from commsim.yamlio import parse_yaml, read_text_file
from commsim.calibration.errors import CalibrationError
from commsim.calibration.fit import make_link
from commsim.calibration.physical_file import physical_from_dict, physical_to_dict
from commsim.calibration.records import (
    LEVELS,
    Calibration,
    ComputeTiming,
    Measurement,
    Provenance,
    RankCompute,
    SizeRange,
    SourceFile,
)


FORMAT = "commsim-calibration/1"
# The scenario's plausibility limits (commsim.units MAX_TIME, MIN_RATE) hold the link figures
# that price a scenario's hops in their place: a hand-edited alpha_s of 1e300 or beta_Bps of
# 1e-300 printed 300-digit and infinite times instead of an error.
TABLE_COLUMNS = ["size_bytes", "time_s", "algbw_Bps", "busbw_Bps", "world_size"]


def utc_now_iso() -> str:
    """Current UTC time, ISO 8601; honours SOURCE_DATE_EPOCH for reproducible files
    (CalibrationError, one line, if it names no representable date)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.isdigit():
        try:
            when = _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc)
        except (OverflowError, OSError, ValueError):  # past year 9999 or the platform's time_t
            raise CalibrationError(
                f"expected seconds since 1970-01-01 up to year 9999, got {epoch!r}", "SOURCE_DATE_EPOCH"
            ) from None
    else:
        when = _dt.datetime.now(_dt.timezone.utc)
    return when.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _opt_str(x: Any) -> Optional[str]:
    return None if x is None else str(x)  # plain str: version objects are str subclasses


def _finite(x: float) -> Optional[float]:
    return float(x) if math.isfinite(x) else None


def _ranks_per_node(r: "_Reader", pv: Dict[str, Any]) -> Tuple[int, ...]:
    """``provenance.ranks_per_node``: one count >= 1 per node of the job, in node order, summing to
    the world size (absent: unknown). Not checked against ``hostnames``, which lists distinct
    hosts: two nodes of a test job may share one."""
    if pv.get("ranks_per_node") is None:
        return ()
    counts = tuple(r.integer(v, f"provenance.ranks_per_node[{i}]", 1)
                   for i, v in enumerate(r.items(pv["ranks_per_node"], "provenance.ranks_per_node")))
    if sum(counts) != pv["world_size"]:
        raise r.fail("provenance.ranks_per_node", f"counts summing to world_size {pv['world_size']}", list(counts))
    return counts


def calibration_to_dict(cal: Calibration) -> Dict[str, Any]:
    """The YAML mapping of a calibration (see docs/calibration.md for every key)."""
    p = cal.provenance
    doc: Dict[str, Any] = {
        "format": FORMAT,
        "provenance": {
            "backend": p.backend,
            "world_size": p.world_size,
            "hostnames": list(p.hostnames),
            "torch_version": _opt_str(p.torch_version),
            "nccl_version": _opt_str(p.nccl_version),
            "gloo_version": _opt_str(p.gloo_version),
            "date": p.date,
            "command": p.command,
            "sources": [
                {"path": s.path, "sha256": s.sha256, "command": s.command} for s in p.sources
            ],
        },
        "levels": {},
    }
    if p.ranks_per_node:  # only jobs measured across hosts know their layout
        doc["provenance"]["ranks_per_node"] = list(p.ranks_per_node)
    for lv in cal.levels:
        doc["levels"][lv.level] = {
            "alpha_s": lv.alpha_s,
            "beta_Bps": lv.beta_Bps,
            "ranges": [
                {"min_size_bytes": r.min_size_bytes, "max_size_bytes": r.max_size_bytes,
                 "alpha_s": r.alpha_s, "beta_Bps": r.beta_Bps}
                for r in lv.ranges
            ],
            "fit": {
                "model": "T = 2(n-1)*alpha + 2(n-1)/n * S/beta",
                "weighting": "relative",
                "min_size_bytes": lv.fit_error.min_size_bytes,
                "points": lv.fit_error.points,
                "busbw_error_median_pct": _finite(lv.fit_error.median_pct),
                "busbw_error_max_pct": _finite(lv.fit_error.max_pct),
                "line_busbw_error_median_pct": _finite(lv.line_fit_error.median_pct),
                "line_busbw_error_max_pct": _finite(lv.line_fit_error.max_pct),
            },
            "table": {
                "columns": _Flow(TABLE_COLUMNS),
                "rows": [
                    _Flow([m.size_bytes, m.time_s, m.algbw, m.busbw, m.world_size]) for m in lv.table
                ],
            },
        }
    if not cal.levels:
        del doc["levels"]
    if cal.physical is not None:
        doc["physical"] = physical_to_dict(cal.physical, flow=_Flow)
    if cal.compute is not None:
        c = cal.compute
        doc["compute"] = {
            "parameters": c.parameters,
            "batch_size": c.batch_size,
            "forward_s": c.forward_s,
            "backward_s": c.backward_s,
            "per_rank": [
                {"rank": r.rank, "forward_s": r.forward_s, "backward_s": r.backward_s}
                for r in c.per_rank
            ],
        }
    return doc


class _Flow(list):
    """A list written in YAML flow style ([a, b, c]): one table row per line."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Flow, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def dump_calibration(cal: Calibration) -> str:
    """The calibration as YAML text (table rows one per line)."""
    header = (
        "# commsim calibration: all-reduce alpha/beta per link level + measured table"
        + (" + physical fit" if cal.physical is not None else "") + ".\n"
        "# Units: bytes, seconds, bytes/s. Format documented in docs/calibration.md.\n"
    )
    return header + yaml.dump(calibration_to_dict(cal), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def save_calibration(cal: Calibration, path: Union[str, os.PathLike]) -> None:
    """Write `cal` as YAML to `path` (atomically)."""
    atomic_write_text(path, dump_calibration(cal))


# What an error message shows of a value: a few items of a list or mapping, a few levels deep,
# the ends of a long string or number. A value from a hostile file can be an alias bomb (a
# list that holds itself a billion times over) or nested 50,000 deep; plain repr() would walk
# all of it.
class _Show(reprlib.Repr):
    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxtuple, self.maxdict = 2, 4, 4, 4
        self.maxstring, self.maxlong, self.maxother = 60, 40, 60

    def repr_int(self, x: int, level: int) -> str:
        # repr() of an int past 4300 digits raises (YAML makes one from 0x and 5,000 hex digits)
        if x.bit_length() > 128:
            return f"an integer of {math.floor(x.bit_length() * math.log10(2)) + 1} digits"
        return super().repr_int(x, level)


_SHOW = _Show()

# Largest integer accepted for a size, count or world size: every integer up to 2^53 is exact
# as a float, and the model computes in floats (size / time, S / B).
MAX_INTEGER = 2**53


def show(value: Any) -> str:
    """A short, bounded rendering of `value` for a one-line error message."""
    return _SHOW.repr(value)


class _Reader:
    """Strict reading of the YAML mapping: every error names the file and the key path."""

    def __init__(self, source: str):
        self.source = source

    def error(self, where: Optional[str], message: str) -> CalibrationError:
        return CalibrationError(message, self.source, where)

    def fail(self, where: Optional[str], expected: str, got: Any) -> CalibrationError:
        return self.error(where, f"expected {expected}, got {show(got)}")

    def mapping(self, value: Any, where: Optional[str], required: Sequence[str],
                optional: Sequence[str] = ()) -> Mapping:
        if not isinstance(value, Mapping):
            raise self.fail(where, "a mapping", value)
        unknown = [k for k in value if k not in required and k not in optional]
        if unknown:
            allowed = ", ".join(list(required) + list(optional))
            raise self.error(where, f"unknown key {show(unknown[0])} (allowed: {allowed})")
        missing = [k for k in required if k not in value]
        if missing:
            raise self.error(where, f"missing key {missing[0]!r}")
        return value

    def number(self, value: Any, where: str, minimum: float = 0.0, strict: bool = False,
               maximum: Optional[float] = None) -> float:
        given = value
        expected = f"a finite number {'>' if strict else '>='} {minimum:g}"
        if maximum is not None:
            expected += f" and <= {maximum:g}"
        if isinstance(value, str):
            # YAML 1.1 (PyYAML) reads 1e-6 without a dot as a string: take what float() reads
            try:
                value = float(value)
            except ValueError:
                raise self.fail(where, "a finite number", given) from None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.fail(where, expected, given)
        try:
            value = float(value)  # an integer of 400 digits is past any float
        except OverflowError:
            raise self.fail(where, expected, given) from None
        if not (math.isfinite(value) and (value > minimum if strict else value >= minimum)
                and (maximum is None or value <= maximum)):
            raise self.fail(where, expected, given)
        return value

    def integer(self, value: Any, where: str, minimum: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise self.fail(where, f"an integer >= {minimum}", value)
        if value > MAX_INTEGER:
            raise self.fail(where, f"an integer <= 2^53 ({MAX_INTEGER})", value)
        return int(value)

    def items(self, value: Any, where: str) -> list:
        """An optional list (absent or null: empty)."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(where, "a list", value)
        return value

    def opt_str(self, value: Any, where: str) -> Optional[str]:
        if value is None:
            return None
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise self.fail(where, "a string or null", value)
        return str(value)

    def str_list(self, value: Any, where: str) -> Tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(where, "a list of strings", value)
        return tuple(value)


def calibration_from_dict(doc: Any, source: str = "<calibration>") -> Calibration:
    """Validate a parsed YAML mapping and build the Calibration (CalibrationError on any defect)."""
    r = _Reader(source)
    top = r.mapping(doc, None, ["format", "provenance"], ["levels", "compute", "physical"])
    if "levels" not in top and top.get("physical") is None:
        raise r.error(None, "missing key 'levels' (a calibration needs link levels or a physical fit)")
    if top["format"] != FORMAT:
        raise r.fail("format", repr(FORMAT), top["format"])

    pv = r.mapping(
        top["provenance"], "provenance", ["backend", "world_size"],
        ["hostnames", "torch_version", "nccl_version", "gloo_version", "date", "command", "sources", "ranks_per_node"],
    )
    sources = []
    for i, s in enumerate(r.items(pv.get("sources"), "provenance.sources")):
        where = f"provenance.sources[{i}]"
        s = r.mapping(s, where, ["path"], ["sha256", "command"])
        path = r.opt_str(s["path"], where + ".path")
        if not path:
            raise r.fail(where + ".path", "a non-empty string", s["path"])
        sources.append(SourceFile(path, r.opt_str(s.get("sha256"), where + ".sha256"),
                                  r.opt_str(s.get("command"), where + ".command")))
    backend = r.opt_str(pv["backend"], "provenance.backend")
    if not backend:
        raise r.fail("provenance.backend", "a non-empty string", pv["backend"])
    prov = Provenance(
        backend=backend,
        world_size=r.integer(pv["world_size"], "provenance.world_size", 1),
        hostnames=r.str_list(pv.get("hostnames") or [], "provenance.hostnames"),
        torch_version=r.opt_str(pv.get("torch_version"), "provenance.torch_version"),
        nccl_version=r.opt_str(pv.get("nccl_version"), "provenance.nccl_version"),
        gloo_version=r.opt_str(pv.get("gloo_version"), "provenance.gloo_version"),
        date=r.opt_str(pv.get("date"), "provenance.date"),
        command=r.opt_str(pv.get("command"), "provenance.command"),
        sources=tuple(sources),
        ranks_per_node=_ranks_per_node(r, pv),
    )

    physical = physical_from_dict(top["physical"], source) if top.get("physical") is not None else None
    levels_doc = top.get("levels", {})
    if physical is not None and levels_doc == {}:
        pass  # a physical fit alone (logs the per-level table fit cannot use)
    elif not isinstance(levels_doc, Mapping) or not levels_doc:
        raise r.fail("levels", f"a non-empty mapping with keys among {', '.join(LEVELS)}", levels_doc)
    levels = []
    for name, body in levels_doc.items():
        where = f"levels.{name}"
        if name not in LEVELS:
            raise r.fail("levels", f"level names among {', '.join(LEVELS)}", name)
        body = r.mapping(body, where, ["alpha_s", "beta_Bps", "table"], ["ranges", "fit"])
        alpha = r.number(body["alpha_s"], where + ".alpha_s", maximum=MAX_TIME)
        beta = r.number(body["beta_Bps"], where + ".beta_Bps", minimum=MIN_RATE)
        table = _read_table(r, body["table"], where + ".table")
        ranges = _read_ranges(r, body.get("ranges"), where + ".ranges", alpha, beta, table)
        if "fit" in body:  # informative; recomputed from the parameters and the table
            r.mapping(body["fit"], where + ".fit", [], [
                "model", "weighting", "min_size_bytes", "points", "busbw_error_median_pct",
                "busbw_error_max_pct", "line_busbw_error_median_pct", "line_busbw_error_max_pct"])
        levels.append(make_link(name, alpha, beta, table, ranges))
    if "flat" in levels_doc and len(levels_doc) > 1:
        raise r.error("levels", "'flat' cannot be combined with intra_node/inter_node")

    compute = None
    if top.get("compute") is not None:
        c = r.mapping(top["compute"], "compute", ["parameters", "batch_size", "forward_s", "backward_s"], ["per_rank"])
        per_rank = []
        for i, pr in enumerate(r.items(c.get("per_rank"), "compute.per_rank")):
            w = f"compute.per_rank[{i}]"
            pr = r.mapping(pr, w, ["rank", "forward_s", "backward_s"])
            per_rank.append(RankCompute(r.integer(pr["rank"], w + ".rank", 0),
                                        r.number(pr["forward_s"], w + ".forward_s"),
                                        r.number(pr["backward_s"], w + ".backward_s")))
        compute = ComputeTiming(
            parameters=r.integer(c["parameters"], "compute.parameters", 1),
            batch_size=r.integer(c["batch_size"], "compute.batch_size", 1),
            forward_s=r.number(c["forward_s"], "compute.forward_s"),
            backward_s=r.number(c["backward_s"], "compute.backward_s"),
            per_rank=tuple(per_rank),
        )
    return Calibration(tuple(levels), prov, compute, physical)


def _read_ranges(r: _Reader, doc: Any, where: str, alpha: float, beta: float,
                 table: Tuple[Measurement, ...]) -> Tuple[SizeRange, ...]:
    """Size ranges; absent means one range with the level's alpha/beta from the smallest size."""
    if doc is None:
        return (SizeRange(min(m.size_bytes for m in table), alpha, beta, max(m.size_bytes for m in table)),)
    if not isinstance(doc, list) or not doc:
        raise r.fail(where, "a non-empty list of {min_size_bytes, alpha_s, beta_Bps}", doc)
    out = []
    for i, item in enumerate(doc):
        w = f"{where}[{i}]"
        item = r.mapping(item, w, ["min_size_bytes", "alpha_s", "beta_Bps"], ["max_size_bytes"])
        lo = r.integer(item["min_size_bytes"], w + ".min_size_bytes", 1)
        hi = item.get("max_size_bytes")
        if hi is not None:
            hi = r.integer(hi, w + ".max_size_bytes", lo)
        out.append(SizeRange(lo, r.number(item["alpha_s"], w + ".alpha_s", maximum=MAX_TIME),
                             r.number(item["beta_Bps"], w + ".beta_Bps", minimum=MIN_RATE), hi))
    starts = [x.min_size_bytes for x in out]
    if starts != sorted(set(starts)):
        raise r.fail(where, "ranges in increasing min_size_bytes order", starts)
    # disjoint: a size inside two ranges would have two models (range_for takes one silently)
    for i, (a, b) in enumerate(zip(out, out[1:])):
        if a.max_size_bytes is not None and not a.max_size_bytes < b.min_size_bytes:
            raise r.fail(f"{where}[{i}].max_size_bytes",
                         f"less than the next range's min_size_bytes {b.min_size_bytes} (ranges must not overlap)",
                         a.max_size_bytes)
    return tuple(out)


def _read_table(r: _Reader, doc: Any, where: str) -> Tuple[Measurement, ...]:
    t = r.mapping(doc, where, ["columns", "rows"])
    if t["columns"] != TABLE_COLUMNS:
        raise r.fail(where + ".columns", str(TABLE_COLUMNS), t["columns"])
    rows = t["rows"]
    if not isinstance(rows, list) or not rows:
        raise r.fail(where + ".rows", "a non-empty list of rows", rows)
    out = []
    for i, row in enumerate(rows):
        w = f"{where}.rows[{i}]"
        if not isinstance(row, list) or len(row) != len(TABLE_COLUMNS):
            raise r.fail(w, f"a list of {len(TABLE_COLUMNS)} numbers {TABLE_COLUMNS}", row)
        size = r.integer(row[0], w + "[0] (size_bytes)", 1)
        time = r.number(row[1], w + "[1] (time_s)", strict=True, maximum=MAX_TIME)
        n = r.integer(row[4], w + "[4] (world_size)", 2)
        m = Measurement(size, time, n)
        if not math.isfinite(m.algbw):  # 1e-320 s is a positive time, but size/time overflows
            raise r.fail(w + "[1] (time_s)", "a time for which size/time is a finite bandwidth", row[1])
        # the bandwidth columns are for readers; a hand edit that breaks them is caught here
        for col, value, want in ((2, row[2], m.algbw), (3, row[3], m.busbw)):
            got = r.number(value, f"{w}[{col}] ({TABLE_COLUMNS[col]})")
            if abs(got - want) > 1e-6 * want:
                raise r.fail(f"{w}[{col}] ({TABLE_COLUMNS[col]})", f"{want!r} (from size, time, world_size)", value)
        out.append(m)
    keys = [(m.world_size, m.size_bytes) for m in out]
    if keys != sorted(set(keys)):
        raise r.error(where + ".rows", "rows must be sorted by (world_size, size_bytes) without repeats")
    return tuple(out)


def _unconstructible(exc: BaseException) -> str:
    """What a value the YAML reader could not build was, for the one-line error."""
    text = " ".join(str(exc).split())
    if "integer string conversion" in text:  # Python's int() refuses > sys.get_int_max_str_digits()
        return "an integer with too many digits"
    if isinstance(exc, (ValueError, OverflowError)) and text:
        return f"a value that does not fit its type ({text})"
    return "a value that does not fit its explicit tag (e.g. !!timestamp on text that is no date)"


def load_calibration(path: Union[str, os.PathLike]) -> Calibration:
    """Read and validate a calibration YAML file (CalibrationError with a one-line message).

    The file is read and parsed by :mod:`commsim.yamlio`, the reader of every input file
    (UTF-8, safe YAML, duplicate keys refused)."""
    source = os.fspath(path)
    try:
        text = read_text_file(source, "a calibration YAML file (commsim calibrate writes them)")
    except InputError as err:
        detail = err.message
        if detail.startswith("cannot read the file: "):  # said once, in this message's own words
            detail = detail[len("cannot read the file: "):]
        raise CalibrationError(f"cannot read calibration file: {detail}", err.source, err.path) from None
    try:
        doc = parse_yaml(text, source)
    except InputError as err:
        raise CalibrationError(err.message, err.source, err.path) from None
    except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as exc:
        # PyYAML's constructors raise these for an explicit tag on content it cannot hold
        # (`!!int abc`, `!!timestamp x`, `!!bool maybe`) and for integers past Python's digit limit
        raise CalibrationError(f"invalid YAML: {_unconstructible(exc)}", source) from None
    return calibration_from_dict(doc, source)
