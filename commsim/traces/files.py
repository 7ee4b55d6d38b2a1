"""Reading trace files: gzip or plain, JSON with its failures named, format detection.

A profiler trace is one JSON document (Kineto's Chrome trace format), possibly gzipped; a
Flight Recorder dump is a pickle (or, from ``_dump_fr_trace_json``, JSON). What goes wrong
with real files is named in one line: a truncated gzip or JSON file (the job died while
writing it), two documents concatenated (``cat rank*.json > all.json``), a file that is
neither format.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import zlib
from pathlib import Path
from typing import Any, Tuple

from commsim.traces.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
PICKLE_PROTO = 0x80  # first byte of a pickle of protocol >= 2


# The most bytes a trace file may hold, or unzip to. Profiler traces of real jobs run from
# megabytes to a few hundred; past this, parsing the JSON would need tens of GiB of memory,
# and a gzip bomb (a few MiB unzipping to terabytes) or /dev/zero would fill it.
MAX_TRACE_BYTES = 2 * 1024**3


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _too_big(path: str, what: str) -> TraceError:
    return TraceError(path, None, f"{what} more than {MAX_TRACE_BYTES:,} bytes, the most a trace may hold "
                                  "(record fewer steps per file)")


def read_bytes(path: str) -> bytes:
    """The file's bytes, gunzipped when it is gzip (by content, not by name). A device, FIFO
    or socket is refused (reading /dev/zero never ends; a FIFO blocks for a writer), as is a
    file that holds, or unzips to, more than :data:`MAX_TRACE_BYTES`."""
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError
        if not stat.S_ISREG(info.st_mode):
            raise TraceError(path, None, f"is {_kind(info.st_mode)}, expected a trace file (a regular file)")
        if info.st_size > MAX_TRACE_BYTES:
            raise _too_big(path, "holds")
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise TraceError(path, None, "file not found, expected a profiler trace or Flight Recorder dump") from None
    except IsADirectoryError:
        raise TraceError(path, None, "is a directory, expected a trace file (give the files: DIR/*.json.gz)") from None
    except OSError as err:
        raise TraceError(path, None, f"cannot read the file: {err.strerror or err}") from None
    if raw[:2] == GZIP_MAGIC:
        try:
            # read one byte past the limit rather than all of it: a bomb stops there
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as unzipped:
                data = unzipped.read(MAX_TRACE_BYTES + 1)
        except EOFError:
            raise TraceError(path, None, "truncated gzip file (it ends before the end-of-stream marker): "
                                         "was it copied while still being written?") from None
        except (OSError, zlib.error) as err:
            raise TraceError(path, None, f"corrupt gzip file: {err}") from None
        if len(data) > MAX_TRACE_BYTES:
            raise _too_big(path, "unzips to")
        return data
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
    except ValueError:  # not a JSONDecodeError: Python's int() refuses a number of over 4,300 digits
        raise TraceError(path, None, "invalid JSON for a trace: a number of more than 4,300 digits "
                                     "(Python reads no longer integer)") from None
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
