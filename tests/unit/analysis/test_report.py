"""The run summary's statistics: percentiles bit-identical to numpy's."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from commsim.analysis.report import linear_percentiles


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=60))
def test_linear_percentiles_are_numpys_to_the_bit(xs):
    x = np.array(xs)
    q = [0, 1, 25, 50, 95, 99, 99.9, 100]
    np.testing.assert_array_equal(linear_percentiles(x, q), np.percentile(x, q))


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 101, 1000])
def test_linear_percentiles_on_step_times(n):
    x = np.random.default_rng(n).lognormal(-1, 0.3, n)
    np.testing.assert_array_equal(linear_percentiles(x, [50, 95, 99]), np.percentile(x, [50, 95, 99]))
