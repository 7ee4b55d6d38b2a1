"""The max-plus recurrences, written once: exact small cases."""

import numpy as np

from commsim.collectives.maxplus import pipeline, ring_recurrence


def test_ring_recurrence_by_hand():
    # 3 ranks, hop times 1, 2, 3 into ranks 0, 1, 2; rank 1 launches at 10
    f = ring_recurrence(np.array([0.0, 10.0, 0.0]), np.array([1.0, 2.0, 3.0]), 2)
    # step 1: [max(0,0)+1, max(10,0)+2, max(0,10)+3] = [1, 12, 13]; step 2: [max(1,13)+1, max(12,1)+2, max(13,12)+3]
    assert f.tolist() == [14.0, 14.0, 16.0]


def test_ring_recurrence_runs_independent_rings_along_leading_axes():
    launch = np.array([[0.0, 10.0, 0.0], [0.0, 0.0, 0.0]])
    hop = np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])
    assert ring_recurrence(launch, hop, 2).tolist() == [[14.0, 14.0, 16.0], [2.0, 2.0, 2.0]]


def test_pipeline_by_hand():
    # chunks ready at 0, 0, 5 through a stage that holds each for 2: ends 2, 4, 7
    assert pipeline(np.array([[0.0, 0.0, 5.0]]), np.array([2.0])).tolist() == [[2.0, 4.0, 7.0]]
