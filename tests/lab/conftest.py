"""Lab tests: tests marked `lab` build network namespaces and skip, with the reason, where
this process cannot (no root / CAP_NET_ADMIN / CAP_SYS_ADMIN, no ip, tc or unshare)."""

import os
import itertools

import pytest

from commsim.lab import missing

_count = itertools.count()


@pytest.fixture(autouse=True)
def _skip_without_lab(request):
    if request.node.get_closest_marker("lab") is not None:
        lacking = missing()
        if lacking:
            pytest.skip("the lab needs " + ", ".join(lacking))


@pytest.fixture
def lab_name(tmp_path, monkeypatch):
    """A lab name unique to this test process and test, its state file under tmp_path."""
    monkeypatch.setenv("COMMSIM_LAB_STATE_DIR", str(tmp_path / "state"))
    return f"t{os.getpid() % 100000}x{next(_count)}"
