"""Exit codes of jobs that fail or are interrupted: a dead or hung rank is exit 3 (not 2, bad
input), Ctrl-C is exit 130 (not "Aborted!" and 1), and the measurements taken so far are kept;
calibrate's messages name the logs or the output they are about."""

import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

import commsim.cli.calibrate as cli_calibrate
from commsim.cli.main import run_cli
from commsim.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED
from validate import launch

ROOT = Path(__file__).resolve().parents[2]
RECORDS = {0: [{"size_bytes": 8, "time_s": 1e-5}], 1: [{"size_bytes": 8, "time_s": 1.1e-5}]}


def fake_measure(monkeypatch, exc):
    """`calibrate --backend gloo` whose measurement raises `exc` (no torch, no ranks)."""
    def measure_calibration(**kwargs):
        kwargs["echo"]("# measuring")
        raise exc

    fake = types.SimpleNamespace(measure_calibration=measure_calibration)
    real = cli_calibrate.import_validate
    monkeypatch.setattr(cli_calibrate, "import_validate", lambda name: fake if name == "calibrate" else real(name))


def calibrate(tmp_path, *extra):
    return run_cli(["calibrate", "--backend", "gloo", "--nprocs", "2", "-o", str(tmp_path / "cal.yaml"), *extra])


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("commsim: error: "), err
    return err[0]


def test_a_hung_rank_is_exit_3_and_keeps_what_was_measured(monkeypatch, tmp_path, capsys):
    fake_measure(monkeypatch, launch.LaunchError("rank 1 hung: no progress for 5 s", RECORDS, str(tmp_path)))
    assert calibrate(tmp_path) == EXIT_RUN_FAILED
    line = one_line(capsys)
    partial = tmp_path / "cal.yaml.partial.json"
    assert "rank 1 hung" in line and str(partial) in line
    saved = json.loads(partial.read_text())
    assert saved["partial"] == {"0": RECORDS[0], "1": RECORDS[1]} and "rank 1 hung" in saved["error"]
    assert not (tmp_path / "cal.yaml").exists()


def test_an_interrupted_launch_is_exit_130_and_keeps_what_was_measured(monkeypatch, tmp_path, capsys):
    fake_measure(monkeypatch, launch.LaunchInterrupted("interrupted: ranks stopped", RECORDS, str(tmp_path)))
    assert calibrate(tmp_path) == EXIT_INTERRUPTED
    assert "interrupted" in one_line(capsys)
    assert json.loads((tmp_path / "cal.yaml.partial.json").read_text())["partial"]["0"] == RECORDS[0]


def test_ctrl_c_through_the_launcher_is_exit_130(monkeypatch, tmp_path, capsys):
    fake_measure(monkeypatch, KeyboardInterrupt())
    assert calibrate(tmp_path) == EXIT_INTERRUPTED
    assert "interrupted" in one_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_no_partial_file_and_no_folder_named_when_nothing_was_measured(monkeypatch, tmp_path, capsys):
    fake_measure(monkeypatch, launch.LaunchError("rank 0 failed: exit code -9", {0: [], 1: []}, str(tmp_path)))
    assert calibrate(tmp_path) == EXIT_RUN_FAILED
    assert "no measurements were taken" in one_line(capsys)
    assert not (tmp_path / "cal.yaml.partial.json").exists()


def test_calibration_to_stdout_keeps_its_partial_results_in_the_launchers_folder(monkeypatch, tmp_path, capsys):
    fake_measure(monkeypatch, launch.LaunchError(f"rank 1 hung; partial measurements in {tmp_path}", RECORDS,
                                                 str(tmp_path)))
    assert run_cli(["calibrate", "--backend", "gloo", "-o", "-"]) == EXIT_RUN_FAILED
    out, err = capsys.readouterr()
    assert out == "" and str(tmp_path) in err and "# measuring" in err
    assert not Path("-.partial.json").exists()


def test_an_unfittable_measurement_names_the_output(monkeypatch, tmp_path, capsys):
    from commsim.calibration import CalibrationError

    fake_measure(monkeypatch, CalibrationError("all-reduce times do not grow with size: no bandwidth term to fit"))
    assert calibrate(tmp_path) == 2
    line = one_line(capsys)
    assert f"{tmp_path / 'cal.yaml'} (measured with gloo, 2 ranks): all-reduce times do not grow" in line


