"""Lab tests: tests marked `lab` build network namespaces and skip, with the reason, where
this process cannot (no root / CAP_NET_ADMIN / CAP_SYS_ADMIN, no ip, tc or unshare)."""

import itertools
import secrets

import pytest

from commsim.lab import missing

_count = itertools.count()
# not the pid: a CI job in its own pid namespace may share this kernel's /run/netns with another
# run whose pytest has the same pid, and the two would build and remove each other's labs
_TOKEN = secrets.token_hex(3)


@pytest.fixture(autouse=True)
def _skip_without_lab(request):
    if request.node.get_closest_marker("lab") is not None:
        lacking = missing()
        if lacking:
            pytest.skip("the lab needs " + ", ".join(lacking))


@pytest.fixture
def lab_name(tmp_path, monkeypatch):
    """A lab name unique to this test run and test, its state file under tmp_path."""
    monkeypatch.setenv("COMMSIM_LAB_STATE_DIR", str(tmp_path / "state"))
    return f"t{_TOKEN}x{next(_count)}"
