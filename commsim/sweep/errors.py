"""What a sweep raises: bad input (exit 2), an interruption (exit 130), a failed run (exit 3)."""

from __future__ import annotations

import errno as _errno
from pathlib import Path
from typing import Optional

from commsim.errors import InputError
from commsim.units import counted


class SweepError(InputError):
    """A sweep that cannot start or continue (bad grid, output directory in use or unwritable,
    no Dask). One line, ``SOURCE: KEY: MESSAGE`` like the loader's errors."""

    def __init__(self, source: str, path: Optional[str], message: str):
        super().__init__(source, path, message)


class SweepLocked(SweepError):
    """Another sweep holds the output directory; ``holder`` is what it recorded (pid, host)."""

    def __init__(self, out_dir: Path, holder: str):
        super().__init__(
            f"-o {out_dir}", None,
            f"is in use by another commsim sweep ({holder}); wait for it to finish or choose another directory",
        )
        self.holder = holder


def os_error_text(exc: OSError) -> str:
    """``No space left on device (errno 28, ENOSPC)``: the reason and the errno, for one line."""
    code = exc.errno
    name = _errno.errorcode.get(code, "") if code is not None else ""
    reason = exc.strerror or str(exc)
    return f"{reason} (errno {code}{', ' + name if name else ''})" if code is not None else reason


class SweepWriteError(SweepError):
    """Writing a sweep output file failed (a full or read-only filesystem): the file and errno.

    ``summary`` is filled in by the runner with what is saved, so the one line also says how to
    go on."""

    def __init__(self, path: Path, exc: OSError, summary: str = ""):
        self.file, self.os_error = Path(path), exc
        message = f"cannot write: {os_error_text(exc)}"
        super().__init__(str(path), None, f"{message}; {summary}" if summary else message)

    def with_summary(self, summary: str) -> "SweepWriteError":
        return SweepWriteError(self.file, self.os_error, summary)


class SweepInterrupted(Exception):
    """The sweep was interrupted (Ctrl-C or SIGTERM); `done` of `total` points are saved in the
    output directory. Not an input error: the CLI exits 130."""

    def __init__(self, done: int, total: int, out_dir: Path, note: str = ""):
        super().__init__(
            f"interrupted: {done} of {counted(total, 'point')} saved in {out_dir}{'; ' + note if note else ''}; "
            "rerun with --resume to complete the sweep"
        )
        self.done, self.total, self.out_dir = done, total, out_dir


class SweepRunFailed(Exception):
    """A worker process died under the sweep (killed by a signal or the OOM killer): a run
    failure, not bad input, so the CLI exits 3. What finished is saved."""

    def __init__(self, reason: str, done: int, total: int, out_dir: Path):
        super().__init__(
            f"{reason}; {done} of {counted(total, 'point')} saved in {out_dir}; rerun with --resume to complete the sweep"
        )
        self.done, self.total, self.out_dir = done, total, out_dir
