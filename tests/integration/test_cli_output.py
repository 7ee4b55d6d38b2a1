"""What the commands print and where: '-' for stdout on every output option (stdout then carries
nothing else), no wrapping off a terminal, and a quiet exit when the reader of stdout goes away."""

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from commsim.cli.main import run_cli

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = "scenarios/32gpu_throttle.yaml"
SMALL = "scenarios/validate_gloo_2rank.yaml"  # 2 ranks: thousands of steps in a fraction of a second
LOG = "tests/data/nccl-tests/A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt"


def cli(*args, **kwargs):
    """`python -m commsim.cli ARGS` in a fresh process, from the repository root."""
    return subprocess.run([sys.executable, "-m", "commsim.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          **kwargs)


def test_json_to_stdout_is_the_same_document_and_nothing_else(tmp_path, capsys):
    path = tmp_path / "s.json"
    assert run_cli(["run", SCENARIO, "-q", "--steps", "4", "--json", str(path)]) == 0
    capsys.readouterr()
    assert run_cli(["run", SCENARIO, "--steps", "4", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert out == path.read_text()  # byte for byte the file's JSON; the summary went to stderr
    assert "step time" in err and "scaling efficiency" in err
    assert not (Path.cwd() / "-").exists()


def test_csv_and_trace_to_stdout(capsys):
    assert run_cli(["run", SCENARIO, "-q", "--steps", "3", "--csv", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 3 and list(rows[0]) == ["step", "start_s", "end_s", "duration_s", "last_rank"]
    assert run_cli(["run", SCENARIO, "-q", "--steps", "2", "--trace", "-"]) == 0
    assert "traceEvents" in json.loads(capsys.readouterr().out)


def test_calibrate_to_stdout(tmp_path, capsys):
    path = tmp_path / "cal.yaml"
    env = {"SOURCE_DATE_EPOCH": "1700000000"}
    os.environ.update(env)
    try:
        assert run_cli(["calibrate", "--from-nccl-tests", LOG, "-o", "-"]) == 0
        out, err = capsys.readouterr()
        assert run_cli(["calibrate", "--from-nccl-tests", LOG, "-o", str(path)]) == 0
    finally:
        del os.environ["SOURCE_DATE_EPOCH"]
    doc = yaml.safe_load(out)
    assert doc["levels"].keys() == yaml.safe_load(path.read_text())["levels"].keys()
    assert "intra_node: alpha = " in err and "wrote" not in err


def test_collective_and_algorithms_json_to_stdout(tmp_path, capsys):
    cal = tmp_path / "cal.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", LOG, "-o", str(cal)]) == 0
    capsys.readouterr()
    assert run_cli(["collective", "--calibration", str(cal), "--ranks", "8", "--sizes", "1M:4M", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert [r["size_bytes"] for r in json.loads(out)] == [2**20, 2**21, 2**22]
    assert "busbw" in err  # the table went to stderr
    assert run_cli(["algorithms", "scenarios/dgx_h100_scaling.yaml", "--nodes", "1", "--algorithm", "ring",
                    "--steps", "2", "--set", "model.parameters=1e8", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["rows"][0]["algorithm"] == "ring" and "GPUs" in err


def test_a_fifo_is_written_into_not_replaced(tmp_path, capsys):
    fifo = tmp_path / "summary.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so that the writer's open returns
    try:
        assert run_cli(["run", SCENARIO, "-q", "--steps", "2", "--json", str(fifo)]) == 0
        assert fifo.is_fifo()
        data = os.read(reader, 1 << 20)
    finally:
        os.close(reader)
    assert json.loads(data)["steps"] == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root")
def test_a_device_is_written_into_not_replaced(tmp_path):
    """`--json /dev/null` must not turn the machine's /dev/null into a regular file (an atomic
    write renames over its path); checked on a null device node of our own."""
    import stat

    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    assert run_cli(["run", SCENARIO, "-q", "--steps", "2", "--json", str(null), "--csv", str(tmp_path / "s.csv")]) == 0
    assert stat.S_ISCHR(null.stat().st_mode) and (tmp_path / "s.csv").stat().st_size > 0


def test_text_does_not_wrap_when_stdout_is_not_a_terminal():
    # 10^13 parameters: the step-time cells are 15 characters wide, the header line over 80
    r = cli("run", "scenarios/scaling_1024.yaml", "--steps", "2", "--set", "model.parameters=1e13",
            "--set", "ddp.bucket_cap=1 TB", "--set", "ddp.first_bucket=1 TB", env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "10,000,000,000,000 parameters (bf16)" in lines[0] and "seed 0" in lines[0]
    row = next(line for line in lines if line.startswith("│ step time"))
    cells = [c.strip() for c in row.strip("│").split("│")][1:]
    assert len(cells) == 5 and all(c.endswith(" ms") and "…" not in c for c in cells)
    late = [line for line in lines if line.startswith("late ranks")]
    assert len(late) == 1 and late[0].endswith(")") and max(map(len, lines)) > 80


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """The reader of stdout has closed its end before the command writes: like `| head -0`."""
    proc = subprocess.Popen([sys.executable, "-m", "commsim.cli", "run", SMALL, "--steps", "3", "--csv", "-"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == ""


def test_a_reader_that_goes_away_from_the_report_ends_the_command_quietly():
    """The same with the text report on stdout (rich's console, whose own handler of a closed
    pipe exits 1): exit 0, nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "commsim.cli", "run", SMALL, "--steps", "3"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == ""


def test_broken_pipe_through_head(tmp_path):
    """`commsim run ... | head -1` in a shell: exit 0, nothing on stderr (no "[Errno 32]").
    The CSV (60 bytes x 20,000 steps) is far larger than a pipe's buffer (64 KiB), so the
    writer is still writing when head exits."""
    err = tmp_path / "err.txt"
    cmd = (f"{sys.executable} -m commsim.cli run {SMALL} --steps 20000 --csv - 2>{err} "
           f"| head -1; echo \"status ${{PIPESTATUS[0]}}\"")
    r = subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.stdout.splitlines() == ["step,start_s,end_s,duration_s,last_rank", "status 0"]
    assert err.read_text() == ""


def test_a_broken_pipe_elsewhere_is_not_silenced(monkeypatch):
    import commsim.sim.engine as engine

    def broken(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")  # e.g. a socket of a job: stdout itself is fine

    monkeypatch.setattr(engine, "simulate", broken)
    with pytest.raises(BrokenPipeError):
        run_cli(["run", SCENARIO, "-q", "--steps", "2"])


def test_the_progress_bar_draws_on_the_terminal_of_stderr_not_in_stdouts_document(tmp_path):
    """stderr a terminal, stdout a pipe carrying `--json -`: the bar shows on stderr and the
    JSON on stdout is exactly the file's (rich's default console is stdout's)."""
    import pty
    import threading

    args = ["run", "scenarios/scaling_1024.yaml", "--steps", "300", "--seed", "1"]  # over the bar's threshold
    path = tmp_path / "s.json"
    assert run_cli([*args, "-q", "--json", str(path)]) == 0
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "commsim.cli", *args, "--json", "-"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    chunks = []

    def read_terminal():
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal's other end closed
                break
            if not data:
                break
            chunks.append(data)

    reader = threading.Thread(target=read_terminal)
    reader.start()
    out, _ = proc.communicate(timeout=300)
    reader.join(30)
    os.close(master)
    assert proc.returncode == 0
    assert out == path.read_bytes()
    assert b"simulating scenario" in b"".join(chunks)


def test_a_full_stdout_is_one_line_exit_2():
    """`commsim ... > /dev/full`: the report cannot be written; one line, no traceback."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "commsim.cli", "collective", "scenarios/dgx_h100_scaling.yaml",
                            "--sizes", "8:64"], cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["commsim: error: cannot write to stdout: No space left on device"]


@pytest.mark.parametrize("argv", [["--help"], ["--version"], [], ["-h"]])
def test_the_groups_own_help_and_version_to_a_full_stdout_are_one_line_exit_2(argv):
    # `commsim --help > /dev/full` was an OSError traceback, exit 1: the group's own options
    # (and plain `commsim`) print before any command is invoked
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "commsim.cli", *argv], cwd=ROOT, stdout=full,
                           stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == ["commsim: error: cannot write to stdout: No space left on device"]


TRACES = ("tests/data/traces/healthy/rank0.trace.json.gz", "tests/data/traces/healthy/rank1.trace.json.gz")


@pytest.mark.parametrize("argv, victim", [
    (["run", "{s}", "-q", "--json", "{s}"], "SCENARIO"),
    (["run", "{link}", "-q", "--csv", "{s}"], "SCENARIO"),  # the same file through a symlink
    (["run", "{s}", "-q", "--steps", "2", "--calibration", "{cal}", "--trace", "{cal}"], "--calibration file"),
    (["compare", "{s}", "-q", "--json", "{s}"], "SCENARIO"),
    (["algorithms", "{s}", "--json", "{s}"], "SCENARIO"),
    (["collective", "{s}", "--json", "{s}"], "SCENARIO"),
    (["blame", "--scenario", "{s}", "-q", "--json", "{s}"], "--scenario file"),
    (["blame", "{t0}", "{t1}", "-q", "--perfetto", "{t1}"], "TRACE file"),
    (["import", "{t0}", "{t1}", "-q", "-o", "{t0}"], "TRACE file"),
    (["import", "{t0}", "{t1}", "-q", "-o", "{tmp}/x.yaml", "--calibration-out", "{t1}"], "TRACE file"),
])
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path, capsys, argv, victim):
    """`commsim import rank*.json -o rank0.json` replaced the first trace by the scenario, and
    `run S --json S` the scenario by its own summary: now one line, exit 2, every input intact."""
    files = {"s": tmp_path / "s.yaml", "cal": tmp_path / "cal.yaml", "t0": tmp_path / "rank0.trace.json.gz",
             "t1": tmp_path / "rank1.trace.json.gz"}
    files["s"].write_bytes((ROOT / SCENARIO).read_bytes())
    assert run_cli(["calibrate", "--from-nccl-tests", str(ROOT / LOG), "-o", str(files["cal"])]) == 0
    for key, src in zip(("t0", "t1"), TRACES):
        files[key].write_bytes((ROOT / src).read_bytes())
    (tmp_path / "link.yaml").symlink_to(files["s"])
    before = {k: p.read_bytes() for k, p in files.items()}
    capsys.readouterr()
    args = [a.format(tmp=tmp_path, link=tmp_path / "link.yaml", **files) for a in argv]
    assert run_cli(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"got the {victim} itself" in err
    assert {k: p.read_bytes() for k, p in files.items()} == before


_SIGTERM_DURING = """
import os, signal, sys
import commsim.sim.engine as engine
from commsim.cli.main import run_cli

real = engine.simulate

def terminated(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode: before the return
    return real(*args, **kwargs)

engine.simulate = terminated
code = run_cli(sys.argv[1:])
assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored after the command
sys.exit(code)
"""


@pytest.mark.parametrize("argv", [
    ["run", SMALL, "-q", "--steps", "3", "--json", "{out}"],
    ["compare", SMALL, "-q", "--steps", "3", "--mitigations", "fp16", "--json", "{out}"],
    ["blame", "--scenario", SMALL, "-q", "--steps", "3", "--json", "{out}"],
])
def test_sigterm_stops_an_in_process_command_like_ctrl_c(tmp_path, argv):
    """SIGTERM (a batch scheduler's limit) arrives during the simulation: exit 130 and
    "interrupted" as for Ctrl-C, the existing output kept. It killed the process before (exit
    -15/143, not a word), against `commsim --help`'s exit codes. In a child process, which
    without the handler dies of the signal."""
    out = tmp_path / "out.json"
    out.write_text("keep\n")
    proc = subprocess.run([sys.executable, "-c", _SIGTERM_DURING, *[a.format(out=out) for a in argv]], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "commsim: error: interrupted" and out.read_text() == "keep\n"


def test_the_trace_and_the_plot_change_no_figure_of_the_summary_or_the_csv(tmp_path):
    """--trace needs every collective's times on its ranks, which turns the engine's shortcuts off
    (their sums differ in the last digits): the summary and the CSV of a run with --trace or --plot
    are byte for byte those of the plain run (the trace is a run of its own)."""
    plain = [str(tmp_path / "a.json"), str(tmp_path / "a.csv")]
    short = ["--steps", "6"]  # enough steps for the engine's shortcuts to engage
    assert run_cli(["run", SCENARIO, "-q", *short, "--json", plain[0], "--csv", plain[1]]) == 0
    for extra in (["--trace", str(tmp_path / "t.json")], ["--plot", str(tmp_path / "p.png")],
                  ["--trace", str(tmp_path / "t2.json"), "--plot", str(tmp_path / "p2.png")]):
        out = [str(tmp_path / "b.json"), str(tmp_path / "b.csv")]
        assert run_cli(["run", SCENARIO, "-q", *short, "--json", out[0], "--csv", out[1], *extra]) == 0
        for a, b in zip(plain, out):
            assert Path(a).read_bytes() == Path(b).read_bytes(), (extra, b)
