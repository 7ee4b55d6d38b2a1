"""validate.multinode_rank run by hand (srun, torchrun): a failure is said on stderr, not only in
the error file, and its exit code tells bad input (2) from a job that failed (3)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = str(Path(__file__).resolve().parents[2])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path, fn, args, env):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")} | env
    return subprocess.run([sys.executable, "-m", "validate.multinode_rank", "--fn", fn, "--args", args,
                           "--out", str(tmp_path / "out"), "--timeout", "30"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_no_launcher_is_bad_input_said_on_stderr(tmp_path):
    run = _run(tmp_path, "validate.multinode:placements", "[]", {})
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("commsim: error: rank -1: ValueError: no rank in the environment")
    assert "rank-1.error.txt" in run.stderr and (tmp_path / "out" / "rank-1.error.txt").exists()


def test_a_rank_function_that_fails_after_the_job_began_exits_3(tmp_path):
    env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    # resolve() raises inside the job: the rank function itself failed
    run = _run(tmp_path, "validate.multinode_rank:rank_sequence", '[[["no_colon", []]]]', env)
    assert run.returncode == 3, run.stderr
    assert "commsim: error: rank 0: ValueError: --fn: expected module:function, got 'no_colon'" in run.stderr
