"""PhysicalFit.extrapolation: beyond the logs' node count, or across nodes with more GPUs per
node than any multi-node log had (a fit from 1x8 and 2x1 never priced NVLink and the network
together: the H100 cluster's 10x8, its worst prediction, was flagged only for its node count)."""

import numpy as np
import pytest

from commsim.calibration.physical_fit import Measurement, PhysicalFit


def fit_of(*scales):
    ms = tuple(Measurement(f"{n}x{g}.txt", "all_reduce", n, g, np.array([1.0]), np.array([1.0])) for n, g in scales)
    fit = PhysicalFit.__new__(PhysicalFit)
    object.__setattr__(fit, "measurements", ms)
    return fit


@pytest.mark.parametrize("scales, nodes, gpus, note", [
    (((1, 8), (2, 1)), 2, 1, None),
    (((1, 8), (2, 1)), 1, 8, None),
    (((1, 8), (2, 1)), 2, 8, "extrapolating: 8 GPUs per node across nodes, where the logs crossed nodes with at most 1"),
    (((1, 8), (2, 1)), 10, 8, "extrapolating: 10 nodes is 5x the largest calibrated (2); 8 GPUs per node across "
                              "nodes, where the logs crossed nodes with at most 1"),
    (((1, 4), (2, 4)), 8, 4, "extrapolating: 8 nodes is 4x the largest calibrated (2)"),
    (((1, 4),), 16, 4, "extrapolating: 16 nodes is 16x the largest calibrated (1); 4 GPUs per node across nodes, "
                       "where no log crossed nodes"),
    (((1, 4), (2, 4)), 2, 4, None),
])
def test_the_note_names_each_way_the_prediction_leaves_the_logs(scales, nodes, gpus, note):
    assert fit_of(*scales).extrapolation(nodes, gpus) == note
    # without a GPU count only the node count is judged, as before
    assert fit_of(*scales).extrapolation(nodes) == (None if nodes <= max(n for n, _ in scales) else
                                                    f"extrapolating: {nodes} nodes is "
                                                    f"{nodes / max(n for n, _ in scales):g}x the largest calibrated "
                                                    f"({max(n for n, _ in scales)})")
