"""Atomic file writes: a temporary sibling, fsync, rename over the target, fsync of the folder.

Readers see the old file or the new one, never a half-written one (``os.replace`` is atomic on
POSIX and Windows), and after a crash or power loss the new file is there whole once the call has
returned. What a write keeps and what it cleans:

- **Mode**: a new file gets the usual mode (0666 less the umask, the kernel applies it); an
  existing file keeps its mode (a 0600 file stays 0600) and, where permitted, its owner.
- **Symlinks**: writing to a symlink writes its target (the link stays a link).
- **Temporaries** are named ``.NAME.XXXXXXXX.tmp`` beside the target and removed if the write
  fails. One left behind by a writer that was killed (SIGKILL, power loss) is removed by the
  next write of the same file. A temporary another writer is still filling is held under an
  exclusive ``flock`` for as long as it exists, so the clean-up never takes a live one.
"""

from __future__ import annotations

import os
import re
import stat
from contextlib import suppress
from typing import Optional, Union

try:
    import fcntl
except ImportError:  # Windows: an open file cannot be removed there, which protects it anyway
    fcntl = None  # type: ignore[assignment]

# The same 8-character alphabet as tempfile.mkstemp, so temporaries left by earlier versions
# (which used mkstemp with this prefix and suffix) are recognised too.
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789_"
_RANDOM_CHARS = 8
_CREATE_ATTEMPTS = 100


def _temp_name(base: str) -> str:
    # os.urandom rather than the secrets module, whose import (hmac, hashlib, random) costs every
    # command's start-up a few ms; a name needs to be unlikely to collide, not secret
    return f".{base}.{''.join(_ALPHABET[b % len(_ALPHABET)] for b in os.urandom(_RANDOM_CHARS))}.tmp"


def _is_our_temp(name: str, base: str) -> bool:
    return re.fullmatch(re.escape(f".{base}.") + f"[{_ALPHABET}]{{{_RANDOM_CHARS}}}" + r"\.tmp", name) is not None


def atomic_write_text(path: Union[str, os.PathLike], text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically (see the module docstring)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Union[str, os.PathLike], data: bytes) -> None:
    """Write `data` to `path` atomically (see the module docstring).

    Raises the OSError of the step that failed (a missing folder, a full or read-only
    filesystem); the target is then unchanged and no temporary is left."""
    # A device, FIFO or socket (/dev/null, /dev/stdout, a named pipe): write into it. A rename
    # over it would replace the device node with a regular file (as root, /dev/null itself).
    # Judged and opened by the path as given: /dev/stdout on a pipe is a /proc/self/fd link
    # that realpath turns into a name that does not exist ('/proc/PID/fd/pipe:[N]'), which
    # failed as "No such file or directory"; the kernel's own lookup follows it.
    try:
        given = os.stat(path)
    except FileNotFoundError:
        given = None
    if given is not None and not (stat.S_ISREG(given.st_mode) or stat.S_ISDIR(given.st_mode)):
        with open(path, "wb") as fh:
            fh.write(data)
        return
    target = os.path.realpath(os.fspath(path))  # through symlinks: replace the file, not the link
    folder, base = os.path.split(target)
    try:
        existing: Optional[os.stat_result] = os.stat(target)
    except FileNotFoundError:
        existing = None
    remove_stale_temps(folder, base)
    fd, tmp = _create_locked_temp(folder, base)
    try:
        try:
            if existing is not None:
                _copy_owner_and_mode(fd, tmp, existing)  # before any data lands in the file
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            os.replace(tmp, target)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp)
            raise
    finally:
        os.close(fd)  # closing also drops the flock
    _fsync_folder(folder)


def _create_locked_temp(folder: str, base: str):
    """Create and flock a new temporary beside the target; (fd, path)."""
    for _ in range(_CREATE_ATTEMPTS):
        tmp = os.path.join(folder, _temp_name(base))
        try:
            # 0o666: the kernel applies the umask, so a new output gets the usual mode.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        except FileExistsError:
            continue
        if fcntl is None:
            return fd, tmp
        fcntl.flock(fd, fcntl.LOCK_EX)
        # Another writer's clean-up may have taken the file between its creation and the lock.
        if os.fstat(fd).st_nlink > 0:
            return fd, tmp
        os.close(fd)
    raise FileExistsError(f"no free temporary name for {os.path.join(folder, base)} after {_CREATE_ATTEMPTS} tries")


def _copy_owner_and_mode(fd: int, tmp: str, existing: os.stat_result) -> None:
    mode = stat.S_IMODE(existing.st_mode)
    if not hasattr(os, "fchmod"):  # Windows: only the read-only bit exists
        os.chmod(tmp, mode)
        return
    own = os.fstat(fd)
    if (own.st_uid, own.st_gid) != (existing.st_uid, existing.st_gid):
        with suppress(PermissionError):  # only root (or the owner, for the group) may
            os.fchown(fd, existing.st_uid, existing.st_gid)
    os.fchmod(fd, mode)  # after the chown, which may clear set-id bits


def remove_stale_temps(folder: str, base: str) -> int:
    """Remove the temporaries of `base` in `folder` that no writer holds; how many were removed."""
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    removed = 0
    for name in names:
        if not _is_our_temp(name, base):
            continue
        full = os.path.join(folder, name)
        if fcntl is None:
            with suppress(OSError):
                os.unlink(full)
                removed += 1
            continue
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live writer holds it
            with suppress(OSError):
                if os.path.samestat(os.lstat(full), st):
                    os.unlink(full)
                    removed += 1
        finally:
            os.close(fd)
    return removed


def _fsync_folder(folder: str) -> None:
    """Make the rename durable. Not every platform or filesystem can fsync a folder."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        with suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
