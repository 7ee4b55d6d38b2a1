"""The buckets torch DDP builds from the arguments the validate jobs pass are the scenario's
buckets (:func:`commsim.network.costs.ddp_buckets`), first bucket included: torch given
``bucket_cap_mb`` alone makes its first bucket the full cap, not the scenario's 1 MB."""

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from commsim.network.costs import ddp_buckets  # noqa: E402
from validate.ddp_job import bucket_kwargs  # noqa: E402

MIB = 2**20


def torch_buckets(kwargs):
    """Bytes of each bucket DDP all-reduces, in order, once it has rebuilt its buckets."""
    torch.manual_seed(0)
    # 1 MiB weights (256 x 1024 fp32), so that whole tensors fall on the MiB caps
    model = DDP(nn.Sequential(*[nn.Linear(1024 if i % 2 == 0 else 256, 256 if i % 2 == 0 else 1024, bias=False)
                                for i in range(8)]), **kwargs)
    sizes = []

    def hook(state, bucket):
        sizes.append(bucket.buffer().numel() * 4)
        return default_hooks.allreduce_hook(None, bucket)

    model.register_comm_hook(None, hook)
    x = torch.randn(2, 1024)
    for _ in range(3):  # DDP rebuilds its buckets after the first step
        sizes.clear()
        nn.functional.mse_loss(model(x), x).backward()
    return sizes


@pytest.mark.parametrize("first,cap", [(1 * MIB, 2 * MIB), (1 * MIB, 3 * MIB), (2 * MIB, 2 * MIB), (3 * MIB, 1 * MIB)])
def test_ddp_buckets_are_the_scenarios(group, first, cap):
    expect = ddp_buckets(8 * MIB, first, cap).tolist()
    assert torch_buckets(bucket_kwargs(first, cap)) == expect
