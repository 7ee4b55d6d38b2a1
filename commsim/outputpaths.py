"""Output paths, checked before any work: shared by the ``commsim`` commands and the
``validate`` entry points (the layering keeps ``validate/`` from importing the CLI).

A bad output path (empty, a folder that does not exist or cannot be written, a directory named
as the file or a path ending in '/', an input of the command itself) is an
:class:`OutputPathError`, one line naming the option, raised before the simulation or the
measurement runs, not after it. An output that names an existing device or pipe (``/dev/null``,
``/dev/stdout``, a FIFO) is written into, not replaced.
"""

from __future__ import annotations

import os
import stat
from typing import Mapping, Optional, Sequence, Union


class OutputPathError(ValueError):
    """An output path that cannot be written (one line: the option, the path, why)."""


STDOUT = "-"

# An input of a command: a path, several (TRACE...), or None when not given.
InputPaths = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]], None]


def is_stdout(path: Optional[str]) -> bool:
    """Whether an output option names stdout (``-``)."""
    return path is not None and os.fspath(path) == STDOUT


def is_stream(path: str) -> bool:
    """Whether `path` (its symlinks followed) is an existing device, FIFO or socket: written
    into, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def check_output_path(path: str, option: str) -> None:
    """Fail (exit 2, one line) unless `path` can be written: ``-``, a writable device or pipe,
    or a file path whose folder exists and is writable and which is not itself a directory."""
    if is_stdout(path):
        return
    path = os.fspath(path)
    if not path:  # the commands test their outputs by truth value: an empty path wrote nothing, silently
        raise OutputPathError(f"{option}: expected a file path or '-', got an empty path")
    if is_stream(path):
        if not os.access(path, os.W_OK):
            raise OutputPathError(f"{option} {path}: cannot write here: permission denied")
        return
    if os.path.isdir(path):
        raise OutputPathError(f"{option} {path}: cannot write here: it is a directory (expected a file path)")
    if path.endswith(os.sep) or (os.altsep and path.endswith(os.altsep)):
        # a folder's path that does not exist (yet): the atomic writer resolves it to the file
        # `path` without its slash, which writes a file where a folder was asked for
        raise OutputPathError(f"{option} {path}: cannot write here: it names a folder (ends in '{path[-1]}'; expected a file path)")
    # the atomic writer replaces what a symlink points to: its folder is the one to check (a
    # dangling link into a missing folder failed only after the run)
    folder = os.path.dirname(os.path.realpath(path) if os.path.islink(path) else os.path.abspath(path))
    if not os.path.isdir(folder):
        what = "is not a directory" if os.path.exists(folder) else "does not exist"
        raise OutputPathError(f"{option} {path}: cannot write here: the folder {folder} {what}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputPathError(f"{option} {path}: cannot write here: the folder {folder} is not writable")


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (a symlink or hard link included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return os.path.realpath(a) == os.path.realpath(b)


def check_not_an_input(path: str, option: str, inputs: Mapping[str, InputPaths]) -> None:
    """Refuse `path` where it is one of `inputs` (what -> a path, several, or None), which the
    atomic write would replace by the output."""
    if is_stream(path):  # /dev/null and pipes are written into, never replaced
        return
    for what, given in inputs.items():
        for source in ([given] if isinstance(given, (str, os.PathLike)) else given or ()):
            if source is not None and not is_stdout(source) and _same_file(path, os.fspath(source)):
                named = "" if os.fspath(source) == path else f", {os.fspath(source)}"  # a link to it, or another spelling
                raise OutputPathError(f"{option} {path}: expected an output path other than the inputs, got the {what} itself{named} "
                     "(it would be overwritten)")


def check_outputs(outputs: Mapping[str, Optional[str]], inputs: Optional[Mapping[str, InputPaths]] = None) -> bool:
    """Check every given output (option name -> path or None) before any work.

    Returns True when one of them is ``-`` (stdout is taken: print the report to stderr).
    Two outputs cannot share a path, at most one can be stdout, and none can be one of the
    command's `inputs` (what -> a path, a list of paths or None: ``{"SCENARIO": path}``), which
    the atomic write would replace by the output."""
    given = {opt: os.fspath(p) for opt, p in outputs.items() if p is not None}
    to_stdout = [opt for opt, p in given.items() if p == STDOUT]
    if len(to_stdout) > 1:
        raise OutputPathError(f"{' and '.join(to_stdout)} both name stdout ('-'): give at most one of them '-'")
    seen = {}
    for opt, path in given.items():
        if path == STDOUT:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise OutputPathError(f"{seen[key]} and {opt} both name {path}: give each output its own file")
        seen[key] = opt
        check_output_path(path, opt)
        check_not_an_input(path, opt, inputs or {})
    return bool(to_stdout)
