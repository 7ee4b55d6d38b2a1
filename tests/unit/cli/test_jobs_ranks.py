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


def test_a_sweep_whose_largest_tensors_do_not_fit_is_refused_naming_max_size(eight_gib, tmp_path):
    """--max-size 1T swept for hours towards a 1 TiB tensor before a rank's allocation failed."""
    from commsim.scenario.budget import SWEEP_BUFFERS, sweep_memory_problem

    out = tmp_path / "cal.yaml"
    line = one_line_exit_2(["calibrate", "--backend", "gloo", "--max-size", "4G", "-o", str(out)])
    assert line.startswith("commsim: error: --max-size: expected a sweep that fits in memory, got 2 local ranks x "
                           "(200 MiB + 2 tensors of 4,294,967,296 bytes) = 16.4 GiB, with 8.0 GiB")
    assert not out.exists()
    # the bound itself: 2 x (200 MiB + 2 x S) against 8 GiB
    fits = (8 * 1024**3 // 2 - RANK_MEMORY_BYTES) // SWEEP_BUFFERS
    assert sweep_memory_problem(2, fits) is None and sweep_memory_problem(2, fits + 1) is not None
