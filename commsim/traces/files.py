"""Reading trace files: gzip or plain, JSON with its failures named, format detection.

A profiler trace is one JSON document (Kineto's Chrome trace format), possibly gzipped; a
Flight Recorder dump is a pickle (or, from ``_dump_fr_trace_json``, JSON). What goes wrong
with real files is named in one line: a truncated gzip or JSON file (the job died while
writing it), two documents concatenated (``cat rank*.json > all.json``), a file that is
neither format.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any, Tuple

from commsim.traces.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
PICKLE_PROTO = 0x80  # first byte of a pickle of protocol >= 2


def read_bytes(path: str) -> bytes:
    """The file's bytes, gunzipped when it is gzip (by content, not by name)."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise TraceError(path, None, "file not found, expected a profiler trace or Flight Recorder dump") from None
    except IsADirectoryError:
        raise TraceError(path, None, "is a directory, expected a trace file (give the files: DIR/*.json.gz)") from None
    except OSError as err:
        raise TraceError(path, None, f"cannot read the file: {err.strerror or err}") from None
    if raw[:2] == GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except EOFError:
            raise TraceError(path, None, "truncated gzip file (it ends before the end-of-stream marker): "
                                         "was it copied while still being written?") from None
        except (OSError, zlib.error) as err:
            raise TraceError(path, None, f"corrupt gzip file: {err}") from None
    return raw


def parse_json(data: bytes, path: str) -> Any:
    """One JSON document; truncated or concatenated documents are named as such."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise TraceError(path, None, f"not UTF-8 JSON: byte 0x{data[err.start]:02x} at offset {err.start}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":
            raise TraceError(path, None, f"more than one JSON document (a second one starts at line {err.lineno} "
                                         f"column {err.colno}): expected one rank's trace per file") from None
        if err.pos >= len(text.rstrip()) - 1 or err.msg.startswith("Unterminated"):
            raise TraceError(path, None, f"truncated JSON: the document ends inside a value at line {err.lineno} "
                                         f"column {err.colno} (was the trace still being written?)") from None
        raise TraceError(path, None, f"invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    except RecursionError:
        raise TraceError(path, None, "invalid JSON: nested too deeply") from None


def sniff(data: bytes, path: str) -> Tuple[str, Any]:
    """("kineto" | "flight-recorder", document). Pickles go to the Flight Recorder's
    restricted unpickler; JSON is told apart by its keys."""
    from commsim.traces.flight_recorder import safe_unpickle

    if data[:1] and data[0] == PICKLE_PROTO:
        return "flight-recorder", safe_unpickle(data, path)
    head = data.lstrip()[:1]
    if head not in (b"{", b"["):
        raise TraceError(path, None, "neither a profiler trace (JSON) nor a Flight Recorder dump (pickle or JSON)")
    doc = parse_json(data, path)
    if isinstance(doc, dict) and "entries" in doc and "traceEvents" not in doc:
        return "flight-recorder", doc
    if isinstance(doc, list) or (isinstance(doc, dict) and "traceEvents" in doc):
        return "kineto", doc
    keys = ", ".join(sorted(map(str, doc))[:6]) if isinstance(doc, dict) else type(doc).__name__
    raise TraceError(path, None, f"a JSON document that is no trace: expected 'traceEvents' (profiler) or "
                                 f"'entries' (Flight Recorder), found {keys or 'nothing'}")
