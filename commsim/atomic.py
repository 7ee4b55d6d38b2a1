"""Atomic file writes: a temporary sibling, then a rename.

An existing file is never left half-written (os.replace is atomic on POSIX and Windows), and a
failed write leaves no temporary behind.
"""

from __future__ import annotations

import os
import tempfile
from typing import Union


def atomic_write_text(path: Union[str, os.PathLike], text: str) -> None:
    """Write `text` (UTF-8) to `path` via a temporary file in the same folder and os.replace."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Union[str, os.PathLike], data: bytes) -> None:
    """Write `data` to `path` via a temporary file in the same folder and os.replace."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; an output file gets the usual mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
