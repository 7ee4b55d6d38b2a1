"""The outputs quoted in README.md and docs/ are what the commands print today.

A default that moves every step time (a DDP cost, a link preset) makes these fail, naming the
block or row that went stale, instead of leaving the documentation quietly out of date."""

import csv
import os
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


def _calibrated_scenario_blocks():
    text = (ROOT / "docs" / "calibration.md").read_text()
    blocks = [(c, out) for c, out in _shell_blocks(text) if "scenarios/dgx_h100_calibrated.yaml" in c]
    assert len(blocks) == 2, blocks
    return [pytest.param(c, out, id=c.split()[1]) for c, out in blocks]


@pytest.mark.parametrize("command, printed", _calibrated_scenario_blocks())
def test_calibration_guide_blocks_of_the_calibrated_scenario_are_the_commands_output(command, printed):
    """The physical fit pricing a scenario: every line quoted (the run's abridged at '...')."""
    out = _commsim(command)
    if "commsim algorithms" in command:
        assert out == printed
    else:
        quoted = [line for line in printed.splitlines() if line != "..."]
        assert quoted and all(line in out.splitlines() for line in quoted), out


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
    _assert_same_table(out / "results.csv", CAPACITY / name / "results.csv")


def _assert_same_table(fresh: Path, committed: Path) -> None:
    """The same rows, columns and text cells; numbers equal to 1e-12 relative. Byte equality holds
    on one machine (determinism), but numpy's SIMD kernels (the jitter draws' sums) round the
    last bits differently on another CPU: the committed jitter sweep, written on one machine, was
    6e-15 off on an AMD EPYC."""
    with open(fresh, newline="") as fa, open(committed, newline="") as fb:
        a, b = list(csv.reader(fa)), list(csv.reader(fb))
    assert a[0] == b[0] and len(a) == len(b)
    for i, (ra, rb) in enumerate(zip(a[1:], b[1:]), start=2):
        assert len(ra) == len(rb), i
        for col, x, y in zip(a[0], ra, rb):
            if x == y:
                continue
            try:
                fx, fy = float(x), float(y)
            except ValueError:
                raise AssertionError(f"{committed.name} line {i}, {col}: {y!r}, fresh {x!r}") from None
            assert fx == pytest.approx(fy, rel=1e-12, abs=0.0), f"{committed.name} line {i}, {col}: {y}, fresh {x}"


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


