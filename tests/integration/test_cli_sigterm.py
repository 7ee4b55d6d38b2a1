"""SIGTERM stops the in-process `calibrate` paths (--from-nccl-tests, --physical, --ddp-fit) and
`plot` as Ctrl-C does: exit 130, "interrupted", the output that was there kept. They died of the
signal before (exit -15, not a word). Each runs in a child process, which without the handler dies."""

import subprocess
import sys
from pathlib import Path

import pytest

from commsim.cli.main import run_cli
from tests.integration.test_cli_calibrate_ddp import _report

ROOT = Path(__file__).resolve().parents[2]
LOG = "tests/data/nccl-tests/A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt"
SMALL = "scenarios/validate_gloo_2rank.yaml"

# argv[1] names the function (module:attribute) the command calls mid-way; it sends SIGTERM to
# its own process first (handled at the next bytecode, before the real call returns)
_SIGTERM_DURING = """
import importlib, os, signal, sys
from commsim.cli.main import run_cli

module, name = sys.argv[1].split(":")
module = importlib.import_module(module)
real = getattr(module, name)

def terminated(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    return real(*args, **kwargs)

setattr(module, name, terminated)
code = run_cli(sys.argv[2:])
assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored after the command
sys.exit(code)
"""


def _terminated(target, argv, out):
    out.write_text("keep\n")
    proc = subprocess.run([sys.executable, "-c", _SIGTERM_DURING, target, *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    assert proc.stderr.strip().splitlines()[-1] == "commsim: error: interrupted"
    assert out.read_text() == "keep\n"


@pytest.mark.parametrize("target, extra", [
    ("commsim.calibration.from_logs:calibration_from_nccl_logs", []),
    ("commsim.calibration.from_logs:physical_fit_from_nccl_logs", ["--physical", "--system", "dgx-a100"]),
], ids=["from-nccl-tests", "physical"])
def test_sigterm_stops_calibrate_from_logs_like_ctrl_c(tmp_path, target, extra):
    out = tmp_path / "cal.yaml"
    _terminated(target, ["calibrate", "--from-nccl-tests", LOG, *extra, "-o", str(out)], out)


def test_sigterm_stops_calibrate_ddp_fit_like_ctrl_c(tmp_path):
    reports = [_report(tmp_path / f"r{c}.json", c) for c in (1, 25)]
    out = tmp_path / "ddp.yaml"
    _terminated("commsim.analysis.ddp_fit:fit_ddp_costs", ["calibrate", "--ddp-fit", *reports, "-o", str(out)], out)


def test_sigterm_stops_plot_like_ctrl_c(tmp_path):
    sweep = tmp_path / "sweep"
    assert run_cli(["sweep", SMALL, "-o", str(sweep), "--steps", "2", "-j", "1", "-q",
                    "--grid", "cluster.nodes=1,2"]) == 0
    keep = sweep / "step_time.png"  # a plot that was there: kept as it was
    _terminated("commsim.output.plots.directory:plot_sweep", ["plot", str(sweep)], keep)