def _log(path: Path, sizes, time_us) -> Path:
    rows = []
    for s in sizes:
        alg = s / (time_us * 1e-6) / 1e9
        rows.append(f"{s:12d}  {s // 4:12d}     float     sum      -1  {time_us:7.2f}  {alg:6.2f}  {alg:6.2f}       0"
                    f"  {time_us:7.2f}  {alg:6.2f}  {alg:6.2f}       0")
    path.write_text("#  Rank  0 Group  0 Pid 1 on host1 device  0 [0x1] Tesla V100\n"
                    "#  Rank  1 Group  0 Pid 2 on host1 device  1 [0x2] Tesla V100\n#\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("sizes, needle", [
    ([2**k for k in range(3, 24)], "do not grow with size"),  # the same time at every size
    ([2**20], "two or more distinct sizes"),
])
def test_an_unfittable_log_is_named(tmp_path, capsys, sizes, needle):
    log = _log(tmp_path / "flat.txt", sizes, 100.0)
    assert run_cli(["calibrate", "--from-nccl-tests", str(log), "-o", str(tmp_path / "c.yaml")]) == 2
    line = one_line(capsys)
    assert line.startswith(f"commsim: error: {log}") and needle in line
    assert not (tmp_path / "c.yaml").exists()


def test_validate_maps_a_failed_job_to_exit_3_with_partial_results_next_to_json(monkeypatch, tmp_path, capsys):
    from commsim.cli import validate as cli_validate

    def validate_scenario(*args, **kwargs):
        raise launch.LaunchError("rank 1 failed: RuntimeError: gloo connection reset", RECORDS, str(tmp_path))

    real = cli_validate.import_validate
    monkeypatch.setattr(cli_validate, "import_validate",
                        lambda name: types.SimpleNamespace(validate_scenario=validate_scenario)
                        if name == "replay" else real(name))
    cal = tmp_path / "cal.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests",
                    "tests/data/nccl-tests/RTX2080Ti-PCIe3-noP2P-1node_2ranks_anthony-hoo-autodl.txt", "-o", str(cal)]) == 0
    capsys.readouterr()
    report = tmp_path / "report.json"
    assert run_cli(["validate", "scenarios/validate_gloo_2rank.yaml", "--calibration", str(cal),
                    "--json", str(report)]) == EXIT_RUN_FAILED
    assert "gloo connection reset" in one_line(capsys)
    assert not report.exists() and (tmp_path / "report.json.partial.json").exists()


def test_ctrl_c_of_a_simulation_is_exit_130_without_a_traceback(tmp_path):
    """A real SIGINT to `commsim run`, sent once the simulation has started (a flag file says so).
    The simulation is held there (a minute at most) so that the signal always lands inside it,
    however fast the engine has become."""
    flag, out = tmp_path / "started", tmp_path / "s.json"
    # Ctrl-C raises KeyboardInterrupt in the child even when pytest runs with SIGINT ignored (a
    # background job: a shell without job control starts it so, and a child inherits SIG_IGN)
    code = ("import signal, sys, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "import commsim.sim.engine as e\nreal = e.simulate\n"
            "def simulate(*a, **k):\n"
            f"    open({str(flag)!r}, 'w').close()\n"
            "    end = time.monotonic() + 60\n"
            "    while time.monotonic() < end:\n"
            "        time.sleep(0.01)\n"
            "    return real(*a, **k)\n"
            "e.simulate = simulate\n"
            "from commsim.cli.main import main\n"
            f"sys.argv = ['commsim', 'run', 'scenarios/scaling_1024.yaml', '-q', '--steps', '3000', '--json', {str(out)!r}]\n"
            "main()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert flag.exists(), proc.communicate()
    os.kill(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, stderr
    assert "Traceback" not in stderr and "Aborted" not in stderr
    assert stderr.strip().splitlines() == ["commsim: error: interrupted"]
    assert not out.exists()


def test_a_missing_torch_is_one_line_with_an_install_command_that_works_from_a_clone(monkeypatch, tmp_path, capsys):
    import importlib

    import commsim.cli.jobs as jobs

    real = importlib.import_module

    def no_torch(name, *args):
        if name.startswith("validate."):
            raise ModuleNotFoundError("No module named 'torch'")
        return real(name, *args)

    monkeypatch.setattr(jobs.importlib, "import_module", no_torch)
    assert calibrate(tmp_path) == 2
    line = one_line(capsys)
    assert "pip install -e '.[validate]'" in line and "repository root" in line and "commsim[validate]" not in line
