"""A multi-node job in the lab: a killed rank or a cut link fails the run within the timeout
naming the rank and its node, and what was measured is kept."""

import json
import os
import secrets
import signal
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from commsim.lab import Lab, LabSpec  # noqa: E402
from validate.launch import LaunchError  # noqa: E402
from validate.multinode import launch_on  # noqa: E402

LOOP = "tests.lab.workers_lab:allreduce_loop"
TIMEOUT_S = 6.0


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    from commsim.lab import missing

    if missing():
        pytest.skip("the lab needs " + ", ".join(missing()))
    mp = pytest.MonkeyPatch()
    mp.setenv("COMMSIM_LAB_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    try:
        with Lab(LabSpec(nodes=3, rate_bps=100e6, name=f"f{secrets.token_hex(4)}")) as lab:
            yield lab
    finally:
        mp.undo()


def records(out: Path, rank: int):
    path = out / f"rank{rank}.jsonl"
    return path.read_text().splitlines() if path.exists() else []


def after_records(out, count, action):
    """on_start hook: once rank 0 has recorded `count` iterations, do `action(ranks)`."""
    done = {}

    def hook(ranks):
        def wait_then_act():
            deadline = time.monotonic() + 120
            while len(records(out, 0)) < count and time.monotonic() < deadline:
                time.sleep(0.05)
            done["at"] = time.monotonic()
            action(ranks)

        threading.Thread(target=wait_then_act, daemon=True).start()

    return hook, done


@pytest.mark.lab
def test_a_killed_rank_is_named_with_its_node_and_the_measurements_kept(lab, tmp_path):
    hook, done = after_records(tmp_path, 5, lambda ranks: os.kill(ranks[1]["pid"], signal.SIGKILL))
    with pytest.raises(LaunchError) as exc:
        launch_on(lab, LOOP, 3, 1, timeout_s=30, args=(100000, 256 << 10), result_dir=str(tmp_path), on_start=hook)
    took = time.monotonic() - done["at"]
    assert took < 10, took  # the death is seen at once, not after the 30 s hang timeout
    msg = str(exc.value)
    assert msg.startswith(f"rank 1 (node {lab.node_name(1)}) failed: killed by SIGKILL"), msg
    assert len(exc.value.partial[0]) >= 5 and exc.value.partial[0][0] == {"iteration": 0}
    assert json.loads(records(tmp_path, 0)[4]) == {"iteration": 4}  # kept on disk, too


@pytest.mark.lab
def test_a_cut_link_fails_within_the_timeout_naming_the_ranks_behind_it(lab, tmp_path):
    hook, done = after_records(tmp_path, 5, lambda ranks: lab.cut(2))
    try:
        with pytest.raises(LaunchError) as exc:
            launch_on(lab, LOOP, 3, 1, timeout_s=TIMEOUT_S, args=(100000, 256 << 10), result_dir=str(tmp_path),
                      on_start=hook)
    finally:
        lab.mend(2)
    took = time.monotonic() - done["at"]
    assert TIMEOUT_S <= took < TIMEOUT_S + 8, took
    msg = str(exc.value)
    assert msg.startswith(f"rank 2 (node {lab.node_name(2)}) hung: no progress for {TIMEOUT_S:g} s; "
                          f"node {lab.node_name(2)} (10.77.0.3) does not answer"), msg
    assert len(exc.value.partial[0]) >= 5
