"""Fixtures the gloo tests share."""

import pytest


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """A one-rank gloo process group for the requesting module (a FileStore rendezvous), destroyed
    after it. torch is imported here, not at the top: without torch the modules skip themselves."""
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path_factory.mktemp("store") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()
