"""The results files: rendered from journaled points only; after a failure they match the journal or are gone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commsim.sweep import results as results_mod
from commsim.sweep.errors import SweepWriteError
from commsim.sweep.journal import Journal, read_journal
from commsim.sweep.plan import plan_sweep
from commsim.sweep.results import RESULTS_CSV, RESULTS_JSON, ResultsWriter, write_results
from tests.unit.sweep.test_grid import small_grid


def writer_with_two_points(scenario, out: Path) -> ResultsWriter:
    out.mkdir()
    points = plan_sweep(scenario, small_grid())
    meta = {"scenario": str(scenario), "overrides": [], "steps": None, "seed": None, "grid": small_grid().as_dict()}
    w = ResultsWriter(out, points, meta, {}, Journal(out))
    w.record(points[0], {"world_size": 2, "x": 1.0})
    w.flush()
    w.record(points[1], {"world_size": 2, "x": 2.0})  # journaled; results not yet rewritten (throttle)
    return w


def points_done(out: Path) -> int:
    return json.loads((out / RESULTS_JSON).read_text())["points_done"]


def test_results_lag_the_journal_only_until_settled(scenario, tmp_path):
    out = tmp_path / "out"
    w = writer_with_two_points(scenario, out)
    assert points_done(out) == 1 and len(read_journal(out)) == 2
    assert w.settle() == f"{RESULTS_CSV} and {RESULTS_JSON} match it"
    assert points_done(out) == 2 and w.results_match
    w.journal.close()


def test_no_room_for_two_copies_removes_the_stale_ones_then_rewrites(scenario, tmp_path, monkeypatch):
    out = tmp_path / "out"
    w = writer_with_two_points(scenario, out)
    real = results_mod.atomic_write_text

    def full_while_old_exists(path, text):  # a full disk: the old file and its successor do not both fit
        if Path(path).exists():
            raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(results_mod, "atomic_write_text", full_while_old_exists)
    assert w.settle() == f"{RESULTS_CSV} and {RESULTS_JSON} match it"
    assert points_done(out) == 2
    w.journal.close()


def test_no_room_at_all_leaves_no_stale_results(scenario, tmp_path, monkeypatch):
    out = tmp_path / "out"
    w = writer_with_two_points(scenario, out)

    def full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(results_mod, "atomic_write_text", full)
    assert "removed" in w.settle() and not w.results_match
    assert not (out / RESULTS_CSV).exists() and not (out / RESULTS_JSON).exists()
    w.journal.close()


def test_results_that_cannot_be_removed_are_reported_not_hidden(scenario, tmp_path, monkeypatch):
    """A read-only filesystem: neither rewriting nor removing works; the message says so."""
    out = tmp_path / "out"
    w = writer_with_two_points(scenario, out)

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(results_mod, "atomic_write_text", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    assert "could not be updated and may lag it" in w.settle() and not w.results_match
    w.journal.close()


def test_write_results_names_the_file_it_could_not_write(scenario, tmp_path, monkeypatch):
    def full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(results_mod, "atomic_write_text", full)
    points = plan_sweep(scenario, small_grid())
    with pytest.raises(SweepWriteError) as err:
        write_results(tmp_path, points, {}, {"grid": small_grid().as_dict()})
    assert str(err.value) == f"{tmp_path / RESULTS_CSV}: cannot write: No space left on device (errno 28, ENOSPC)"
