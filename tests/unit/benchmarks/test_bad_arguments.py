"""Benchmark options that cannot run are one usage line and exit 2 before any work, not a
traceback minutes later (or, for a bad unit, before the calibration it would have spent)."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import load_benchmark

CASES = [
    ("mitigation_validation", ["--bucket-cap", "abc"], "--bucket-cap/--slow-stall: expected a size like"),
    ("mitigation_validation", ["--slow-stall", "soon"], "--bucket-cap/--slow-stall: expected"),
    ("mitigation_validation", ["--nprocs", "1"], "--nprocs: at least 2 ranks"),
    ("mitigation_validation", ["--calibration", "{tmp}/missing.yaml"], "--calibration: {tmp}/missing.yaml: cannot read"),
    ("blame_accuracy", ["--nprocs", "0"], "--nprocs at least 2 each"),
    ("blame_accuracy", ["--delay", "0"], "--delay above 0"),
    ("sweep_speed", ["--jobs", "0"], "--jobs: at least 1, got 0"),
    ("sweep_speed", ["--scenario", "{tmp}/missing.yaml"], "--scenario: {tmp}/missing.yaml: file not found"),
]
NEEDS_TORCH = {"mitigation_validation"}  # it imports validate/ as it loads


@pytest.mark.parametrize("name, argv, text", CASES, ids=[f"{n}:{a[0]}={a[1]}" for n, a, _ in CASES])
def test_refused_in_one_line_before_any_work(tmp_path, capsys, monkeypatch, name, argv, text):
    if name in NEEDS_TORCH:
        pytest.importorskip("torch")
    bench = load_benchmark(name)
    monkeypatch.setattr(sys, "argv", [f"{name}.py"])  # argparse names the script from it
    with pytest.raises(SystemExit) as exc:
        bench.main([a.format(tmp=tmp_path) for a in argv])
    assert exc.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"{name}.py: error: ") and text.format(tmp=tmp_path) in last, last
