"""GPU tier: the nccl-tests-style sweep over NCCL (needs CUDA GPUs; skipped without them)."""

import pytest

torch = pytest.importorskip("torch")

from tests.gloo.test_validate_bench import check_rows  # noqa: E402
from validate import collective_bench  # noqa: E402
from validate.launch import launch  # noqa: E402


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 1, reason="needs a CUDA GPU")
def test_nccl_sweep_on_gpus(tmp_path):
    n = min(torch.cuda.device_count(), 2)
    if n < 2:
        pytest.skip("nccl all-reduce test needs 2 GPUs")
    sizes = [8, 1 << 20, 1 << 24]
    rows = launch(collective_bench.rank_sweep, n, "nccl", timeout_s=120, args=(sizes, 2, 5, True),
                  result_dir=str(tmp_path))[0]
    check_rows(rows, n, sizes)
