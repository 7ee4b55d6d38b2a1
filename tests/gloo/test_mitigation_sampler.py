"""validate.mitigation_job.HardwareSampler on a one-rank gloo group: a slow case's compute is
sampled after the rank's stall, as its step runs it (the ranks' computes overlap as in the steps)."""

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import validate.mitigation_job as job  # noqa: E402
from validate.compute_timing import synthetic_model  # noqa: E402


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    store = dist.FileStore(str(tmp_path_factory.mktemp("store") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_sample_sleeps_the_steps_stall_between_the_barrier_and_the_compute(group, monkeypatch):
    module = synthetic_model(64 * 64 + 64)
    model = DDP(module)
    x = y = torch.randn(4, 64)
    sampler = job.HardwareSampler(model, x, y, 64, 4 * (64 * 64 + 64), iters=1)
    events = []
    real_step = job.compute_step
    monkeypatch.setattr(job.dist, "barrier", lambda *a, **k: events.append("barrier"))
    monkeypatch.setattr(job.time, "sleep", lambda s: events.append(("sleep", s)))
    monkeypatch.setattr(job, "compute_step", lambda *a: (events.append("compute"), real_step(*a))[1])
    sampler.sample(0.03)
    assert events == ["barrier", ("sleep", 0.03), "compute"]
    del events[:]
    sampler.sample()  # no stall: nothing slept, the ranks side by side after the barrier
    assert events == ["barrier", "compute"]
    assert len(sampler.samples["forward_s"]) == 2
