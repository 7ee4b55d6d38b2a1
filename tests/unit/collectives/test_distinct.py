"""The np.unique stand-ins the planners use: equal to np.unique on random vectors."""

import subprocess
import sys

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from commsim.collectives.distinct import distinct, distinct_inverse, first_of_runs

VECTORS = st.lists(st.integers(-5, 5) | st.sampled_from([0.5, 1e-9, -2.25]), max_size=40).map(np.array)


@given(VECTORS)
def test_distinct_equals_np_unique(x):
    np.testing.assert_array_equal(distinct(x), np.unique(x))
    values, inverse = distinct_inverse(x)
    want_values, want_inverse = np.unique(x, return_inverse=True)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(inverse, want_inverse.ravel())
    s = np.sort(x)
    got = first_of_runs(s)
    want = np.unique(s, return_index=True)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_a_run_does_not_import_numpy_ma():
    # np.unique imports numpy.ma (~10 ms of start-up); planning a run must not need it
    code = ("import sys; from commsim.cli.main import run_cli; "
            "run_cli(['run', 'scenarios/32gpu_throttle.yaml', '-q', '--steps', '2']); "
            "print('numpy.ma' in sys.modules, 'rich' in sys.modules, 'commsim.cli.calibrate' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "False"]
