"""commsim.atomic: modes, symlinks, stale temporaries, fsync, failure clean-up, concurrency."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from commsim import atomic
from commsim.atomic import atomic_write_bytes, atomic_write_text

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX modes, symlinks and flock")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def temps(folder: Path):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_writes_text_and_bytes(tmp_path):
    atomic_write_text(tmp_path / "a.json", "héllo\n")
    assert (tmp_path / "a.json").read_bytes() == "héllo\n".encode()
    atomic_write_bytes(tmp_path / "a.json", b"\x00\x01")
    assert (tmp_path / "a.json").read_bytes() == b"\x00\x01"
    assert temps(tmp_path) == []


@posix_only
@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_file_gets_the_umask_mode(tmp_path, umask, expected):
    old = os.umask(umask)
    try:
        atomic_write_bytes(tmp_path / "plot.png", b"png")
    finally:
        os.umask(old)
    assert mode(tmp_path / "plot.png") == expected


@posix_only
@pytest.mark.parametrize("existing", [0o600, 0o640, 0o755, 0o444])
def test_existing_file_keeps_its_mode(tmp_path, umask_022, existing):
    out = tmp_path / "secret.json"
    out.write_text("old")
    os.chmod(out, existing)
    atomic_write_text(out, "new")
    assert out.read_text() == "new"
    assert mode(out) == existing


@posix_only
def test_the_temporary_never_has_a_wider_mode_than_the_file(tmp_path, umask_022, monkeypatch):
    """A 0600 file's new content is never readable by others, not even while it is written."""
    out = tmp_path / "secret.json"
    out.write_text("old")
    os.chmod(out, 0o600)
    seen = []
    real_write = os.write

    def spy(fd, data):
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real_write(fd, data)

    monkeypatch.setattr(atomic.os, "write", spy)
    atomic_write_text(out, "new")
    assert seen and set(seen) == {0o600}


@posix_only
def test_writes_through_a_symlink_to_its_target(tmp_path):
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    target = real_dir / "results.json"
    target.write_text("old")
    os.chmod(target, 0o600)
    link = tmp_path / "link.json"
    link.symlink_to(os.path.relpath(target, tmp_path))
    atomic_write_text(link, "new")
    assert link.is_symlink() and os.readlink(link) == os.path.relpath(target, tmp_path)
    assert target.read_text() == "new" and mode(target) == 0o600
    assert temps(tmp_path) == [] and temps(real_dir) == []


@posix_only
def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to("made.json")
    atomic_write_text(link, "x")
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == "x"


@posix_only
def test_stale_temporaries_of_this_file_are_removed_on_the_next_write(tmp_path):
    out = tmp_path / "results.json"
    stale = [tmp_path / ".results.json.abcd1234.tmp", tmp_path / ".results.json.k_9zq0xw.tmp"]
    for p in stale:
        p.write_bytes(b"")
    keep = [tmp_path / ".results.json.backup.tmp",          # not our naming
            tmp_path / ".other.json.abcd1234.tmp",          # another file's
            tmp_path / "results.json.abcd1234.tmp"]          # no leading dot
    for p in keep:
        p.write_bytes(b"mine")
    atomic_write_text(out, "{}")
    assert out.read_text() == "{}"
    assert not any(p.exists() for p in stale)
    assert all(p.read_bytes() == b"mine" for p in keep)


@posix_only
def test_a_temporary_another_writer_holds_is_not_removed(tmp_path):
    import fcntl

    live = tmp_path / ".results.json.live0000.tmp"
    fd = os.open(live, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert atomic.remove_stale_temps(str(tmp_path), "results.json") == 0
        atomic_write_text(tmp_path / "results.json", "{}")
        assert live.exists()
    finally:
        os.close(fd)
    assert atomic.remove_stale_temps(str(tmp_path), "results.json") == 1
    assert not live.exists()


@posix_only
def test_a_temporary_left_by_a_killed_writer_is_removed(tmp_path):
    """A real writer SIGKILLed between creating its temporary and the rename."""
    out = tmp_path / "results.json"
    script = (
        "import os, sys\n"
        "from commsim import atomic\n"
        "def die(*a):\n"
        "    os.kill(os.getpid(), 9)\n"
        "atomic.os.replace = die\n"
        "atomic.atomic_write_text(sys.argv[1], 'partial')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(out)], cwd=Path(__file__).resolve().parents[2],
                          timeout=60)
    assert proc.returncode == -9
    assert len(temps(tmp_path)) == 1 and not out.exists()
    atomic_write_text(out, "whole")
    assert out.read_text() == "whole" and temps(tmp_path) == []


def test_file_and_folder_are_fsynced(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def spy(fd):
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else os.fstat(fd).st_size)
        return real_fsync(fd)

    monkeypatch.setattr(atomic.os, "fsync", spy)
    atomic_write_bytes(tmp_path / "a.bin", b"12345")
    assert 5 in synced  # the data, before the rename
    if hasattr(os, "O_DIRECTORY"):
        assert synced[-1] == "dir"  # the rename, after it


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    out = tmp_path / "results.json"
    out.write_text("old")

    def full(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "write", full)
    with pytest.raises(OSError) as err:
        atomic_write_text(out, "new")
    assert err.value.errno == 28
    assert out.read_text() == "old" and temps(tmp_path) == []


def test_a_missing_folder_is_an_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        atomic_write_text(tmp_path / "nope" / "a.json", "x")


@posix_only
def test_concurrent_writers_of_one_file_never_take_each_others_temporary(tmp_path):
    """Each write first cleans stale temporaries: it must not remove a live writer's one."""
    out = tmp_path / "results.json"
    errors = []

    def writer(n):
        try:
            for i in range(60):
                atomic_write_text(out, f"{n}:{i}\n" * 200)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    lines = set(out.read_text().splitlines())
    assert len(lines) == 1  # one whole write, never a mix
    assert temps(tmp_path) == []


def test_a_device_or_fifo_is_written_into_not_replaced(tmp_path):
    # as root a rename over /dev/null would turn the device into a regular file
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    atomic_write_bytes(fifo, b"through the pipe")
    reader.join(timeout=10)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    atomic_write_text(link, "gone")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and link.is_symlink()


def test_dev_stdout_on_a_pipe_is_written_into():
    # /dev/stdout -> /proc/self/fd/1 -> 'pipe:[N]': realpath names no file, and the write once
    # failed as "No such file or directory" ('commsim run S --json /dev/stdout | head')
    code = ("import sys; from commsim.atomic import atomic_write_text; "
            "atomic_write_text('/dev/stdout', 'through stdout')")
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert (out.returncode, out.stdout, out.stderr) == (0, "through stdout", "")