def _run_here(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """A documented `commsim ...` line run with this checkout in `cwd`, not checked."""
    line = command.replace("commsim ", f"{shlex.quote(sys.executable)} -m commsim.cli ")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(["bash", "-c", line], cwd=cwd, capture_output=True, text=True, env=env)


def _with_tests_dir(tmp_path: Path) -> Path:
    """A scratch folder whose `tests/` and `scenarios/` are the repository's, so a documented
    command with relative input paths runs there and writes its outputs there, as printed."""
    for name in ("tests", "scenarios"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


CAPACITY_PLANNING = ROOT / "docs" / "capacity-planning.md"


def _sweep_error_examples():
    text = CAPACITY_PLANNING.read_text()
    lines = re.findall(r"^\$ (commsim sweep .*)\n(commsim: error: .*)$", text, re.M)
    return [pytest.param(c, e, id=f"example{i}") for i, (c, e) in enumerate(lines)]


@pytest.mark.parametrize("command, error", _sweep_error_examples())
def test_capacity_sweep_error_examples_are_what_sweep_prints(command, error, tmp_path):
    """docs/capacity-planning.md's "Validation first" lines: the sweep refuses each (exit 2)
    with exactly the line shown, before it writes anything."""
    assert len(_sweep_error_examples()) == 3
    done = _run_here(command, _with_tests_dir(tmp_path))
    assert done.returncode == 2
    assert done.stderr == error + "\n"
    assert not (tmp_path / "out").exists()


TRACES = ROOT / "docs" / "traces.md"


def test_traces_blame_block_is_the_start_of_blames_output():
    """The blame block quotes the first two lines (summary and verdict) of the report."""
    command, printed = next((c, out) for c, out in _shell_blocks(TRACES.read_text()) if c.startswith("commsim blame"))
    assert len(printed.splitlines()) == 2
    assert _commsim(command).startswith(printed)


def test_traces_import_line_and_what_if_table(tmp_path):
    """The import block's printed line, and the what-if table's rows: the imported scenario run
    at 8, 64 and 1,024 GPUs (1, 8 and 128 nodes of 8)."""
    text = TRACES.read_text()
    command, printed = next((c, out) for c, out in _shell_blocks(text) if c.startswith("commsim import"))
    lines = printed.splitlines()
    assert lines[1].startswith("$ commsim run job.yaml")
    done = _run_here(command, _with_tests_dir(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == lines[0] + "\n"
    table = text[text.index("| GPUs | mean step | baseline | straggler cost |"):]
    rows = table[:table.index("\n\n")].splitlines()[2:]
    assert len(rows) == 3
    for row, nodes in zip(rows, (1, 8, 128)):
        s = summarize(load_scenario(tmp_path / "job.yaml", [f"cluster.nodes={nodes}", "cluster.gpus_per_node=8"]))
        ms = (s["step_time_s"]["mean"], s["baseline_step_time_s"], s["straggler_cost_s"])
        assert row == f"| {s['world_size']:,} | " + " | ".join(f"{v * 1e3:.2f} ms" for v in ms) + " |"


def _calibration_v100_blocks():
    blocks = [(c, out) for c, out in _shell_blocks(CALIBRATION.read_text()) if "v100.yaml" in c]
    return [pytest.param(c, out, id=c.split()[1]) for c, out in blocks]


def test_calibration_v100_blocks_are_the_commands_output(tmp_path):
    """docs/calibration.md's V100 example: the calibrate report, then the collective table over
    the calibration it wrote (the collective's header elides the size ranges with '...')."""
    blocks = _calibration_v100_blocks()
    assert [p.id for p in blocks] == ["calibrate", "collective"]
    cwd = _with_tests_dir(tmp_path)
    for param in blocks:
        command, printed = param.values
        done = _run_here(command, cwd)
        assert done.returncode == 0, done.stderr
        want, got = printed.splitlines(), done.stdout.splitlines()
        assert len(want) == len(got)
        for w, g in zip(want, got):
            if w.endswith("...)"):
                assert g.startswith(w[:-4]), (w, g)
            else:
                assert w == g.rstrip(), (w, g)


def _collectives_table(header: str):
    text = COLLECTIVES.read_text()
    table = text[text.index(header):]
    return [[c.strip() for c in line.strip("|").split("|")] for line in table[:table.index("\n\n")].splitlines()[2:]]


def test_collectives_alpha_beta_against_nccl_table_is_the_snippets_output():
    """The ring/tree × model table of docs/collectives.md, recomputed as its snippet does."""
    from commsim.collectives import table
    from commsim.scenario import topology

    models = ("alpha-beta", "nccl-2.7", "nccl-2.19", "nccl-2.30")
    sizes = {"64 KiB": 65536, "1 MiB": 1 << 20, "25 MiB": 25 << 20, "1 GiB": 1 << 30}
    rows = _collectives_table("| GPUs | size | ring alpha-beta |")
    assert len(rows) == 12
    for gpus, size, *cells in rows:
        f = topology.fabric("dgx-h100", int(gpus) // 8)
        t = {(r["algorithm"], m): r for m in models for r in table(["ring", "tree"], f, [sizes[size]], m)}
        want = []
        for a in ("ring", "tree"):
            for m in models:
                r = t[(a, m)]
                cell = f"{r['time_s'] * 1e3:.3f}"
                want.append(cell if m == "alpha-beta" else f"{cell} ({r['chosen'].split('/')[1]})")
        assert cells == want, (gpus, size)


def test_collectives_p5_table_is_the_presets_prediction():
    """The predicted columns of the 2 × p5 H100 table (dgx-h100 preset, 2 nodes)."""
    from commsim.collectives import table
    from commsim.scenario import topology

    f = topology.fabric("dgx-h100", 2)
    rows = _collectives_table("| size | measured busbw | ring α-β |")
    assert len(rows) == 5
    for size, _measured, *cells in rows:
        s = int(size.split()[0]) << 20
        want = [f"{r['busbw'] / 1e9:.0f}" for r in table(["ring", "tree", "auto"], f, [s], "alpha-beta")]
        for m in ("nccl-2.19", "nccl-2.30"):
            r = table(["auto"], f, [s], m)[0]
            want.append(f"{r['busbw'] / 1e9:.0f} ({r['chosen']})")
        assert cells == want, size
