"""The simulator's commands start numpy with one OpenBLAS thread unless the user chose; the
commands that launch torch keep the user's environment (subprocesses: numpy reads the variable
once, when it is imported)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

PROBE = """\
import os, sys
from commsim.cli.main import main
sys.argv = ['commsim'] + sys.argv[1:]
try:
    main()
except SystemExit:
    pass
print('BLAS=' + os.environ.get('OPENBLAS_NUM_THREADS', 'unset'), file=sys.stderr)
"""


def _blas(args, env_value=None):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if env_value is not None:
        env["OPENBLAS_NUM_THREADS"] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    return [line for line in out.stderr.splitlines() if line.startswith("BLAS=")][-1][5:]


def test_run_starts_numpy_with_one_blas_thread():
    assert _blas(["run", "scenarios/32gpu_throttle.yaml", "-q", "--steps", "2"]) == "1"


def test_a_users_choice_is_kept():
    assert _blas(["run", "scenarios/32gpu_throttle.yaml", "-q", "--steps", "2"], env_value="2") == "2"


@pytest.mark.parametrize("command", ["validate", "calibrate", "lab"])
def test_commands_that_launch_torch_keep_the_environment(command):
    assert _blas([command, "--help"]) == "unset"
