"""calibrate --backend / validate: local ranks that cannot fit in memory are refused before launching."""

import pytest

from commsim.scenario.budget import RANK_MEMORY_BYTES
from tests.unit.cli.launch_guard import one_line_exit_2, refuse_launches

CALIBRATION = "docs/measurements/gloo2_vm_calibration.yaml"


@pytest.fixture
def eight_gib(monkeypatch):
    """8 GiB available, and no process may start: a test that got past the check fails at once
    instead of spawning its ranks (100,000 torch interpreters before the check)."""
    import commsim.scenario.budget as budget

    monkeypatch.setattr(budget, "available_memory", lambda: 8 * 1024**3)
    refuse_launches(monkeypatch)


def test_calibrate_nprocs_beyond_the_memory_is_refused(eight_gib, tmp_path):
    out = tmp_path / "cal.yaml"
    line = one_line_exit_2(["calibrate", "--backend", "gloo", "--nprocs", "100000", "-o", str(out)])
    assert line == ("commsim: error: --nprocs: expected at most 40 local ranks (each is a Python interpreter with "
                    "torch, at least 200 MiB; 8.0 GiB of memory available), got 100,000")
    assert not out.exists()
    assert 8 * 1024**3 // RANK_MEMORY_BYTES == 40


def test_validate_numerics_nprocs_beyond_the_memory_is_refused(eight_gib):
    assert "--nprocs: expected at most 40 local ranks" in one_line_exit_2(
        ["validate", "--numerics", "--nprocs", "41"])


def test_validate_a_scenario_of_more_ranks_than_fit_names_its_cluster(eight_gib):
    # without --nprocs the scenario's world size is the number of local ranks launched
    line = one_line_exit_2(["validate", "scenarios/scaling_1024.yaml", "--calibration", CALIBRATION,
                             "--set", "collective.algorithm=ring", "--set", "collective.model=alpha-beta"])
    assert line.startswith("commsim: error: scenarios/scaling_1024.yaml: cluster (its 1024 ranks, one local "
                           "process each): expected at most 40 local ranks")
