"""The journal: torn last lines repaired before appending, appends fsync'ed and rolled back on failure."""

from __future__ import annotations

import json
import os
import stat

import pytest

from commsim.sweep import journal as journal_mod
from commsim.sweep.errors import SweepInterrupted, SweepWriteError
from commsim.sweep.journal import JOURNAL, Journal, encode_record, read_journal, repair_tail
from commsim.sweep.run import run_sweep
from tests.unit.sweep.helpers import files
from tests.unit.sweep.test_grid import small_grid

SUMMARY = {"world_size": 4, "step_time_s": {"mean": 0.5}}


def record(key: str) -> bytes:
    return encode_record(key, {"cluster.nodes": 2}, SUMMARY)


def repaired(tmp_path, content: bytes):
    path = tmp_path / JOURNAL
    path.write_bytes(content)
    fd = os.open(path, os.O_RDWR | os.O_APPEND)
    try:
        what = repair_tail(fd)
    finally:
        os.close(fd)
    return what, path.read_bytes()


@pytest.mark.parametrize("content, expected, what", [
    (b"", b"", ""),
    (record("a") + record("b"), record("a") + record("b"), ""),
    (record("a") + b'{"key":"b","summ', record("a"), "cut 16 bytes"),
    (record("a") + record("b")[:-1], record("a") + record("b"), "newline added"),
    (b'{"key":"b","su', b"", "cut 14 bytes"),
    (record("a") + b"x" * 200_000, record("a"), "cut 200000 bytes"),  # a tail longer than a read block
    (record("a") + b"[1, 2]", record("a"), "cut 6 bytes"),  # JSON, but not a record
    (record("a") + b"[" * 100_000, record("a"), "cut 100000 bytes"),  # json.loads: RecursionError
])
def test_repair_tail(tmp_path, content, expected, what):
    assert repaired(tmp_path, content) == (what, expected)


def test_read_journal_recovers_a_record_glued_to_a_torn_fragment(tmp_path):
    # What appending onto a torn line used to leave: the fragment and the next record on one line.
    (tmp_path / JOURNAL).write_bytes(record("a") + b'{"key":"x","summ' + record("b") + b"not json\n")
    assert set(read_journal(tmp_path)) == {"a", "b"}


def test_a_line_nested_too_deeply_holds_no_record(tmp_path):
    # json's recursive decoder raised RecursionError, which `sweep --resume` let out as a traceback
    (tmp_path / JOURNAL).write_bytes(record("a") + b"[" * 100_000 + b"\n" + record("b"))
    assert set(read_journal(tmp_path)) == {"a", "b"}


def test_first_record_of_a_key_wins(tmp_path):
    later = encode_record("a", {}, {"world_size": 8})
    (tmp_path / JOURNAL).write_bytes(record("a") + later)
    assert read_journal(tmp_path)["a"] == SUMMARY


def test_each_append_is_fsynced(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def spy(fd):
        st = os.fstat(fd)
        synced.append(st.st_size if stat.S_ISREG(st.st_mode) else "dir")
        real(fd)

    monkeypatch.setattr(journal_mod.os, "fsync", spy)
    j = Journal(tmp_path)
    assert synced == ["dir"]  # the new journal's name is made durable too
    j.append("a", {}, SUMMARY)
    j.append("b", {}, SUMMARY)
    j.close()
    size_a = len(encode_record("a", {}, SUMMARY))
    assert synced == ["dir", size_a, 2 * size_a]


def test_a_failed_append_is_rolled_back(tmp_path, monkeypatch):
    j = Journal(tmp_path)
    j.append("a", {}, SUMMARY)
    real_write = os.write

    def half_then_full(fd, data):
        if len(data) > 10:
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(journal_mod.os, "write", half_then_full)
    with pytest.raises(SweepWriteError) as err:
        j.append("b", {}, SUMMARY)
    j.close()
    assert str(err.value).startswith(str(tmp_path / JOURNAL))
    assert "No space left on device (errno 28, ENOSPC)" in str(err.value)
    assert (tmp_path / JOURNAL).read_bytes() == encode_record("a", {}, SUMMARY)


def interrupt_after(n):
    def hook(done, total):
        if done == n:
            raise KeyboardInterrupt
    return hook


def test_resume_after_a_torn_last_line_loses_no_point(scenario, tmp_path):
    """A kill mid-write left a torn last line: --resume must not glue its first record onto it."""
    out = tmp_path / "out"
    with pytest.raises(SweepInterrupted):
        run_sweep(scenario, small_grid(), out, jobs=1, on_point=interrupt_after(3))
    with open(out / JOURNAL, "ab") as fh:
        fh.write(b'{"key":"abc","summ')
    res = run_sweep(scenario, small_grid(), out, jobs=1, resume=True)
    assert (res.ran, res.reused) == (3, 3)
    lines = (out / JOURNAL).read_bytes().splitlines()
    assert len(lines) == 6 and all(json.loads(line)["key"] for line in lines)
    again = run_sweep(scenario, small_grid(), out, jobs=1, resume=True)
    assert (again.ran, again.reused) == (0, 6)
    run_sweep(scenario, small_grid(), tmp_path / "fresh", jobs=1)
    assert files(out) == files(tmp_path / "fresh")


def test_resume_keeps_a_last_record_that_lost_only_its_newline(scenario, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(SweepInterrupted):
        run_sweep(scenario, small_grid(), out, jobs=1, on_point=interrupt_after(2))
    data = (out / JOURNAL).read_bytes()
    (out / JOURNAL).write_bytes(data[:-1])  # killed between the record and its newline
    res = run_sweep(scenario, small_grid(), out, jobs=1, resume=True)
    assert (res.ran, res.reused) == (4, 2)
    assert len(read_journal(out)) == 6
