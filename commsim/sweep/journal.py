"""The sweep journal, ``points.jsonl``: one JSON line per finished point, keyed by fingerprint.

It is the durable record of a sweep: each line is appended and fsync'ed as its point finishes,
so an interrupted sweep loses at most the points in flight, and ``--resume`` reads it back. A
point whose resolved scenario is already in the journal is not run again.

A kill or a full disk in the middle of an append leaves a torn last line. Before appending, the
journal is repaired so that it ends at a line boundary again: a torn line that still holds a
whole record gets its newline back, any other is cut off. An append that fails is rolled back to
where it started. (Journals written before this repair existed may hold a torn fragment glued
to the next record on one line; :func:`read_journal` recovers that record.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

from commsim.sweep.errors import SweepError, SweepWriteError, os_error_text

JOURNAL = "points.jsonl"

# Every record starts like this (json.dumps with these separators, "key" first).
_RECORD_START = b'{"key":'
_TAIL_BLOCK = 1 << 16


def _parse_record(line: bytes) -> Optional[Tuple[str, Dict[str, Any]]]:
    try:
        record = json.loads(line)
        key, summary = record["key"], record["summary"]
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: '[' nested thousands deep
        return None
    if not isinstance(key, str) or not isinstance(summary, dict):
        return None
    return key, summary


def _recover(line: bytes) -> Optional[Tuple[str, Dict[str, Any]]]:
    """A record from a line, or from the part of it after a torn fragment glued on its front."""
    found = _parse_record(line)
    start = line.rfind(_RECORD_START)
    if found is None and start > 0:
        found = _parse_record(line[start:])
    return found


def read_journal(out_dir: Path) -> Dict[str, Dict[str, Any]]:
    """Finished points by fingerprint (the first record of each wins). Lines that hold no
    record (a torn last line) are skipped."""
    done: Dict[str, Dict[str, Any]] = {}
    path = Path(out_dir) / JOURNAL
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return done
    except OSError as exc:
        raise SweepError(f"-o {out_dir}", JOURNAL, f"cannot read the journal: {os_error_text(exc)}") from None
    with fh:
        for line in fh:
            found = _recover(line)
            if found is not None:
                done.setdefault(*found)
    return done


def encode_record(key: str, params: Mapping[str, Any], summary: Mapping[str, Any]) -> bytes:
    """One journal line (with its newline)."""
    line = json.dumps(
        {"key": key, "params": dict(params), "summary": summary},
        separators=(",", ":"), default=str,  # YAML may give dates; keep them as text
    )
    return (line + "\n").encode("utf-8")


def _read_at(fd: int, offset: int, size: int) -> bytes:
    # lseek + read rather than os.pread, which Windows lacks; appends ignore the offset (O_APPEND).
    os.lseek(fd, offset, os.SEEK_SET)
    chunks = []
    while size > 0:
        chunk = os.read(fd, size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _last_line_start(fd: int, size: int) -> int:
    """Offset just past the last newline of the file (0 if it has none), read from the end."""
    pos = size
    while pos > 0:
        start = max(0, pos - _TAIL_BLOCK)
        block = _read_at(fd, start, pos - start)
        i = block.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def repair_tail(fd: int) -> str:
    """Make the file end at a line boundary; what was done: "", "newline added" or "cut N bytes"."""
    size = os.fstat(fd).st_size
    start = _last_line_start(fd, size)
    if start == size:
        return ""
    tail = _read_at(fd, start, size - start)
    if _parse_record(tail) is not None:  # whole record, only its newline lost
        os.write(fd, b"\n")
        return "newline added"
    os.ftruncate(fd, start)
    return f"cut {size - start} bytes"


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # not every platform or filesystem can fsync a folder
    finally:
        os.close(fd)


class Journal:
    """Appends records to ``points.jsonl``, each fsync'ed before :meth:`append` returns.

    Opening repairs a torn last line (the caller holds the directory's lock, so no one else is
    writing). ``repaired`` says what the repair did ("" when the journal was whole)."""

    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / JOURNAL
        created = not self.path.exists()
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
        except OSError as exc:
            raise SweepWriteError(self.path, exc) from None
        try:
            self.repaired = repair_tail(self._fd)
            if self.repaired:
                os.fsync(self._fd)
        except OSError as exc:
            os.close(self._fd)
            raise SweepWriteError(self.path, exc) from None
        if created:
            _fsync_folder(self.path.parent)  # the new file's name, not only its data

    def append(self, key: str, params: Mapping[str, Any], summary: Mapping[str, Any]) -> None:
        """Append one record and fsync it; on failure (a full disk) roll the file back to where
        it was and raise SweepWriteError."""
        data = memoryview(encode_record(key, params, summary))
        size = os.fstat(self._fd).st_size
        try:
            while data:
                data = data[os.write(self._fd, data):]
            os.fsync(self._fd)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, size)  # frees space, so it works on a full disk
            except OSError:
                pass  # the next open repairs the torn line instead
            raise SweepWriteError(self.path, exc) from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
