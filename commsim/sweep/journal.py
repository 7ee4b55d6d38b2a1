"""The sweep journal, ``points.jsonl``: one JSON line per finished point, keyed by fingerprint.

It is the durable record of a sweep: each line is appended and fsync'ed as its point finishes,
so an interrupted sweep loses at most the points in flight, and ``--resume`` reads it back. A
point whose resolved scenario is already in the journal is not run again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Mapping

from commsim.sweep.errors import SweepError

JOURNAL = "points.jsonl"


def read_journal(out_dir: Path) -> Dict[str, Dict[str, Any]]:
    """Finished points by fingerprint. A truncated last line (a kill mid-write) is ignored."""
    done: Dict[str, Dict[str, Any]] = {}
    path = Path(out_dir) / JOURNAL
    if not path.exists():
        return done
    try:
        fh = open(path, encoding="utf-8")
    except OSError as exc:
        raise SweepError(f"-o {out_dir}", JOURNAL, f"cannot read the journal: {exc.strerror or exc}") from None
    with fh:
        for line in fh:
            try:
                record = json.loads(line)
                key, summary = record["key"], record["summary"]
            except (ValueError, KeyError, TypeError):
                continue
            done.setdefault(key, summary)
    return done


def encode_record(key: str, params: Mapping[str, Any], summary: Mapping[str, Any]) -> bytes:
    """One journal line (with its newline)."""
    line = json.dumps(
        {"key": key, "params": dict(params), "summary": summary},
        separators=(",", ":"), default=str,  # YAML may give dates; keep them as text
    )
    return (line + "\n").encode("utf-8")


class Journal:
    """Appends records to ``points.jsonl``, each fsync'ed before :meth:`append` returns."""

    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / JOURNAL
        try:
            self._fh = open(self.path, "a", encoding="utf-8")
        except OSError as exc:
            raise SweepError(f"-o {out_dir}", JOURNAL, f"cannot append to the journal: {exc.strerror or exc}") from None

    def append(self, key: str, params: Mapping[str, Any], summary: Mapping[str, Any]) -> None:
        self._fh.write(encode_record(key, params, summary).decode("utf-8"))
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()
