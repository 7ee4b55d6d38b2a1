"""The outputs quoted in README.md and docs/ are what the commands print today.

A default that moves every step time (a DDP cost, a link preset) makes these fail, naming the
block or row that went stale, instead of leaving the documentation quietly out of date."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from commsim.analysis.report import summarize
from commsim.cli.main import run_cli
from commsim.scenario.loader import load_scenario

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
COLLECTIVES = ROOT / "docs" / "collectives.md"
CAPACITY = ROOT / "docs" / "capacity"


def _commsim(args: str) -> str:
    """A documented `commsim ...` shell line run with this checkout, its stdout."""
    line = args.replace("commsim ", f"{shlex.quote(sys.executable)} -m commsim.cli ")
    done = subprocess.run(["bash", "-c", line], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout


def _shell_blocks(text: str):
    """(command, printed output) of every fenced block that starts with `$ commsim`: the command
    runs over its backslash-continued lines, the output is the rest of the block."""
    for block in re.findall(r"```\n(\$ .*?)```", text, re.S):
        lines = block.splitlines(keepends=True)
        n = 1
        while lines[n - 1].rstrip("\n").endswith("\\"):
            n += 1
        command = "".join(lines[:n])[2:].replace("\\\n", " ")
        yield command, "".join(lines[n:])


def test_readme_first_output_is_the_runs():
    blocks = dict(_shell_blocks(README.read_text()))
    command = "commsim run scenarios/32gpu_throttle.yaml\n"
    assert blocks[command] == _commsim(command)


def _collectives_algorithm_blocks():
    blocks = [(c, out) for c, out in _shell_blocks(COLLECTIVES.read_text()) if "commsim algorithms" in c]
    return [pytest.param(c, out, id=f"block{i}") for i, (c, out) in enumerate(blocks)]


@pytest.mark.parametrize("command, printed", _collectives_algorithm_blocks())
def test_collectives_algorithm_blocks_are_the_commands_output(command, printed):
    assert _commsim(command) == printed


def _readme_scaling_rows():
    text = README.read_text()
    table = text[text.index("| GPUs | mean step | baseline |"):]
    table = table[:table.index("\n\n")]
    return [line for line in table.splitlines()[2:]]


def test_readme_scaling_table_is_the_scenario_at_each_node_count():
    rows = _readme_scaling_rows()
    assert len(rows) == 5
    for row, nodes in zip(rows, (1, 4, 16, 64, 128)):
        s = summarize(load_scenario(ROOT / "scenarios" / "scaling_1024.yaml", [f"cluster.nodes={nodes}"]))
        ms = [s["step_time_s"]["mean"], s["baseline_step_time_s"], s["comm_time_s"], s["exposed_comm_s"],
              s["straggler_cost_s"]]
        want = (f"| {s['world_size']:,} | " + " | ".join(f"{v * 1e3:.1f} ms" for v in ms)
                + f" | {s['scaling_efficiency']:.1%} |")
        assert row == want


# docs/capacity-planning.md's three walkthrough sweeps, as documented (output folder aside)
SWEEPS = {
    "network": ["--grid", "docs/capacity/network_grid.yaml", "--set", "stragglers=[]"],
    "buckets": ["--grid", "docs/capacity/bucket_grid.yaml", "--set", "stragglers=[]"],
    "jitter": ["--grid", "docs/capacity/jitter_grid.yaml", "--set", "ddp.bucket_cap=400 MiB"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_committed_capacity_results_are_a_fresh_sweep(name, tmp_path, monkeypatch):
    """Every table of the capacity walkthrough is read from these files (docs/capacity/table.py)."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / name
    args = ["sweep", "scenarios/scaling_1024.yaml", *SWEEPS[name], "-o", str(out), "--jobs", "1", "-q"]
    assert run_cli(args) == 0
    assert (out / "results.csv").read_bytes() == (CAPACITY / name / "results.csv").read_bytes()


CALIBRATION = ROOT / "docs" / "calibration.md"


def _calibration_collective_example():
    """docs/calibration.md's calibrate-then-predict example: its two commands and its rows."""
    text = CALIBRATION.read_text()
    block = text[text.index("$ commsim calibrate --from-nccl-tests tests/data/nccl-tests-multiscale/H100-cluster01_1x8"):]
    block = block[:block.index("```")]
    commands = [c.replace("\\\n", " ").strip() for c in re.findall(r"^\$ (.*?)(?=^\$ |^#)", block, re.S | re.M)]
    rows = [line.split() for line in block.splitlines() if line and not line.startswith(("$", "#", " " * 6 + "tests"))]
    return commands, rows


@pytest.mark.slow
def test_calibration_collective_example_is_the_commands_output(tmp_path):
    """The rows quoted (size, then time, algbw, busbw, interval and pick after the elided columns)
    and the extrapolation note are what the two commands print with this checkout."""
    (calibrate, collective), rows = _calibration_collective_example()
    calibrate = calibrate.replace(" tests/", f" {ROOT}/tests/")
    for command in (calibrate, collective):
        line = command.replace("commsim ", f"{shlex.quote(sys.executable)} -m commsim.cli ", 1)
        done = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, check=True)
    printed = done.stdout.splitlines()
    note = next(line for line in CALIBRATION.read_text().splitlines() if line.startswith("# extrapolating: 10 nodes"))
    assert note in printed
    got = [line.split() for line in printed if line.strip() and not line.startswith("#")]
    assert len(rows) == len(got) == 4
    for want, have in zip(rows, got):
        assert want[0] == have[0] and want[2:] == have[-(len(want) - 2):], (want, have)
