"""Every benchmark's output options are checked before its minutes of work, by the rules of the
CLI's outputs (commsim.cli.outputs.check_output_path): a path in no folder, a directory, an
empty path and ``-`` (the scripts print their report on stdout) are one usage line, exit 2,
and nothing is written. Before, six of them wrote --json with a plain open() after the run: a
bad path was a traceback that lost the run's figures, and a run cut short left half a file."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import load_benchmark

# (benchmark, output option, other arguments that keep the run cheap were it to start)
CASES = [
    ("blame_accuracy", "--json", ["--repeats", "1", "--nprocs", "2"]),
    ("cross_scale", "--json", []),
    ("ddp_buckets_gloo", "--json", []),
    ("ddp_buckets_gloo", "--save-raw", []),
    ("ddp_throughput", "--json", []),
    ("lab_validation", "--json", ["--quick"]),
    ("mitigation_validation", "--json", []),
    ("published_summaries", "--json", []),
    ("run_budget", "--json", ["--nodes", "1", "--steps", "1", "--repeats", "1"]),
    ("scale", "--json", ["--sizes", "32"]),
    ("streams_speed", "--json", ["--sizes", "32", "--reference-sizes", "32"]),
    ("sweep_speed", "--json", ["--skip-dask"]),
]
NEEDS_TORCH = {"lab_validation", "mitigation_validation"}  # they import validate/ as they load


def _bad_paths(tmp_path):
    return {
        "missing folder": (str(tmp_path / "missing" / "out.json"), "does not exist"),
        "directory": (str(tmp_path), "it is a directory"),
        "empty": ("", "expected a file path, got an empty path"),
        "stdout": ("-", "this script prints its report on stdout"),
    }


@pytest.mark.parametrize("kind", ["missing folder", "directory", "empty", "stdout"])
@pytest.mark.parametrize("name, option, extra", CASES, ids=[f"{n}{o}" for n, o, _ in CASES])
def test_a_bad_output_is_one_usage_line_before_any_work(tmp_path, capsys, monkeypatch, name, option, extra, kind):
    if name in NEEDS_TORCH:
        pytest.importorskip("torch")
    bench = load_benchmark(name)
    path, reason = _bad_paths(tmp_path)[kind]
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = extra + [option, path]
    monkeypatch.setattr(sys, "argv", [f"{name}.py"] + argv)  # scale.py's main() reads sys.argv
    with pytest.raises(SystemExit) as exc:
        bench.main() if name == "scale" else bench.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"{name}.py: error: {option}") and reason in err[-1], err
    assert err[0].startswith("usage:")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, no temporary left
