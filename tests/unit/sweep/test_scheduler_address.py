"""--dask-scheduler's address is checked before a sweep plans or writes anything."""

import pytest

from commsim.sweep.errors import SweepError
from commsim.sweep.executors import check_scheduler_address

pytest.importorskip("distributed")


@pytest.mark.parametrize("address", ["tcp://10.0.0.1:8786", "10.0.0.1:8786", "tls://host:8786", "tcp://[::1]:8786",
                                     "inproc://10.0.0.1/1/2"])
def test_scheduler_addresses_dask_accepts_pass(address):
    check_scheduler_address(address)


@pytest.mark.parametrize("address, needle", [
    ("bogus", "missing port number"),  # was a ValueError traceback from inside distributed
    ("tcp://host", "missing port number"),
    ("tcp://host:x", "expected a scheduler address like tcp://HOST:8786"),
    ("tcp://host:99999", "expected a port 1..65535 in the scheduler address, got 99999"),  # was a 10 s timeout
    ("tcp://host:0", "got 0"),
])
def test_bad_scheduler_addresses_are_refused_naming_the_option(address, needle):
    with pytest.raises(SweepError, match=needle) as info:
        check_scheduler_address(address)
    assert str(info.value).startswith(f"--dask-scheduler {address}: ")
