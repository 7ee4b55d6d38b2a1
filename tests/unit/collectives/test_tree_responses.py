"""The tree and halving-doubling kernels are max-plus linear, and the response columns and gaps of
:class:`commsim.collectives.maxplus.Responses` decide a collective exactly where they say so."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commsim.collectives import make_kernel
from commsim.collectives.maxplus import Responses
from commsim.collectives.reference import REFERENCES
from tests.unit.collectives.cases import cases, two_level


def _columns(responses, kernel):
    return np.stack([responses.column(kernel, u) for u in range(kernel.world_size)], axis=1)  # A[x, u]


@pytest.mark.parametrize("name", ["tree", "halving_doubling", "auto"])
@settings(max_examples=60)
@given(case=cases())
def test_the_tree_is_max_plus_linear_in_its_launch(name, case):
    f, launch, size = case
    kernel = make_kernel(name, f, size)
    if f.world_size == 1:
        return
    if name == "auto":  # linear exactly where its pick is
        assert kernel.maxplus_linear == getattr(kernel.pick, "maxplus_linear", False)
        if not kernel.maxplus_linear:
            return
    assert kernel.maxplus_linear
    A = _columns(Responses(), kernel)
    assert np.isfinite(A).all()  # every rank hears from every rank
    np.testing.assert_allclose(kernel.finish_times(launch), (launch[None, :] + A).max(axis=1), rtol=1e-12, atol=1e-15)


def test_a_column_is_the_reference_with_one_rank_launching_far_later():
    # the per-chunk SimPy reference has no -inf launch: rank p launching 1 s after the others decides
    # every rank's finish, which is then 1 s + its column (the others' part ends long before)
    f = two_level(nodes=3, g=2)
    size = 3e6
    kernel, responses = make_kernel("tree", f, size), Responses()
    for p in (0, 3, 5):
        launch = np.zeros(f.world_size)
        launch[p] = 1.0
        want = REFERENCES["tree"](f, launch, size)
        np.testing.assert_allclose(1.0 + responses.column(kernel, p), want, rtol=1e-12)


@st.composite
def decided_cases(draw):
    f, _, size = draw(cases())
    n = f.world_size
    if n == 1:
        size = 0.0
    late = draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=1, max_size=3, unique=True))
    q = draw(st.integers(0, max(n - 1, 0)))
    slack = draw(st.lists(st.floats(0, 1e-4), min_size=n, max_size=n))
    extra = draw(st.lists(st.floats(0, 1e-4), min_size=len(late), max_size=len(late)))
    return f, size, late, q, np.array(slack), extra


@settings(max_examples=80)
@given(decided_cases())
def test_a_launch_past_the_gaps_decides_the_collective(case):
    """Rank p launches at least gap (previous finish c + A'[:, q] on the others) and pair_gap (the
    other late ranks) later: every rank then finishes at L_p + A[:, p]. The loose gaps bound the
    exact ones from above, and the cold gap does the same from any launch of the others."""
    f, size, late, q, slack, extra = case
    if f.world_size == 1:
        return
    kernel, source = make_kernel("tree", f, size), make_kernel("tree", f, size / 3)
    responses = Responses()
    p, others_late = late[0], late[1:]
    c = 0.5
    launch = c + responses.column(source, q) - slack  # the others: by their previous finish
    base = {r: float(launch[r]) for r in others_late}
    lp = c + responses.gap(kernel, p, source, q) + extra[0]
    lp = max([lp] + [base[r] + responses.pair_gap(kernel, p, r) + extra[0] for r in others_late])
    launch[p] = lp
    for r in others_late:
        launch[r] = base[r]
    np.testing.assert_allclose(kernel.finish_times(launch), lp + responses.column(kernel, p), rtol=1e-12)
    assert responses.loose_gap(kernel, p, source, q) >= responses.gap(kernel, p, source, q) - 1e-15
    # from an arbitrary launch of the others: the cold gap over their latest launch
    cold = c + slack
    cold[p] = float(cold.max()) + responses.cold_gap(kernel, p) + extra[0]
    np.testing.assert_allclose(kernel.finish_times(cold), cold[p] + responses.column(kernel, p), rtol=1e-12)


def test_a_launch_short_of_the_gap_can_be_overtaken():
    """The gap is tight: just short of it, some rank finishes later than L_p + A[:, p] (so the
    test above cannot pass with any gap)."""
    f = two_level(nodes=4, g=2)
    kernel, responses = make_kernel("tree", f, 4e6), Responses()
    p, q, c = 5, 0, 1.0
    launch = c + responses.column(kernel, q)
    gap = responses.gap(kernel, p, kernel, q)
    assert gap > 0
    launch[p] = c + gap - 1e-7
    assert (kernel.finish_times(launch) > launch[p] + responses.column(kernel, p) + 1e-9).any()


def test_at_reads_the_column_at_the_late_ranks_and_the_others_minimum():
    f = two_level(nodes=3, g=2)
    kernel, responses = make_kernel("tree", f, 2e6), Responses()
    col, at_ranks, low = responses.at(kernel, 2, (1, 4))
    assert col is responses.column(kernel, 2) and not col.flags.writeable
    assert at_ranks == [col[1], col[4]]
    assert low == min(col[x] for x in range(f.world_size) if x not in (1, 4))
    np.testing.assert_array_equal(responses.uniform(kernel), kernel.finish_times(np.zeros(f.world_size)))
    assert responses.top(kernel, 2) == col.max()


def test_responses_forget_past_their_bound_and_recompute_the_same_values():
    f = two_level(nodes=4, g=2)
    kernel = make_kernel("tree", f, 4e6)
    full, small = Responses(), Responses(max_elements=3 * f.world_size)
    for p in range(f.world_size):
        for q in (0, 3):
            assert small.gap(kernel, p, kernel, q) == full.gap(kernel, p, kernel, q)
            assert small.cold_gap(kernel, p) == full.cold_gap(kernel, p)
        assert small._elements <= small.max_elements
        assert len(small._column) + len(small._second) + len(small._uniform) <= 3
    assert len(full._column) == f.world_size  # unbounded here: every column kept
