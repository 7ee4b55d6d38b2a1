"""The `python -m validate.*` commands: click options with help, sizes as `commsim calibrate`
takes them, no torchrun needed, and commsim's one-line errors and exit codes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

pytest.importorskip("torch")

from commsim import calibration as calib  # noqa: E402
from commsim.errors import InputError  # noqa: E402
from validate import accuracy, collective_bench  # noqa: E402
from validate.entry import run_command  # noqa: E402
from validate.launch import LaunchError, LaunchInterrupted  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[2])
COMMANDS = {"validate.collective_bench": collective_bench, "validate.accuracy": accuracy}


@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_help_documents_every_option_in_full(module, capsys):
    command = COMMANDS[module].command
    undocumented = [p.name for p in command.params if isinstance(p, click.Option) and not p.help]
    assert not undocumented
    assert COMMANDS[module].main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Usage: python -m {module} [OPTIONS]")
    words = " ".join(out.split())
    # the whole description, to its last sentence (not its first line cut mid-sentence)
    assert "Exit codes: 0 done, 2 bad input, 3 a rank failed or hung" in words and "130 interrupted" in words
    for p in command.params:
        if isinstance(p, click.Option):
            assert " ".join(p.help.split()) in words


def test_sweep_without_torchrun_takes_sizes_like_calibrate(tmp_path):
    # sizes in nccl-tests' notation (as `commsim calibrate --max-size 64M`), and no torchrun:
    # the module launches its own ranks instead of failing on a missing RANK variable
    js = tmp_path / "rows.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    res = subprocess.run([sys.executable, "-m", "validate.collective_bench", "--min-size", "1K", "--max-size", "4K",
                          "--iters", "1", "--warmup", "0", "--check", "--json", str(js)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    rows = json.loads(js.read_text())
    assert [r["size_bytes"] for r in rows] == [1024, 2048, 4096]
    assert all(r[g]["wrong"] == 0 for r in rows for g in ("out_of_place", "in_place"))
    assert "# Avg bus bandwidth" in res.stdout


@pytest.fixture(scope="module")
def cal_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cal") / "cal.yaml"
    ms = [calib.Measurement(s, calib.model_time(200e-6, 0.5e9, s, 2), 2) for s in (1024, 2**20, 2**22)]
    calib.save_calibration(calib.Calibration((calib.fit_link("intra_node", ms),), calib.Provenance("test", 2)), path)
    return str(path)


@pytest.mark.parametrize("module, argv, says", [
    ("validate.collective_bench", ["--max-size", "16Q"],
     "Invalid value for '--max-size': expected a whole number of bytes such as 8, 64K, 16M or 1G, got '16Q'"),
    ("validate.collective_bench", ["--min-size", "2"], "--min-size 2, --max-size 16777216: expected 4 <="),
    ("validate.collective_bench", ["--min-size", "1M", "--max-size", "64K"], "--min-size 1048576, --max-size 65536"),
    ("validate.collective_bench", ["--iters", "0"], "Invalid value for '--iters'"),
    # 2**64 ran one size until the hang timer called the ranks hung, 300 s later
    ("validate.collective_bench", ["--iters", str(2**64)], "is not in the range 1<=x<=1000000"),
    ("validate.collective_bench", ["--warmup", str(2**64)], "is not in the range 0<=x<=1000000"),
    ("validate.accuracy", ["--calibration", "CAL", "--steps", str(2**64)], "is not in the range 1<=x<=1000000"),
    ("validate.collective_bench", ["--bogus"], "No such option"),
    ("validate.collective_bench", ["--timeout", "0.1"], "Invalid value for '--timeout'"),
    # FloatRange(min=1.0) let these through: every rank then failed on torch's OverflowError (exit 3)
    ("validate.collective_bench", ["--timeout", "inf"], "expected a finite number of seconds from 1 to 1e+06"),
    ("validate.collective_bench", ["--timeout", "1e308"], "expected a finite number of seconds from 1 to 1e+06"),
    ("validate.accuracy", ["--calibration", "CAL", "--timeout", "inf"], "expected a finite number of seconds"),
    ("validate.accuracy", ["--calibration", "CAL", "--timeout", "nan"], "expected a finite number of seconds"),
    ("validate.accuracy", [], "Missing option '--calibration'"),
    ("validate.accuracy", ["--calibration", "/nonexistent/cal.yaml"], "/nonexistent/cal.yaml: cannot read calibration file"),
    ("validate.accuracy", ["--calibration", "CAL", "--nprocs", "3"], "the scenario has 2 ranks but --nprocs is 3"),
    ("validate.accuracy", ["--calibration", "CAL", "--scenario", "/nonexistent.yaml"], "/nonexistent.yaml"),
    # an --nprocs past memory ended in the launcher's OverflowError traceback (2**64) or spawned until OOM
    ("validate.collective_bench", ["--nprocs", str(2**64)], "--nprocs: expected at most"),
    ("validate.accuracy", ["--calibration", "CAL", "--nprocs", str(2**64)], "--nprocs: expected at most"),
    ("validate.collective_bench", ["--max-size", "1T"], "--max-size: expected a sweep that fits in memory"),
    # outputs were checked only when written, after the run: lost, or written over an input
    ("validate.collective_bench", ["--json", "/nonexistent/dir/rows.json"], "--json /nonexistent/dir/rows.json: cannot "
     "write here: the folder /nonexistent/dir does not exist"),
    ("validate.accuracy", ["--calibration", "CAL", "--json", "CAL"], "expected an output path other than the inputs, "
     "got the --calibration itself"),
    ("validate.accuracy", ["--calibration", "CAL", "--json", ROOT + "/scenarios/validate_gloo_2rank.yaml"],
     "got the --scenario itself"),
])
def test_bad_input_is_one_line_and_exit_code_2(module, argv, says, cal_file, capfd):
    argv = [cal_file if a == "CAL" else a for a in argv]
    assert COMMANDS[module].main(argv) == 2
    out, err = capfd.readouterr()
    assert err.count("\n") == 1 and err.startswith("commsim: error: "), err
    assert says in err and "Traceback" not in err + out


def _raising(exc):
    @click.command()
    def cmd():
        raise exc

    return cmd


@pytest.mark.parametrize("exc, code, line", [
    (LaunchError("rank 1 hung: no progress for 5 s; no measurements were taken", {0: [], 1: []}, None), 3,
     "commsim: error: rank 1 hung: no progress for 5 s; no measurements were taken"),
    (LaunchInterrupted("interrupted (Ctrl-C); partial measurements in /tmp/x", {0: [{"a": 1}]}, "/tmp/x"), 130,
     "commsim: error: interrupted (Ctrl-C); partial measurements in /tmp/x"),
    (KeyboardInterrupt(), 130, "commsim: error: interrupted (Ctrl-C)"),
    (InputError("cal.yaml", "levels[0].alpha_s", "expected a number >= 0, got -1"), 2,
     "commsim: error: cal.yaml: levels[0].alpha_s: expected a number >= 0, got -1"),
])
def test_run_failures_have_their_own_exit_codes(exc, code, line, capfd):
    assert run_command(_raising(exc), [], prog_name="x") == code
    out, err = capfd.readouterr()
    assert err.strip().splitlines() == [line]


def test_failed_sweep_keeps_the_rows_measured(tmp_path, monkeypatch, capfd):
    rows = [{"size_bytes": 8}, {"size_bytes": 16}]

    def failing_launch(*args, **kwargs):
        raise LaunchError("rank 1 failed: exit code -9 (died without reporting an error); partial measurements in D",
                          {0: rows, 1: []}, "D")

    monkeypatch.setattr(collective_bench, "launch", failing_launch)
    js = tmp_path / "rows.json"
    assert collective_bench.main(["--json", str(js)]) == 3
    saved = json.loads((tmp_path / "rows.json.partial.json").read_text())
    assert saved["rows"] == rows and saved["error"].startswith("rank 1 failed")
    assert not js.exists()
    err = capfd.readouterr().err
    assert err.strip().endswith(f"(rows measured so far saved to {js}.partial.json)")


@pytest.mark.parametrize("stop, code", [
    (LaunchError("rank 1 hung: no progress for 5 s; no measurements were taken", {0: [], 1: []}, None), 3),
    (KeyboardInterrupt(), 130),
])
def test_accuracy_keeps_the_finished_cases(stop, code, cal_file, tmp_path, monkeypatch, capfd):
    report = {"measured": {"step_time_s": {"mean": 0.2}}, "predicted": {"step_time_s": {"mean": 0.19}},
              "error_pct": {"step_time_mean": -5.0, "step_time_p95": -4.0, "comm_time": None}}
    calls = []

    def replay(*args, **kwargs):
        calls.append(args[0].name)
        if len(calls) == 2:
            raise stop
        return report

    monkeypatch.setattr(accuracy, "validate_scenario", replay)
    js = tmp_path / "acc.json"
    assert accuracy.main(["--calibration", cal_file, "--json", str(js)]) == code
    saved = json.loads((tmp_path / "acc.json.partial.json").read_text())
    assert [c["scenario"] for c in saved["cases"]] == ["bucket_1MB"] and not js.exists()
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"(1 finished cases saved to {js}.partial.json)")
    assert err[0].startswith("commsim: error: " + ("rank 1 hung" if code == 3 else "interrupted (Ctrl-C)"))


def test_nothing_measured_saves_no_partial_file(tmp_path, monkeypatch, capfd):
    def failing_launch(*args, **kwargs):
        raise LaunchInterrupted("terminated (SIGTERM); no measurements were taken", {0: [], 1: []}, None)

    monkeypatch.setattr(collective_bench, "launch", failing_launch)
    assert collective_bench.main(["--json", str(tmp_path / "rows.json")]) == 130
    assert not list(tmp_path.iterdir())
    assert capfd.readouterr().err == "commsim: error: terminated (SIGTERM); no measurements were taken\n"


def test_accuracy_interrupted_in_its_first_case_saves_no_partial_file(cal_file, tmp_path, monkeypatch, capfd):
    def replay(*args, **kwargs):
        raise LaunchInterrupted("interrupted (Ctrl-C); no measurements were taken", {0: [], 1: []}, None)

    monkeypatch.setattr(accuracy, "validate_scenario", replay)
    assert accuracy.main(["--calibration", cal_file, "--json", str(tmp_path / "acc.json")]) == 130
    assert not list(tmp_path.iterdir())
    assert capfd.readouterr().err == "commsim: error: interrupted (Ctrl-C); no measurements were taken\n"


@pytest.mark.parametrize("argv, says", [
    ([], "Missing argument 'OUT_DIR'"),
    (["{tmp}", "--steps", "-3"], "Invalid value for '--steps'"),
    (["{tmp}", "--delay-rank", "2"], "--delay-rank 2: expected a rank below --nprocs 2"),
    (["{tmp}", "--slow-factor", "0.5"], "Invalid value for '--slow-factor'"),
    (["{tmp}", "--delay-s", "inf"], "Invalid value for '--delay-s'"),
    (["{tmp}", "--width", "1", "--width-step", "-1"], "a positive last width"),
    (["{tmp}", "--nprocs", str(2**64)], "--nprocs: expected at most"),
])
def test_trace_job_bad_input_is_one_line_exit_2_before_launching(argv, says, tmp_path, capfd):
    """validate.trace_job was argparse: a bad plan raised ValueError's traceback after parsing."""
    from validate import trace_job

    out_dir = tmp_path / "out"
    assert trace_job.main([str(out_dir) if a == "{tmp}" else a for a in argv]) == 2
    out, err = capfd.readouterr()
    assert err.count("\n") == 1 and err.startswith("commsim: error: ") and says in err, err
    assert "Traceback" not in err + out and not out_dir.exists()


def test_trace_job_writes_its_traces_and_job_json(tmp_path, capfd):
    from validate import trace_job

    out_dir = tmp_path / "job"
    assert trace_job.main([str(out_dir), "--steps", "2", "--warmup-steps", "1", "--no-flight-recorder"]) == 0
    job = json.loads((out_dir / "job.json").read_text())
    assert job["plan"]["steps"] == 2 and not job["plan"]["flight_recorder"] and len(job["ranks"]) == 2
    assert sorted(p.name for p in out_dir.iterdir()) == ["job.json", "rank0.trace.json.gz", "rank1.trace.json.gz"]
    assert "2 ranks x 2 steps: mean step" in capfd.readouterr().out
