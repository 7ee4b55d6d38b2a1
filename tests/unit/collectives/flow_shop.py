"""The slow, obvious reference for NCCL's staged NVLS kernels (tests only): loops through a
chain of stages, step by step, each stage's output held in a FIFO of NCCL_STEPS slots."""

import numpy as np

NCCL_STEPS = 8  # src/include/device.h


def flow_shop_us(stages, k, depth=NCCL_STEPS):
    """Makespan of k loops through `stages` in order, one loop at a time per stage, a stage's
    output held in `depth` slots until the next stage takes it (the Simple FIFO)."""
    m = len(stages)
    start = np.zeros((m, k))
    finish = np.zeros((m, k))
    for j in range(k):
        for i in range(m):
            t = 0.0
            if i > 0:
                t = max(t, finish[i - 1, j])
            if j > 0:
                t = max(t, finish[i, j - 1])
            if i + 1 < m and j >= depth:
                t = max(t, start[i + 1, j - depth])  # a free slot in the stage's output FIFO
            start[i, j] = t
            finish[i, j] = t + stages[i]
    return finish[-1, -1]
